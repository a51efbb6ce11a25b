"""Range fetch: ``GET /v1/topics/{topic}/fetch``, raw entries plus the aborted txns among them.

A stateless reader (the HTTP client, a Spark task) filters aborted data itself with the
``aborted`` list, so the server keeps no per-reader state.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from txnstream.api import InvalidArgumentError

from ._auth import principal_of
from ._json import ok
from ._limits import DEFAULT_RESPONSE_BYTES, MaxBytes
from ._params import TopicName, documented, engine_of
from ._wire import (
    FETCH_FROM_PATTERN,
    TIMESTAMP_TEXT,
    AbortedTxnOut,
    FetchedEntryOut,
    FetchResponse,
    Isolation,
    parse_timestamp,
    pos,
)

router = APIRouter(tags=["messages"])


@router.get("/v1/topics/{topic}/fetch", **documented(FetchResponse, errors=(404,)))
async def fetch(
    topic: TopicName,
    request: Request,
    start: Annotated[
        str | None,
        Query(
            alias="from",
            pattern=FETCH_FROM_PATTERN,
            description="First position to return ('L:E', inclusive) or earliest (default).",
        ),
    ] = None,
    max_entries: Annotated[
        int, Query(alias="max", ge=1, le=10_000, description="At most this many entries.")
    ] = 1000,
    isolation: Annotated[
        Isolation,
        Query(
            description="read_committed: up to the stable position; read_uncommitted: up to"
            " last confirmed."
        ),
    ] = "read_committed",
    max_bytes: MaxBytes = DEFAULT_RESPONSE_BYTES,
    timestamp: Annotated[
        str | None,
        Query(
            max_length=64,
            description=f"Instead of 'from': start at the first entry published at or after"
            f" this time. {TIMESTAMP_TEXT}",
        ),
    ] = None,
) -> Response:
    """Raw entries from ``from`` (inclusive), or from a publish time, with the aborted
    transactions among them."""
    engine = engine_of(request)
    begin_at: str | datetime | None = None if start in (None, "earliest") else start
    if timestamp is not None:
        if start is not None:
            raise InvalidArgumentError("give 'from' or 'timestamp', not both")
        try:
            begin_at = parse_timestamp(timestamp)
        except ValueError as exc:
            raise InvalidArgumentError(str(exc)) from None
    result = await engine.fetch(
        topic,
        begin_at,
        max=max_entries,
        isolation=isolation,
        max_bytes=max_bytes,
        principal=principal_of(request),
    )
    aborted = [
        AbortedTxnOut(txn=str(a.txn), first_position=str(a.first_position)) for a in result.aborted
    ]
    return ok(
        FetchResponse(
            entries=[FetchedEntryOut.of(e) for e in result.entries],
            aborted=aborted,
            next=str(result.next),
            stable_position=pos(result.stable_position),
            last_confirmed=pos(result.last_confirmed),
        )
    )
