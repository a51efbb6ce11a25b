"""Health and metrics: ``GET /v1/health`` and ``GET /metrics`` (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from txnstream.api import TopicNotFoundError, TopicStats

from ._json import ok
from ._params import engine_of
from ._responses import ErrorResponse, HealthResponse
from ._telemetry import HttpMetrics

router = APIRouter(tags=["admin"])


@router.get(
    "/v1/health",
    response_model=HealthResponse,
    responses={503: {"model": HealthResponse, "description": "Not ok: see `status`."}},
)
async def health(request: Request) -> Response:
    """200 ``{"status": "ok"}`` only while writes are accepted; else 503 with the status
    (``degraded``: reads only, e.g. the disk is full; ``recovering``; ``failed``) and
    the reason. Needs no token."""
    state = engine_of(request).health()
    if state.status == "ok":
        return ok({"status": "ok"})
    return ok({"status": state.status, "reason": state.reason}, 503)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition (format 0.0.4).",
            "content": {
                "text/plain": {
                    "schema": {"type": "string"},
                    "example": 'txnstream_topic_stable_lag_entries{topic="orders"} 0.0\n',
                }
            },
        },
        401: {"model": ErrorResponse, "description": "No or unknown token (`unauthorized`)."},
        403: {"model": ErrorResponse, "description": "Not an admin (`forbidden`)."},
    },
)
async def metrics(request: Request) -> Response:
    """Prometheus text: engine counters and histograms, per-topic and per-subscription
    gauges, HTTP request counts and latencies, process and build information."""
    engine = engine_of(request)
    health = engine.health()
    engine.metrics.observe_health(health)
    topics: list[TopicStats] = []
    open_txns = 0
    if health.status != "standby":  # a standby has no topics: they are the active's
        for topic in await engine.list_topics():
            try:
                topics.append(await engine.topic_stats(topic))
            except TopicNotFoundError:
                continue  # deleted meanwhile
        open_txns = len(await engine.transactions(state="open"))
    storage = engine.storage_metrics()
    http: HttpMetrics = request.app.state.http_metrics
    extra = [http.registry]
    access = getattr(request.app.state, "access", None)
    if access is not None:  # refused requests (auth, Host, Origin): the HTTP layer's count
        extra.append(access.refusals.registry)
    body, content_type = engine.metrics.render(
        topics,
        open_txns=open_txns,
        database_bytes=storage.database_bytes,
        wal_bytes=storage.wal_bytes,
        extra=extra,
    )
    return Response(body, media_type=content_type)
