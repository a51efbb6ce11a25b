"""JSON shaping at the HTTP edge: engine values in, response bodies out.

Routes build their bodies here directly instead of running them through response
models (the models in ``_schemas`` document the responses; the schemathesis test keeps
the two in step). Positions are written ``"L:E"``, times ISO-8601 UTC with milliseconds,
byte values as ``value_b64``.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from typing import Any

from fastapi.responses import Response, StreamingResponse

from txnstream.api import (
    InvalidArgumentError,
    OutgoingMessage,
    PartitionMessage,
    Position,
    TooLargeError,
)

from ._schemas import MessageIn


def json_bytes(content: Any) -> bytes:
    """Compact UTF-8 JSON of ``content``; never fails on values JSON cannot hold."""
    try:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        # Values stored through the embedded API may hold bytes, non-string keys or
        # non-finite floats; never fail a response for that.
        text = json.dumps(_sanitize(content), ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8")


def _sanitize(value: Any) -> Any:
    if isinstance(value, Position):  # a tuple underneath: written "L:E" like everywhere
        return str(value)
    if isinstance(value, dict):
        return {str(k): _sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_sanitize(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def positions_json(positions: Sequence[Position], *, increasing: bool = False) -> bytes:
    """``["L:E", ...]`` of ``positions``. A run of consecutive entries of one ledger (what
    a produce answers unless its batch crossed a ledger) is written by one ``join``: a
    ``str`` and a JSON string per position cost ~0.4 us. ``increasing``: the caller
    knows they strictly increase (one topic's appends), so the ends tell a run."""
    count = len(positions)
    if count > 1:
        ledger, first = positions[0]
        entries = range(first, first + count)
        if positions[-1] == (ledger, first + count - 1) and (
            increasing
            or (
                list(map(_ENTRY_ID, positions)) == list(entries)
                and all(map(ledger.__eq__, map(_LEDGER_ID, positions)))
            )
        ):
            prefix = f"{ledger}:"
            between = '","' + prefix
            return ('["' + prefix + between.join(map(str, entries)) + '"]').encode()
    return ("[" + ",".join(f'"{p}"' for p in positions) + "]").encode()


_LEDGER_ID, _ENTRY_ID = itemgetter(0), itemgetter(1)


def ok(content: Any, status: int = 200) -> Response:
    """A JSON response of ``content``."""
    return Response(json_bytes(content), status_code=status, media_type="application/json")


def ok_pages(
    key: str,
    first: Iterable[list[Any]],
    rest: AsyncGenerator[list[Any], None],
    item: Callable[[Any], Any],
) -> StreamingResponse:
    """``{key: [item(x), ...]}`` as a chunked response rendered one page per chunk: the
    pages of ``first``, then those of ``rest`` (closed when the response ends, also when
    the client goes away). For listings too large to hold or render in one step; an
    error after the first chunk can only cut the body short."""

    async def pages() -> AsyncIterator[list[Any]]:
        for page in first:
            yield page
        async for page in rest:
            yield page

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield b'{"' + key.encode() + b'":['
            separator = b""
            async for page in pages():
                if page:  # (an empty one would leave two commas)
                    yield separator + json_bytes([item(x) for x in page])[1:-1]
                    separator = b","
            yield b"]}"
        finally:
            await rest.aclose()

    return StreamingResponse(chunks(), media_type="application/json")


def error_body(code: str, message: str) -> bytes:
    """The contract's error body ``{"error": {"code", "message"}}`` as bytes."""
    return json_bytes({"error": {"code": code, "message": message}})


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    """A JSON error response with the contract's error body."""
    body = error_body(code, message)
    return Response(body, status, headers=headers, media_type="application/json")


def iso(moment: datetime) -> str:
    """ISO-8601 in UTC with milliseconds and a ``Z`` (naive times count as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def pos(position: Position | None) -> str | None:
    """``"L:E"`` or None."""
    return None if position is None else str(position)


def _put_value(out: dict[str, Any], value: Any) -> None:
    if isinstance(value, bytes | bytearray | memoryview):
        out["value_b64"] = base64.b64encode(bytes(value)).decode("ascii")
    else:
        out["value"] = value


def message_json(msg: Any) -> dict[str, Any]:
    """A delivered message (``MessageOut``)."""
    out: dict[str, Any] = {"position": str(msg.position)}
    _put_value(out, msg.value)
    out["key"] = msg.key
    out["properties"] = msg.properties
    out["txn"] = None if msg.txn is None else str(msg.txn)
    out["publish_time"] = iso(msg.publish_time)
    out["redelivery_count"] = msg.redelivery_count
    if isinstance(msg, PartitionMessage):  # from a subscription on a partitioned topic
        out["topic"] = msg.topic
    return out


def entry_json(entry: Any) -> dict[str, Any]:
    """One raw entry of a range fetch (``FetchedEntryOut``)."""
    out: dict[str, Any] = {
        "position": str(entry.position),
        "kind": _name(entry.kind),
        "txn": None if entry.txn is None else str(entry.txn),
        "key": entry.key,
    }
    _put_value(out, entry.value)
    out["properties"] = entry.properties or {}
    out["publish_time"] = iso(entry.publish_time)
    return out


def _name(value: Any) -> str:
    """A lowercase enum name (``EntryKind.COMMIT`` -> ``commit``) or the string itself."""
    if isinstance(value, str):
        return value
    label = getattr(value, "label", None)
    if isinstance(label, str):
        return label
    name = getattr(value, "value", None)
    return name if isinstance(name, str) else str(getattr(value, "name", value)).lower()


def txn_json(info: Any) -> dict[str, Any]:
    """A transaction (``TxnResponse``) from the engine's transaction info."""
    return {
        "txn": str(info.txn),
        "state": _name(info.state),
        "label": info.label,
        "topics": list(info.topics),
        "fenced": bool(info.fenced),
        "timeout_ms": info.timeout_ms,
        "created_at": iso(info.created_at),
        "deadline": iso(info.deadline),
        "reason": info.reason,
        "owner": getattr(info, "owner", None),
    }


def check_b64_size(text: str, max_message_bytes: int) -> None:
    """:class:`TooLargeError` if base64 ``text`` decodes to more than the limit (checked
    before decoding it)."""
    decoded_size = len(text) // 4 * 3 - text[-2:].count("=")
    if decoded_size > max_message_bytes:
        raise TooLargeError(
            f"message value of {decoded_size} bytes exceeds the limit of {max_message_bytes} bytes"
        )


def outgoing(message: MessageIn, max_message_bytes: int) -> OutgoingMessage:
    """The engine's message from a request one; decodes ``value_b64``.

    Raises :class:`TooLargeError` before decoding an oversize value and
    :class:`InvalidArgumentError` for bad base64.
    """
    if "value_b64" in message.model_fields_set:
        text = message.value_b64
        check_b64_size(text, max_message_bytes)
        try:
            value: Any = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidArgumentError(f"value_b64 is not valid base64: {exc}") from None
    else:
        value = message.value
    return OutgoingMessage(value, message.key, message.properties or {}, message.deliver_at_ms())
