"""The Spark ``url`` mode's own small synchronous client of the HTTP API (HTTP_API.md).

Reading uses the range fetch (``GET /v1/topics/{t}/fetch``), whose answer carries the
aborted transactions with data in the returned range. Writing uses transactions with
labels, ``POST /v1/topics/{t}/messages`` with ``txn``, the label-prefix listing and the
atomic ``POST /v1/transactions/finish``. Kept in this one module so that the shared
client of ``api/client`` can replace it in one place.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import httpx

from api import InvalidArgumentError, Position, TxnStreamSourceError

from ._common import READ_COMMITTED, SourceOptions


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
        first = answer_position(entries[0]["position"]) if entries else None
        key = "stable_position" if isolation == READ_COMMITTED else "last_confirmed"
        limit = body.get(key)
        return first, None if limit is None else answer_position(limit)

    def entries_per_ledger(self) -> float | None:
        """The topic's average ledger size (entries, markers included), from its stats."""
        try:
            stats = self._call("GET", f"/v1/topics/{self.topic}/stats")
            return float(stats["entries"]) / max(1, int(stats["ledgers"]))
        except (TxnStreamHttpError, KeyError, TypeError, ValueError):
            return None

    def ledgers(self) -> list[dict[str, Any]] | None:
        """The topic's ledgers (``GET .../ledgers``), or None from a server without the
        listing."""
        try:
            body = self._call("GET", f"/v1/topics/{self.topic}/ledgers")
        except TxnStreamHttpError as exc:
            if exc.status == 404 and "no such route" in str(exc):
                return None
            raise
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


def answer_position(text: str) -> Position:
    """A position in a server answer; a clear error if it is malformed."""
    try:
        return Position.parse(text)
    except InvalidArgumentError:
        raise TxnStreamSourceError(f"the server answered a bad position {text!r}") from None
