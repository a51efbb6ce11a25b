"""Transactions: begin, list, get, commit, abort and finish (``/v1/transactions``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from txnstream.api import TxnInfo

from ._auth import principal_of
from ._json import ok, ok_pages
from ._params import TxnParam, body_of, documented, engine_of
from ._wire import (
    BeginRequest,
    FinishRequest,
    FinishResponse,
    TxnListResponse,
    TxnResponse,
    TxnState,
)

router = APIRouter(tags=["transactions"])


@router.post(
    "/v1/transactions",
    **documented(TxnResponse, status=201, body=BeginRequest, optional=True),
)
async def begin(request: Request) -> Response:
    """Begin a transaction; a reused ``transactional_id`` fences the previous one."""
    engine = engine_of(request)
    req = await body_of(request, BeginRequest, optional=True)
    timeout = None if req.timeout_ms is None else req.timeout_ms / 1000
    principal = principal_of(request)
    txn = await engine.begin(
        timeout=timeout,
        transactional_id=req.transactional_id,
        label=req.label,
        principal=principal,
    )
    timeout_ms = req.timeout_ms
    if timeout_ms is None:
        timeout_ms = round(engine.config.default_txn_timeout * 1000)
    answer = TxnResponse(
        txn=str(txn.id),
        state="open",
        label=req.label,
        topics=[],
        fenced=False,
        timeout_ms=timeout_ms,
        owner=None if principal is None else principal.name,
    )
    return ok(answer, 201)


@router.get("/v1/transactions", **documented(TxnListResponse))
async def list_transactions(
    request: Request,
    state: Annotated[TxnState | None, Query(description="Only transactions in this state.")] = None,
    label_prefix: Annotated[
        str | None, Query(max_length=200, description="Only labels starting with this.")
    ] = None,
    older_than_ms: Annotated[
        int | None,
        Query(ge=0, le=10**12, description="Only those begun more than this many ms ago."),
    ] = None,
) -> Response:
    """Transactions, optionally filtered by state, label prefix and age (begun more than
    ``older_than_ms`` ago: hanging transactions)."""
    engine = engine_of(request)
    pages = engine.iter_transactions(
        state, label_prefix, older_than_ms, principal=principal_of(request)
    )
    # A bad filter fails on the first page, before any byte is sent.
    first: list[TxnInfo] = await anext(pages, [])
    second = await anext(pages, None)
    if second is None:
        return ok(TxnListResponse(transactions=[TxnResponse.of(info) for info in first]))
    # Thousands (an unfiltered listing names every transaction ended within the
    # retention): one page of infos in memory and rendered per step, not all of them.
    return ok_pages("transactions", (first, second), pages, TxnResponse.of)


@router.post(
    "/v1/transactions/finish",
    **documented(FinishResponse, errors=(404, 409), body=FinishRequest),
)
async def finish(request: Request) -> Response:
    """Commit and abort several transactions in one atomic decision."""
    engine = engine_of(request)
    body = await body_of(request, FinishRequest)
    result = await engine.finish(
        commit=body.commit,
        abort=body.abort,
        idempotence_key=body.idempotence_key,
        principal=principal_of(request),
    )
    return ok(
        FinishResponse(
            committed=[str(t) for t in result.committed],
            aborted=[str(t) for t in result.aborted],
            duplicate=result.duplicate,
        )
    )


@router.get("/v1/transactions/{txn}", **documented(TxnResponse, errors=(404,)))
async def get_transaction(txn: TxnParam, request: Request) -> Response:
    """One transaction's state, label, topics and whether it was fenced."""
    engine = engine_of(request)
    return ok(TxnResponse.of(await engine.get_transaction(txn, principal=principal_of(request))))


@router.post("/v1/transactions/{txn}/commit", **documented(TxnResponse, errors=(404, 409)))
async def commit(txn: TxnParam, request: Request) -> Response:
    """Commit; 200 once the markers are durable (again 200 if already committed)."""
    engine = engine_of(request)
    return ok(TxnResponse.of(await engine.commit(txn, principal=principal_of(request))))


@router.post("/v1/transactions/{txn}/abort", **documented(TxnResponse, errors=(404, 409)))
async def abort(txn: TxnParam, request: Request) -> Response:
    """Abort (again 200 if already aborted)."""
    engine = engine_of(request)
    return ok(TxnResponse.of(await engine.abort(txn, principal=principal_of(request))))
