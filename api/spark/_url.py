"""The Spark ``url`` mode: plan a read into windows of ledgers and read each one.

Each task reads its window with the range fetch; every answer carries the aborted
transactions with data in its range, so a task drops aborted data with no other state.
With the server's ledger listing (``GET .../ledgers``) partitions follow the real
ledgers, and an offloaded ledger is a partition of its own that the task reads straight
from the object store: no broker in the path for cold data.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from api import Position

from ._common import READ_COMMITTED, Window, make_batch
from ._http_client import HttpClient, answer_position

_PAGE = 1000


@dataclass(frozen=True, slots=True)
class RemotePart:
    """Entries ``lo <= e < hi`` of an offloaded ledger, read from the object at ``url``."""

    url: str
    ledger_id: int
    lo: int
    hi: int


def split_listing(
    window: Window,
    ledgers: Sequence[dict[str, Any]],
    max_entries: int,
    object_url: Callable[[int, str | None], str | None],
) -> list[Window | RemotePart]:
    """Partitions of ``window`` by the server's ledger listing, one per real ledger: an
    offloaded ledger whole (``object_url(ledger, recorded url)`` says where to read it),
    a local one as a window, cut into ranges of at most ``max_entries`` entries."""
    parts: list[Window | RemotePart] = []
    for item in ledgers:
        ledger_id, entries = int(item["ledger"]), int(item["entries"])
        if ledger_id < window.start.ledger_id or ledger_id > window.end.ledger_id:
            continue
        lo = window.start.entry_id if ledger_id == window.start.ledger_id else 0
        hi = min(entries, window.end.entry_id) if ledger_id == window.end.ledger_id else entries
        if lo >= hi:
            continue
        url = object_url(ledger_id, item.get("url")) if item.get("location") == "remote" else None
        if url is not None:
            parts.append(RemotePart(url, ledger_id, lo, hi))
            continue
        while lo < hi:
            upper = min(hi, lo + max_entries)
            parts.append(Window(Position(ledger_id, lo), Position(ledger_id, upper)))
            lo = upper
    return parts


def split_ledgers(
    window: Window, max_entries: int, entries_per_ledger: float | None = None
) -> list[Window]:
    """Windows of whole ledgers covering ``window``.

    Ledger sizes are unknown over HTTP: a window holds ``max_entries /
    entries_per_ledger`` ledgers (the topic's average, from its stats; one ledger when
    unknown). The last ledger, whose extent is known, is cut into ranges of at most
    ``max_entries``.
    """
    per_part = 1
    if entries_per_ledger and entries_per_ledger > 0:
        per_part = max(1, int(max_entries // entries_per_ledger))
    parts: list[Window] = []
    last = window.end.ledger_id
    ledger_id = window.start.ledger_id
    lo = window.start
    while ledger_id < last:
        upto = min(ledger_id + per_part, last)
        parts.append(Window(lo, Position(upto, 0)))
        ledger_id, lo = upto, Position(upto, 0)
    while lo < window.end:
        hi = Position(last, min(window.end.entry_id, lo.entry_id + max_entries))
        parts.append(Window(lo, hi))
        lo = hi
    return [part for part in parts if not part.empty]


def read_window(
    client: HttpClient, window: Window, isolation: str, fetch_size: int
) -> Iterator[Any]:
    """Record batches of the data entries in ``window``, aborted data dropped using the
    ``aborted`` list of each fetch answer (read_committed)."""
    position = window.start
    size = min(fetch_size, _PAGE)  # a first small page: the ledger may not exist
    while position < window.end:
        body = client.fetch(position, size, isolation)
        entries = body["entries"]
        if not entries:
            return
        aborted = (
            {a["txn"] for a in body.get("aborted", ())} if isolation == READ_COMMITTED else set()
        )
        ledgers: list[int] = []
        entry_ids: list[int] = []
        keys: list[str | None] = []
        values: list[Any] = []
        props: list[dict[str, str] | None] = []
        txns: list[str | None] = []
        publish: list[str] = []
        done = False
        for entry in entries:
            pos = answer_position(entry["position"])
            if pos >= window.end:
                done = True
                break
            if entry["kind"] != "data":
                continue
            txn = entry.get("txn")
            if txn is not None and txn in aborted:
                continue
            ledgers.append(pos.ledger_id)
            entry_ids.append(pos.entry_id)
            keys.append(entry.get("key"))
            if "value_b64" in entry:
                values.append(base64.b64decode(entry["value_b64"]))
            else:
                values.append(entry.get("value"))
            props.append(entry.get("properties"))
            txns.append(None if txn is None else str(txn))
            publish.append(entry["publish_time"])
        if entry_ids:
            yield make_batch(
                ledgers,
                entry_ids,
                keys,
                values,
                props,
                txns,
                pa.array(publish, pa.string()),
                txn_text=True,
            )
        if done:
            return
        position = answer_position(body["next"])
        size = fetch_size
