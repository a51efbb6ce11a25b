"""Tiers: the ledger listing and offloading (``/v1/topics/{topic}/ledgers``, ``/offload``).

Offloading needs the server's object store (``serve --offload-url``); without one both
offload routes answer 409 ``conflict``.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ._json import ok
from ._params import TopicName, body_of, documented, engine_of
from ._wire import LedgerListResponse, OffloadPolicyResponse, OffloadRequest, OffloadRunResponse

router = APIRouter(tags=["tiers"])


@router.get("/v1/topics/{topic}/ledgers", **documented(LedgerListResponse, errors=(404,)))
async def list_ledgers(topic: TopicName, request: Request) -> Response:
    """The topic's ledgers, oldest first, local and remote."""
    engine = engine_of(request)
    return ok({"ledgers": await engine.list_ledgers(topic)})


@router.put(
    "/v1/topics/{topic}/offload",
    **documented(OffloadPolicyResponse, errors=(404, 409), body=OffloadRequest, optional=True),
)
async def set_offload(topic: TopicName, request: Request) -> Response:
    """Set the topic's offload policy (409 ``conflict`` without an offload URL)."""
    engine = engine_of(request)
    policy = await body_of(request, OffloadRequest, optional=True)
    after = None if policy.after_ms is None else policy.after_ms / 1000
    await engine.set_offload(topic, after=after, min_local_ledgers=policy.min_local_ledgers)
    answer = OffloadPolicyResponse(
        topic=topic, after_ms=policy.after_ms, min_local_ledgers=policy.min_local_ledgers
    )
    return ok(answer)


@router.post("/v1/topics/{topic}/offload/run", **documented(OffloadRunResponse, errors=(404, 409)))
async def run_offload(topic: TopicName, request: Request) -> Response:
    """Offload every eligible ledger now; answers their ids (409 ``conflict`` without an
    offload URL, or when another data directory claimed the offload prefix)."""
    engine = engine_of(request)
    return ok(OffloadRunResponse(offloaded=await engine.offload(topic)))
