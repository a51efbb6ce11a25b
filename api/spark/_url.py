"""The Spark ``url`` mode: a running server, through the one HTTP client (``txnstream.api.client``).

Reading plans a read into windows of ledgers; each task reads its window with the range
fetch, whose every answer carries the aborted transactions with data in its range, so a
task drops aborted data with no other state. Writing uses transactions with labels,
sends naming the transaction, the label-prefix listing and the atomic ``finish``
(:mod:`txnstream.api.spark._sink`). :class:`ServerClient` turns the client's errors into
:class:`~txnstream.api.TxnStreamSourceError` texts that name the server and the topic.
With the server's ledger listing (``GET .../ledgers``) partitions follow the real
ledgers, and an offloaded ledger is a partition of its own that the task reads straight
from the object store: no broker in the path for cold data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

import pyarrow as pa  # type: ignore[import-untyped]

from txnstream.api import InvalidArgumentError, Position
from txnstream.api.client import (
    Client,
    TxnStreamHttpError,
    TxnStreamTransportError,
    message_value,
    wire_message,
)

from ._common import READ_COMMITTED, SourceOptions, Window, make_batch
from ._errors import TxnStreamSourceError

T = TypeVar("T")
_PAGE = 1000


class ServerClient:
    """The url mode's view of one server and topic (blocking); use as a context manager.

    Every failure is a :class:`~txnstream.api.TxnStreamSourceError` naming the server (and the
    topic when the server does not know it).
    """

    def __init__(self, options: SourceOptions) -> None:
        assert options.url is not None
        self.url = options.url
        self.topic = options.topic
        self._client = Client(options.url, timeout=options.http_timeout, token=options.token)

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def _call(self, method: str, path: str, send: Callable[[Client], T]) -> T:
        """``send(client)``, its errors in the words of the data source."""
        try:
            return send(self._client)
        except TxnStreamTransportError as exc:
            cause = exc.__cause__
            detail = (str(cause) or type(cause).__name__) if cause is not None else exc.message
            raise TxnStreamSourceError(
                f"cannot reach the txnstream server at {self.url}: {detail}"
            ) from None
        except TxnStreamHttpError as exc:
            if exc.status == 404 and path.startswith("/v1/topics/"):
                text = f"topic {self.topic!r} not found on the server {self.url} ({exc.message})"
            elif exc.status in (401, 403):
                text = (
                    f"{method} {path} refused by {self.url}: {exc.status} {exc.code}:"
                    f" {exc.message} (the server runs with --auth: set .option('token', ...)"
                    " to a token allowed on the topic)"
                )
            else:
                text = (
                    f"{method} {path} failed on {self.url}: {exc.status} {exc.code}: {exc.message}"
                )
            raise TxnStreamSourceError(text) from None

    # -- reading -------------------------------------------------------------------

    def fetch(self, start: Position | None, max_entries: int, isolation: str) -> dict[str, Any]:
        """One range fetch of the topic from ``start`` (None: the first retained entry)."""
        return self._call(
            "GET",
            f"/v1/topics/{self.topic}/fetch",
            lambda c: c.fetch(self.topic, start, max=max_entries, isolation=isolation),
        )

    def limits(self, isolation: str) -> tuple[Position | None, Position | None]:
        """``(first retained position, read limit)`` of the topic for ``isolation``."""
        body = self.fetch(None, 1, isolation)
        entries = body["entries"]
        first = answer_position(entries[0]["position"]) if entries else None
        key = "stable_position" if isolation == READ_COMMITTED else "last_confirmed"
        limit = body.get(key)
        return first, None if limit is None else answer_position(limit)

    def entries_per_ledger(self) -> float | None:
        """The topic's average ledger size (entries, markers included), from its stats."""
        try:
            stats = self._call(
                "GET", f"/v1/topics/{self.topic}/stats", lambda c: c.stats(self.topic)
            )
            return float(stats["entries"]) / max(1, int(stats["ledgers"]))
        except (TxnStreamSourceError, KeyError, TypeError, ValueError):
            return None

    def ledgers(self) -> list[dict[str, Any]] | None:
        """The topic's ledgers (``GET .../ledgers``), or None from a server without the
        listing."""
        path = f"/v1/topics/{self.topic}/ledgers"

        def get(client: Client) -> Any:
            try:
                return client.request("GET", path).json()
            except TxnStreamHttpError as exc:
                if exc.status == 404 and "no such route" in exc.message:
                    return None  # an older server: split by the average ledger size
                raise

        body = self._call("GET", path, get)
        ledgers = body.get("ledgers") if isinstance(body, dict) else None
        return ledgers if isinstance(ledgers, list) else None

    def position_after(self, start: Position, count: int, isolation: str) -> Position:
        """Where a read of at most ``count`` entries from ``start`` stops (exclusive)."""
        position = start
        while count > 0:
            body = self.fetch(position, min(count, 10_000), isolation)
            if not body["entries"]:
                break
            count -= len(body["entries"])
            position = answer_position(body["next"])
        return position

    # -- writing (the Sink of api.spark._sink) -------------------------------------

    def check_topic(self) -> None:
        self.fetch(None, 1, READ_COMMITTED)

    def begin(self, label: str, timeout_ms: int) -> str:
        body = self._call(
            "POST",
            "/v1/transactions",
            lambda c: c.begin(label=label, timeout_ms=timeout_ms),
        )
        return str(body["txn"])

    def send(
        self, txn: str, messages: Sequence[tuple[str | None, Any, dict[str, str] | None]]
    ) -> None:
        wire = [wire_message(value, key=key, properties=props) for key, value, props in messages]
        self._call(
            "POST",
            f"/v1/topics/{self.topic}/messages",
            lambda c: c.produce(self.topic, wire, txn=txn),
        )

    def open_txns(self, label_prefix: str) -> list[str]:
        infos = self._call(
            "GET",
            "/v1/transactions",
            lambda c: c.list_transactions(state="open", label_prefix=label_prefix),
        )
        return [str(t["txn"]) for t in infos]

    def finish(self, commit: Sequence[str], abort: Sequence[str], key: str | None) -> bool:
        """Decide atomically; True if ``key`` was already used (everything aborted)."""
        body = self._call(
            "POST",
            "/v1/transactions/finish",
            lambda c: c.finish(commit=commit, abort=abort, idempotence_key=key),
        )
        return bool(body.get("duplicate", False))


def answer_position(text: str) -> Position:
    """A position in a server answer; a clear error if it is malformed."""
    try:
        return Position.parse(text)
    except InvalidArgumentError:
        raise TxnStreamSourceError(f"the server answered a bad position {text!r}") from None


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
    client: ServerClient, window: Window, isolation: str, fetch_size: int
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
            values.append(message_value(entry))
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
