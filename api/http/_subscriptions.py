"""Subscriptions: create, delete, receive (long poll), ack, nack and seek.

A receive with ``wait_ms`` waits on the engine's notification
(``engine.receive(timeout=...)``) and ends early, with no messages, when the server
starts draining for shutdown (:class:`Drain`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from txnstream.api import Engine

from ._auth import principal_of
from ._edge import Drain
from ._json import ok
from ._limits import DEFAULT_RESPONSE_BYTES, MaxBytes
from ._params import SubName, TopicName, body_of, documented, drain_of, engine_of
from ._wire import (
    AckRequest,
    AckResponse,
    MessageOut,
    NackRequest,
    NackResponse,
    ReceiveResponse,
    SeekRequest,
    SeekResponse,
    SubscriptionDeletedResponse,
    SubscriptionRequest,
    SubscriptionResponse,
)

router = APIRouter(tags=["subscriptions"])

_SUBSCRIPTION = "/v1/topics/{topic}/subscriptions/{sub}"


@router.put(
    _SUBSCRIPTION,
    **documented(
        SubscriptionResponse,
        status=201,
        also={200: "It existed, same settings."},
        errors=(404, 409),
        body=SubscriptionRequest,
        optional=True,
    ),
)
async def create_subscription(topic: TopicName, sub: SubName, request: Request) -> Response:
    """Create a durable subscription (201), or confirm an identical one (200)."""
    engine = engine_of(request)
    req = await body_of(request, SubscriptionRequest, optional=True)
    created = await engine.create_subscription(
        topic,
        sub,
        type=req.type,
        initial_position=req.initial_position,
        isolation=req.isolation,
        max_redeliveries=req.max_redeliveries,
        dead_letter_topic=req.dead_letter_topic,
        nack_delay_ms=req.nack_delay_ms,
        principal=principal_of(request),
    )
    policy = await engine.subscription_policy(topic, sub)
    answer = SubscriptionResponse(
        topic=topic,
        subscription=sub,
        type=req.type,
        isolation=req.isolation,
        initial_position=req.initial_position,
        created=created,
        **policy,
    )
    return ok(answer, 201 if created else 200)


@router.delete(_SUBSCRIPTION, **documented(SubscriptionDeletedResponse, errors=(404,)))
async def delete_subscription(topic: TopicName, sub: SubName, request: Request) -> Response:
    """Delete a subscription and its cursor."""
    engine = engine_of(request)
    await engine.delete_subscription(topic, sub)
    return ok(SubscriptionDeletedResponse(topic=topic, subscription=sub, deleted=True))


@router.get(f"{_SUBSCRIPTION}/messages", **documented(ReceiveResponse, errors=(404, 409)))
async def receive(
    topic: TopicName,
    sub: SubName,
    request: Request,
    consumer: Annotated[
        str,
        Query(
            min_length=1,
            max_length=200,
            description="The consumer's name; one that does not poll for 30 s is detached.",
        ),
    ] = "default",
    max_messages: Annotated[
        int, Query(alias="max", ge=1, le=10_000, description="At most this many messages.")
    ] = 100,
    wait_ms: Annotated[
        int, Query(ge=0, le=30_000, description="Wait up to this long for the first message.")
    ] = 0,
    max_bytes: MaxBytes = DEFAULT_RESPONSE_BYTES,
) -> Response:
    """Up to ``max`` messages (and ``max_bytes``), waiting up to ``wait_ms`` for the first
    one. A poll whose client disconnects ends and hands out nothing."""
    engine = engine_of(request)
    drain = drain_of(request)
    messages = await _receive(
        engine, drain, request, topic, sub, consumer, max_messages, wait_ms, max_bytes
    )
    return ok(ReceiveResponse(messages=[MessageOut.of(m) for m in messages]))


@router.post(f"{_SUBSCRIPTION}/ack", **documented(AckResponse, errors=(404, 409), body=AckRequest))
async def ack(topic: TopicName, sub: SubName, request: Request) -> Response:
    """Acknowledge positions (cumulatively, or within a transaction)."""
    engine = engine_of(request)
    body = await body_of(request, AckRequest)
    positions = list(body.positions)  # "L:E" ("L:E:P" on a partitioned topic): parsed there
    await engine.ack(
        topic,
        sub,
        positions,
        cumulative=body.cumulative,
        txn=body.txn,
        principal=principal_of(request),
    )
    return ok(AckResponse(acked=len(positions)))


@router.post(f"{_SUBSCRIPTION}/nack", **documented(NackResponse, errors=(404,), body=NackRequest))
async def nack(topic: TopicName, sub: SubName, request: Request) -> Response:
    """Ask for redelivery of positions (``redelivery_count`` + 1), after ``delay_ms`` if
    given (else the subscription's ``nack_delay_ms``; shared and key_shared only)."""
    engine = engine_of(request)
    body = await body_of(request, NackRequest)
    positions = list(body.positions)  # "L:E" ("L:E:P" on a partitioned topic): parsed there
    await engine.nack(topic, sub, positions, delay_ms=body.delay_ms)
    return ok(NackResponse(nacked=len(positions)))


@router.post(f"{_SUBSCRIPTION}/seek", **documented(SeekResponse, errors=(404,), body=SeekRequest))
async def seek(topic: TopicName, sub: SubName, request: Request) -> Response:
    """Move the cursor: everything before the position (or the first message published
    at or after the timestamp) counts as acknowledged."""
    engine = engine_of(request)
    body = await body_of(request, SeekRequest)
    went = await engine.seek(topic, sub, body.target())
    return ok(SeekResponse(position=body.position or str(went)))


async def _receive(
    engine: Engine,
    drain: Drain,
    request: Request,
    topic: str,
    sub: str,
    consumer: str,
    max_messages: int,
    wait_ms: int,
    max_bytes: int,
) -> Sequence[Any]:
    """``engine.receive``, cut short with no messages when the server starts draining or
    the client disconnects (what the poll took goes back to the subscription)."""
    if wait_ms == 0 or drain.started:
        return await engine.receive(
            topic,
            sub,
            consumer=consumer,
            max=max_messages,
            timeout=0.0,
            max_bytes=max_bytes,
            principal=principal_of(request),
        )
    task = asyncio.create_task(
        engine.receive(
            topic,
            sub,
            consumer=consumer,
            max=max_messages,
            timeout=wait_ms / 1000,
            max_bytes=max_bytes,
            principal=principal_of(request),
        ),
        name=f"http-receive:{topic}/{sub}/{consumer}",
    )
    gone = asyncio.create_task(_disconnected(request), name="http-receive-disconnect")
    try:
        await asyncio.wait((task, gone, drain.future()), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in (task, gone):
            if not waiter.done():
                waiter.cancel()
        await asyncio.gather(task, gone, return_exceptions=True)
    client_gone = gone.done() and not gone.cancelled()  # (``gone`` is cancelled above)
    if task.cancelled() or (task.exception() is not None and client_gone):
        return []
    messages = task.result()  # an unknown topic or subscription raises: 404 at once
    if messages and client_gone:
        # the client left as the messages arrived: nobody read them, so they go back
        await engine.release(topic, sub, [m.position for m in messages])
        return []
    return messages


async def _disconnected(request: Request) -> None:
    """Return once the client has closed the connection (a GET has no body to read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
