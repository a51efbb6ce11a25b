"""Health and metrics: ``GET /v1/health`` and ``GET /metrics`` (Prometheus text)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from txnstream.api import TopicNotFoundError, TopicStats

from ._errors import error_response, responses
from ._json import ok
from ._params import documented, engine_of
from ._telemetry import HttpMetrics
from ._wire import HealthResponse

router = APIRouter(tags=["admin"])


_HEALTH = documented(HealthResponse, also={503: "Not ok: see `status`."}, errors=None)
_HEALTH["responses"].update({status: responses()[status] for status in (400, 403)})  # Host, Origin


@router.get("/v1/health", **_HEALTH)
async def health(request: Request) -> Response:
    """200 ``{"status": "ok"}`` only while writes are accepted; else 503 with the status
    (``degraded``: reads only, e.g. the disk is full; ``recovering``; ``failed``) and
    the reason. Needs no token."""
    state = engine_of(request).health()
    if state.status == "ok":
        return ok(HealthResponse(status="ok"))
    return ok(HealthResponse(status=state.status, reason=state.reason), 503)  # type: ignore[arg-type]


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
        **responses(),
        403: error_response(403, "Not an admin, or a foreign `Origin` (`forbidden`)."),
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
