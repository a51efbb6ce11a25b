"""Producing: ``POST /v1/topics/{topic}/messages`` appends a batch atomically, and
``POST /v1/batches`` appends to several topics atomically.

Both decode the raw body with msgspec into the wire structs (``_wire``): one C pass
parses, checks and base64-decodes it (~0.2 us a message), and a produce of values alone
(no key, properties or delivery time, the common case) hands the engine the values with
no message object made per value. A large body (a legal batch may hold 10,000+ messages)
is decoded and its answer encoded in a worker thread, so other requests keep being
answered meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from msgspec import UNSET

from txnstream.api import OutgoingMessage, Position, TooLargeError

from ._auth import principal_of, require_topics
from ._json import positions_json
from ._params import TopicName, documented, engine_of, json_body
from ._wire import (
    BatchRequest,
    BatchResponse,
    MessageIn,
    ProduceRequest,
    ProduceResponse,
    decode,
)

router = APIRouter(tags=["messages"])

OFF_LOOP_BYTES = 256 * 1024
"""Bodies larger than this are decoded in a worker thread."""
_OFF_LOOP_POSITIONS = 2_000
"""Answers with more positions than this are rendered in a worker thread."""


@router.post(
    "/v1/topics/{topic}/messages",
    **documented(ProduceResponse, errors=(404, 409, 413, 507), body=ProduceRequest),
)
async def produce(topic: TopicName, request: Request) -> Response:
    """Append a batch atomically (optionally in a transaction); durable on return."""
    engine = engine_of(request)
    config = engine.config
    body, parsed = await _decoded(
        request, ProduceRequest, config.max_messages_per_request, config.max_message_bytes
    )
    principal = principal_of(request)
    if parsed.values is not None:  # values alone: no message object made per value
        result = await engine.produce_values(
            topic,
            parsed.values,
            txn=body.txn,
            producer=body.producer,
            sequence=body.sequence,
            principal=principal,
        )
    else:
        result = await engine.produce(
            topic,
            parsed.messages(body.messages),
            txn=body.txn,
            producer=body.producer,
            sequence=body.sequence,
            principal=principal,
        )
    return await _answer(result.positions, result.duplicate, result.topics)


@router.post(
    "/v1/batches",
    **documented(BatchResponse, errors=(404, 413, 507), body=BatchRequest),
)
async def produce_batch(request: Request) -> Response:
    """Append to several topics atomically without a transaction: all or nothing, durable
    on return; any unknown topic is 404 and nothing is stored."""
    engine = engine_of(request)
    config = engine.config
    body, parsed = await _decoded(
        request, BatchRequest, config.max_messages_per_request, config.max_message_bytes
    )
    topics = [m.topic for m in body.messages]
    require_topics(request, "produce", set(topics))
    positions = await engine.send_batch(
        list(zip(topics, parsed.messages(body.messages), strict=True))
    )
    return await _answer(positions, None)


async def _answer(
    positions: list[Position], duplicate: bool | None, partitions: list[str] | None = None
) -> Response:
    """``ProduceResponse`` (``BatchResponse`` without ``duplicate``), its positions
    written by :func:`positions_json`; a long answer is rendered in a worker thread."""

    def render() -> Response:
        # (a produce's positions strictly increase: one topic's, assigned in order)
        increasing = duplicate is not None and partitions is None
        body = b'{"positions":' + positions_json(positions, increasing=increasing)
        if partitions is not None:
            body += b',"partitions":' + json.dumps(partitions, separators=(",", ":")).encode()
        if duplicate is not None:
            body += b',"duplicate":true}' if duplicate else b',"duplicate":false}'
        else:
            body += b"}"
        return Response(body, media_type="application/json")

    return await asyncio.to_thread(render) if len(positions) > _OFF_LOOP_POSITIONS else render()


@dataclass(frozen=True, slots=True)
class Values:
    """A decoded body's message values, checked against the limits."""

    values: list[Any] | None
    """All of them, when every message is a value alone (no key, properties, delay)."""
    raw: list[Any]
    """Each message's value (``value_b64`` decoded), in order."""

    def messages(self, messages: list[Any]) -> list[OutgoingMessage]:
        """The engine's messages of the body's ``messages``."""
        return [
            OutgoingMessage(v, m.key, m.properties or {}, m.deliver_at_ms())
            for m, v in zip(messages, self.raw, strict=True)
        ]


async def _decoded(
    request: Request, shape: type[Any], max_messages: int, max_message_bytes: int
) -> tuple[Any, Values]:
    """The decoded body and its values (a large body in a worker thread)."""
    raw = await json_body(request)
    if len(raw) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(_decode, raw, shape, max_messages, max_message_bytes)
    return _decode(raw, shape, max_messages, max_message_bytes)


def _decode(
    raw: bytes, shape: type[Any], max_messages: int, max_message_bytes: int
) -> tuple[Any, Values]:
    body = decode(raw, shape)
    messages: list[MessageIn] = body.messages
    if len(messages) > max_messages:
        raise TooLargeError(
            f"{len(messages)} messages in one request exceed the limit of {max_messages}"
        )
    values: list[Any] = []
    append = values.append
    plain = shape is ProduceRequest  # a produce of values alone so far
    for message in messages:
        data = message.value_b64
        if data is UNSET:
            append(message.value)
        elif len(data) > max_message_bytes:
            raise TooLargeError(
                f"message value of {len(data)} bytes exceeds the limit of {max_message_bytes} bytes"
            )
        else:
            append(data)
        if plain and (
            message.key is not None
            or message.properties
            or message.deliver_after_ms
            or message.deliver_at is not None
        ):
            plain = False
    return body, Values(values if plain else None, values)
