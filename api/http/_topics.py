"""Topics: create, list, delete and stats (``/v1/topics``)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ._auth import principal_of
from ._json import ok
from ._params import TopicName, body_of, documented, engine_of
from ._wire import (
    RetentionRequest,
    RetentionResponse,
    StatsResponse,
    TopicDeletedResponse,
    TopicListResponse,
    TopicRequest,
    TopicResponse,
    TtlRequest,
    TtlResponse,
)

router = APIRouter(tags=["topics"])


@router.put(
    "/v1/topics/{topic}",
    **documented(
        TopicResponse,
        status=201,
        also={200: "It existed."},
        errors=(409, 507),
        body=TopicRequest,
        optional=True,
    ),
)
async def create_topic(topic: TopicName, request: Request) -> Response:
    """Create a topic: 201 when created, 200 when it existed; a body's retention and
    message TTL are set either way. With ``{"partitions": N}``, a partitioned topic (409 if
    the topic exists with another partition count, or not partitioned)."""
    engine = engine_of(request)
    body = await body_of(request, TopicRequest, optional=True)
    created = await engine.create_topic(topic, partitions=body.partitions)
    retention = body.retention()
    if retention is not None:
        await _set_retention(request, topic, retention)
    ttl = body.ttl()
    if ttl is not None:
        await engine.set_ttl(topic, ttl.ttl_ms)
    answer = TopicResponse(topic=topic)
    if body.partitions is not None:
        answer.partitions = body.partitions
    return ok(answer, 201 if created else 200)


async def _set_retention(request: Request, topic: str, body: RetentionRequest) -> None:
    engine = engine_of(request)
    for part in engine.partitions_of(topic) or [topic]:  # a partitioned topic's: each's
        await engine.set_retention(
            part,
            max_age=None if body.time_ms is None else body.time_ms / 1000,
            max_bytes=body.size_bytes,
        )


@router.put(
    "/v1/topics/{topic}/retention",
    **documented(RetentionResponse, errors=(404,), body=RetentionRequest),
)
async def set_retention(topic: TopicName, request: Request) -> Response:
    """Set what retention deletes from the topic: whole sealed ledgers older than
    ``time_ms`` or beyond ``size_bytes``, once every subscription acknowledged them."""
    body = await body_of(request, RetentionRequest)
    await _set_retention(request, topic, body)
    return ok(RetentionResponse(topic=topic, time_ms=body.time_ms, size_bytes=body.size_bytes))


@router.put("/v1/topics/{topic}/ttl", **documented(TtlResponse, errors=(404,), body=TtlRequest))
async def set_ttl(topic: TopicName, request: Request) -> Response:
    """Set the topic's message TTL: unacknowledged messages older than ``ttl_ms`` are
    acknowledged for every subscription by a pass every ``ttl_check_interval`` seconds
    (null: messages never expire)."""
    body = await body_of(request, TtlRequest)
    await engine_of(request).set_ttl(topic, body.ttl_ms)
    return ok(TtlResponse(topic=topic, ttl_ms=body.ttl_ms))


@router.get("/v1/topics", **documented(TopicListResponse))
async def list_topics(request: Request) -> Response:
    """All topic names, partitioned topics and their partitions included (with
    ``--auth``: those the caller has a grant on)."""
    engine = engine_of(request)
    names = sorted([*await engine.list_topics(), *await engine.partitioned_topics()])
    principal = principal_of(request)
    if principal is not None:
        names = [name for name in names if principal.sees(name)]
    return ok(TopicListResponse(topics=names))


@router.delete("/v1/topics/{topic}", **documented(TopicDeletedResponse, errors=(404, 409)))
async def delete_topic(topic: TopicName, request: Request) -> Response:
    """Delete a topic with its data, subscriptions and snapshots (a partitioned topic
    with every partition; a partition alone is 409)."""
    engine = engine_of(request)
    await engine.delete_topic(topic)
    return ok(TopicDeletedResponse(topic=topic, deleted=True))


@router.get("/v1/topics/{topic}/stats", **documented(StatsResponse, errors=(404,)))
async def topic_stats(topic: TopicName, request: Request) -> Response:
    """Positions, transaction counts, sizes and subscriptions of a topic."""
    return ok(await engine_of(request).stats(topic))
