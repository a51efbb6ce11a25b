"""The Spark ``url`` mode: a small synchronous client of the HTTP API (HTTP_API.md).

Reading uses the range fetch (``GET /v1/topics/{t}/fetch``), whose answer carries the
aborted transactions with data in the returned range, so each Spark task drops aborted
data from its own answers with no other state. Writing uses transactions with labels,
``POST /v1/topics/{t}/messages`` with ``txn``, the label-prefix listing and the atomic
``POST /v1/transactions/finish``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import httpx
import pyarrow as pa  # type: ignore[import-untyped]

from ledger import InvalidArgumentError, Position

from ._spark_common import (
    READ_COMMITTED,
    SourceOptions,
    TxnStreamSourceError,
    Window,
    make_batch,
)

_PAGE = 1000


class TxnStreamHttpError(TxnStreamSourceError):
    """An error answer of the server (``status`` and the contract's ``code``)."""

    def __init__(self, message: str, status: int, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class HttpClient:
    """Blocking client of one txnstream server; use as a context manager."""

    def __init__(self, options: SourceOptions) -> None:
        assert options.url is not None
        self.url = options.url
        self.topic = options.topic
        self._http = httpx.Client(base_url=options.url, timeout=options.http_timeout)

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise TxnStreamSourceError(
                f"cannot reach the txnstream server at {self.url}: {exc or type(exc).__name__}"
            ) from None
        if response.status_code < 400:
            return response.json()
        try:
            error = response.json()["error"]
            code, text = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            code, text = "unknown", response.text[:500]
        if response.status_code == 404 and path.startswith("/v1/topics/"):
            text = f"topic {self.topic!r} not found on the server {self.url} ({text})"
        else:
            text = f"{method} {path} failed on {self.url}: {response.status_code} {code}: {text}"
        raise TxnStreamHttpError(text, response.status_code, code)

    # -- reading -------------------------------------------------------------------

    def fetch(self, start: Position | None, max_entries: int, isolation: str) -> dict[str, Any]:
        params = {"max": str(max_entries), "isolation": isolation}
        if start is not None:
            params["from"] = str(start)
        body: dict[str, Any] = self._call("GET", f"/v1/topics/{self.topic}/fetch", params=params)
        return body

    def limits(self, isolation: str) -> tuple[Position | None, Position | None]:
        """``(first retained position, read limit)`` of the topic for ``isolation``."""
        body = self.fetch(None, 1, isolation)
        entries = body["entries"]
        first = _position(entries[0]["position"]) if entries else None
        key = "stable_position" if isolation == READ_COMMITTED else "last_confirmed"
        limit = body.get(key)
        return first, None if limit is None else _position(limit)

    def entries_per_ledger(self) -> float | None:
        """The topic's average ledger size (entries, markers included), from its stats."""
        try:
            stats = self._call("GET", f"/v1/topics/{self.topic}/stats")
            return float(stats["entries"]) / max(1, int(stats["ledgers"]))
        except (TxnStreamHttpError, KeyError, TypeError, ValueError):
            return None

    def position_after(self, start: Position, count: int, isolation: str) -> Position:
        """Where a read of at most ``count`` entries from ``start`` stops (exclusive)."""
        position = start
        while count > 0:
            body = self.fetch(position, min(count, 10_000), isolation)
            if not body["entries"]:
                break
            count -= len(body["entries"])
            position = _position(body["next"])
        return position

    # -- writing -------------------------------------------------------------------

    def check_topic(self) -> None:
        self.fetch(None, 1, READ_COMMITTED)

    def begin(self, label: str, timeout_ms: int) -> str:
        body = self._call(
            "POST", "/v1/transactions", json={"label": label, "timeout_ms": timeout_ms}
        )
        return str(body["txn"])

    def send(
        self, txn: str, messages: Sequence[tuple[str | None, Any, dict[str, str] | None]]
    ) -> None:
        wire = []
        for key, value, properties in messages:
            item: dict[str, Any] = {"key": key, "properties": properties or {}}
            if isinstance(value, bytes):
                item["value_b64"] = base64.b64encode(value).decode("ascii")
            else:
                item["value"] = value
            wire.append(item)
        self._call("POST", f"/v1/topics/{self.topic}/messages", json={"messages": wire, "txn": txn})

    def open_txns(self, label_prefix: str) -> list[str]:
        body = self._call(
            "GET", "/v1/transactions", params={"state": "open", "label_prefix": label_prefix}
        )
        return [str(t["txn"]) for t in body["transactions"]]

    def finish(self, commit: Sequence[str], abort: Sequence[str], key: str | None) -> bool:
        """Decide atomically; True if ``key`` was already used (everything aborted)."""
        payload: dict[str, Any] = {"commit": list(commit), "abort": list(abort)}
        if key is not None:
            payload["idempotence_key"] = key
        body = self._call("POST", "/v1/transactions/finish", json=payload)
        return bool(body.get("duplicate", False))


def _position(text: str) -> Position:
    try:
        return Position.parse(text)
    except InvalidArgumentError:
        raise TxnStreamSourceError(f"the server answered a bad position {text!r}") from None


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
            pos = _position(entry["position"])
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
        position = _position(body["next"])
        size = fetch_size
