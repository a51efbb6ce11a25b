"""Health and metrics: ``GET /v1/health`` and ``GET /metrics`` (Prometheus text)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api import TopicNotFoundError

from ._json import ok
from ._params import engine_of
from ._schemas import ErrorResponse, HealthResponse

router = APIRouter(tags=["admin"])


@router.get("/v1/health", response_model=HealthResponse)
async def health() -> Response:
    """Liveness: 200 while the server runs."""
    return ok({"status": "ok"})


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
        401: {"model": ErrorResponse, "description": "No or unknown token (`unauthorized`)."},
        403: {"model": ErrorResponse, "description": "Not an admin (`forbidden`)."},
    },
)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition: engine counters plus per-topic gauges."""
    engine = engine_of(request)
    snapshots: list[dict[str, Any]] = []
    for topic in await engine.list_topics():
        try:
            snapshots.append(await engine.stats(topic))
        except TopicNotFoundError:
            continue
    body, content_type = engine.metrics.render(snapshots, time.time())
    access = getattr(request.app.state, "access", None)
    if access is not None:  # refused requests (auth, Host, Origin): the HTTP layer's count
        body += access.refusals.render()
    return Response(body, media_type=content_type)
