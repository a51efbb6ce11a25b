"""Topics: create, list, delete and stats (``/v1/topics``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response

from ._auth import principal_of
from ._errors import responses
from ._json import ok
from ._params import TopicName, engine_of
from ._responses import (
    RetentionResponse,
    StatsResponse,
    TopicDeletedResponse,
    TopicListResponse,
    TopicResponse,
    TtlResponse,
)
from ._schemas import RetentionRequest, TopicRequest, TtlRequest

router = APIRouter(tags=["topics"])


@router.put(
    "/v1/topics/{topic}",
    response_model=TopicResponse,
    status_code=201,
    responses={200: {"model": TopicResponse, "description": "It existed."}, **responses(409, 507)},
)
async def create_topic(
    topic: TopicName, request: Request, body: Annotated[TopicRequest | None, Body()] = None
) -> Response:
    """Create a topic: 201 when created, 200 when it existed; a body's retention and
    message TTL are set either way. With ``{"partitions": N}``, a partitioned topic (409 if
    the topic exists with another partition count, or not partitioned)."""
    engine = engine_of(request)
    partitions = None if body is None else body.partitions
    created = await engine.create_topic(topic, partitions=partitions)
    retention = None if body is None else body.retention()
    if retention is not None:
        await _set_retention(request, topic, retention)
    ttl = None if body is None else body.ttl()
    if ttl is not None:
        await engine.set_ttl(topic, ttl.ttl_ms)
    answer: dict[str, object] = {"topic": topic}
    if partitions is not None:
        answer["partitions"] = partitions
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
    "/v1/topics/{topic}/retention", response_model=RetentionResponse, responses=responses(404)
)
async def set_retention(topic: TopicName, body: RetentionRequest, request: Request) -> Response:
    """Set what retention deletes from the topic: whole sealed ledgers older than
    ``time_ms`` or beyond ``size_bytes``, once every subscription acknowledged them."""
    await _set_retention(request, topic, body)
    return ok({"topic": topic, "time_ms": body.time_ms, "size_bytes": body.size_bytes})


@router.put("/v1/topics/{topic}/ttl", response_model=TtlResponse, responses=responses(404))
async def set_ttl(topic: TopicName, body: TtlRequest, request: Request) -> Response:
    """Set the topic's message TTL: unacknowledged messages older than ``ttl_ms`` are
    acknowledged for every subscription by a pass every ``ttl_check_interval`` seconds
    (null: messages never expire)."""
    await engine_of(request).set_ttl(topic, body.ttl_ms)
    return ok({"topic": topic, "ttl_ms": body.ttl_ms})


@router.get("/v1/topics", response_model=TopicListResponse, responses=responses())
async def list_topics(request: Request) -> Response:
    """All topic names, partitioned topics and their partitions included (with
    ``--auth``: those the caller has a grant on)."""
    engine = engine_of(request)
    names = sorted([*await engine.list_topics(), *await engine.partitioned_topics()])
    principal = principal_of(request)
    if principal is not None:
        names = [name for name in names if principal.sees(name)]
    return ok({"topics": names})


@router.delete(
    "/v1/topics/{topic}", response_model=TopicDeletedResponse, responses=responses(404, 409)
)
async def delete_topic(topic: TopicName, request: Request) -> Response:
    """Delete a topic with its data, subscriptions and snapshots (a partitioned topic
    with every partition; a partition alone is 409)."""
    engine = engine_of(request)
    await engine.delete_topic(topic)
    return ok({"topic": topic, "deleted": True})


@router.get("/v1/topics/{topic}/stats", response_model=StatsResponse, responses=responses(404))
async def topic_stats(topic: TopicName, request: Request) -> Response:
    """Positions, transaction counts, sizes and subscriptions of a topic."""
    engine = engine_of(request)
    return ok(await engine.stats(topic))
