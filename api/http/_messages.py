"""Producing: ``POST /v1/topics/{topic}/messages`` appends a batch atomically."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api import InvalidArgumentError, TooLargeError

from ._auth import principal_of, require_topics
from ._edge import NONFINITE_KEY
from ._errors import responses
from ._json import ok, outgoing
from ._params import TopicName, engine_of
from ._responses import BatchResponse, ProduceResponse
from ._schemas import BatchMessageIn, BatchRequest, MessageIn, ProduceRequest, check_json_value

router = APIRouter(tags=["messages"])


@router.post(
    "/v1/topics/{topic}/messages",
    response_model=ProduceResponse,
    responses=responses(404, 409, 413),
)
async def produce(topic: TopicName, body: ProduceRequest, request: Request) -> Response:
    """Append a batch atomically (optionally in a transaction); durable on return."""
    engine = engine_of(request)
    _check_messages(request, body.messages, engine.config.max_messages_per_request)
    max_message_bytes = engine.config.max_message_bytes
    messages = [outgoing(m, max_message_bytes) for m in body.messages]
    result = await engine.produce(
        topic,
        messages,
        txn=body.txn,
        producer=body.producer,
        sequence=body.sequence,
        principal=principal_of(request),
    )
    return ok({"positions": [str(p) for p in result.positions], "duplicate": result.duplicate})


@router.post(
    "/v1/batches", response_model=BatchResponse, responses=responses(404, 413), tags=["messages"]
)
async def produce_batch(body: BatchRequest, request: Request) -> Response:
    """Append to several topics atomically without a transaction: all or nothing, durable
    on return; any unknown topic is 404 and nothing is stored."""
    engine = engine_of(request)
    _check_messages(request, body.messages, engine.config.max_messages_per_request)
    require_topics(request, "produce", {m.topic for m in body.messages})
    limit = engine.config.max_message_bytes
    items = [(m.topic, outgoing(m, limit)) for m in body.messages]
    positions = await engine.send_batch(items)
    return ok({"positions": [str(p) for p in positions]})


def _check_messages(
    request: Request, messages: list[MessageIn] | list[BatchMessageIn], limit: int
) -> None:
    """413 past the per-request message count; 400 for non-finite numbers (before any work)."""
    if len(messages) > limit:
        raise TooLargeError(f"{len(messages)} messages in one request exceed the limit of {limit}")
    if request.scope.get(NONFINITE_KEY):
        for index, message in enumerate(messages):
            try:
                check_json_value(message.value)
            except ValueError as exc:
                raise InvalidArgumentError(f"messages.{index}.value: {exc}") from None
