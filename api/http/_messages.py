"""Producing: ``POST /v1/topics/{topic}/messages`` appends a batch atomically."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from api import InvalidArgumentError

from ._auth import principal_of
from ._edge import NONFINITE_KEY
from ._errors import responses
from ._json import ok, outgoing
from ._params import TopicName, engine_of
from ._schemas import ProduceRequest, ProduceResponse, check_json_value

router = APIRouter(tags=["messages"])


@router.post(
    "/v1/topics/{topic}/messages",
    response_model=ProduceResponse,
    responses=responses(404, 409, 413),
)
async def produce(topic: TopicName, body: ProduceRequest, request: Request) -> Response:
    """Append a batch atomically (optionally in a transaction); durable on return."""
    engine = engine_of(request)
    if request.scope.get(NONFINITE_KEY):
        for index, message in enumerate(body.messages):
            try:
                check_json_value(message.value)
            except ValueError as exc:
                raise InvalidArgumentError(f"messages.{index}.value: {exc}") from None
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
