"""Transactions: begin, list, get, commit, abort and finish (``/v1/transactions``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from txnstream.api import TxnInfo

from ._auth import principal_of
from ._errors import responses
from ._json import ok, ok_pages, txn_json
from ._params import TxnParam, engine_of, json_body, request_body, validated
from ._responses import FinishResponse, TxnListResponse, TxnResponse
from ._schemas import BeginRequest, FinishRequest, TxnState

router = APIRouter(tags=["transactions"])


@router.post(
    "/v1/transactions",
    response_model=TxnResponse,
    status_code=201,
    responses=responses(),
    openapi_extra=request_body(BeginRequest, required=False),
)
async def begin(request: Request) -> Response:
    """Begin a transaction; a reused ``transactional_id`` fences the previous one."""
    engine = engine_of(request)
    raw = await json_body(request)  # (read raw: the direct routes serves this route, see _direct)
    req = BeginRequest() if raw.strip() in (b"", b"null") else validated(raw, BeginRequest)
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
    return ok(
        {
            "txn": str(txn.id),
            "state": "open",
            "label": req.label,
            "topics": [],
            "fenced": False,
            "timeout_ms": timeout_ms,
            "owner": None if principal is None else principal.name,
        },
        201,
    )


@router.get("/v1/transactions", response_model=TxnListResponse, responses=responses())
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
        return ok({"transactions": [txn_json(info) for info in first]})
    # Thousands (an unfiltered listing names every transaction ended within the
    # retention): one page of infos in memory and rendered per step, not all of them.
    return ok_pages("transactions", (first, second), pages, txn_json)


@router.post(
    "/v1/transactions/finish", response_model=FinishResponse, responses=responses(404, 409)
)
async def finish(body: FinishRequest, request: Request) -> Response:
    """Commit and abort several transactions in one atomic decision."""
    engine = engine_of(request)
    result = await engine.finish(
        commit=body.commit,
        abort=body.abort,
        idempotence_key=body.idempotence_key,
        principal=principal_of(request),
    )
    return ok(
        {
            "committed": [str(t) for t in result.committed],
            "aborted": [str(t) for t in result.aborted],
            "duplicate": result.duplicate,
        }
    )


@router.get("/v1/transactions/{txn}", response_model=TxnResponse, responses=responses(404))
async def get_transaction(txn: TxnParam, request: Request) -> Response:
    """One transaction's state, label, topics and whether it was fenced."""
    engine = engine_of(request)
    return ok(txn_json(await engine.get_transaction(txn, principal=principal_of(request))))


@router.post(
    "/v1/transactions/{txn}/commit", response_model=TxnResponse, responses=responses(404, 409)
)
async def commit(txn: TxnParam, request: Request) -> Response:
    """Commit; 200 once the markers are durable (again 200 if already committed)."""
    engine = engine_of(request)
    return ok(txn_json(await engine.commit(txn, principal=principal_of(request))))


@router.post(
    "/v1/transactions/{txn}/abort", response_model=TxnResponse, responses=responses(404, 409)
)
async def abort(txn: TxnParam, request: Request) -> Response:
    """Abort (again 200 if already aborted)."""
    engine = engine_of(request)
    return ok(txn_json(await engine.abort(txn, principal=principal_of(request))))
