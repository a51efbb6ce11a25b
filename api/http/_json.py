"""Response bodies out: the JSON of a wire struct (``_wire``), the produce answer's
positions, paged listings and the contract's error body."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any

from fastapi.responses import Response, StreamingResponse

from txnstream.api import Position

from ._wire import ErrorDetail, ErrorResponse, encode


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
    """A JSON response of ``content`` (a wire struct, or the engine's stats dict)."""
    return Response(encode(content), status_code=status, media_type="application/json")


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
                    yield separator + encode([item(x) for x in page])[1:-1]
                    separator = b","
            yield b"]}"
        finally:
            await rest.aclose()

    return StreamingResponse(chunks(), media_type="application/json")


def error_body(code: str, message: str) -> bytes:
    """The contract's error body ``{"error": {"code", "message"}}`` as bytes."""
    return encode(ErrorResponse(error=ErrorDetail(code=code, message=message)))


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    """A JSON error response with the contract's error body."""
    body = error_body(code, message)
    return Response(body, status, headers=headers, media_type="application/json")
