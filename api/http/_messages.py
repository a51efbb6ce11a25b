"""Producing: ``POST /v1/topics/{topic}/messages`` appends a batch atomically, and
``POST /v1/batches`` appends to several topics atomically.

Both read the raw body. A body of the common shape (``messages`` of ``value`` or
``value_b64`` with optional ``key`` and ``properties``, and ``topic`` in a batch;
optionally ``txn`` in a produce) takes a fast path: one msgspec decode into small
structs, base64 included, with no pydantic model per message (a ``MessageIn`` cost
~1.2 us and its field access ~1 us more; ``json.loads`` and Python checks ~1.9 us a
message; msgspec ~0.17 us). The fast path only ever *accepts*: anything it does not
recognise (a producer id, an unknown field, a wrong type, a lone surrogate, a non-finite
number, bad base64) goes to pydantic-core's validation of the whole body
(``model_validate_json``), which gives the contract's 400 errors. A large body (a legal
batch may hold 10,000+ messages) is parsed, checked and encoded in a worker thread, so
other requests keep being answered meanwhile. The request models stay the OpenAPI
description of the bodies (see ``_app.py``).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from txnstream.api import InvalidArgumentError, OutgoingMessage, Position, TooLargeError

from ._auth import principal_of, require_topics
from ._errors import responses
from ._json import outgoing, positions_json
from ._params import TopicName, engine_of, json_body, request_body, validated
from ._responses import BatchResponse, ProduceResponse
from ._schemas import (
    NAME_PATTERN,
    BatchMessageIn,
    BatchRequest,
    MessageIn,
    ProduceRequest,
    check_json_value,
)

router = APIRouter(tags=["messages"])

OFF_LOOP_BYTES = 256 * 1024
"""Bodies larger than this are parsed and encoded in a worker thread."""
_OFF_LOOP_POSITIONS = 2_000
"""Answers with more positions than this are rendered in a worker thread."""

_Model = TypeVar("_Model", bound=BaseModel)


@router.post(
    "/v1/topics/{topic}/messages",
    response_model=ProduceResponse,
    responses=responses(404, 409, 413, 507),
    openapi_extra=request_body(ProduceRequest),
)
async def produce(topic: TopicName, request: Request) -> Response:
    """Append a batch atomically (optionally in a transaction); durable on return."""
    engine = engine_of(request)
    config = engine.config
    parsed = await _parsed(
        request, ProduceRequest, config.max_messages_per_request, config.max_message_bytes
    )
    body, principal = parsed.request, principal_of(request)
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
            [m for _, m in parsed.messages],
            txn=body.txn,
            producer=body.producer,
            sequence=body.sequence,
            principal=principal,
        )
    return await _answer(result.positions, result.duplicate, result.topics)


@router.post(
    "/v1/batches",
    response_model=BatchResponse,
    responses=responses(404, 413, 507),
    tags=["messages"],
    openapi_extra=request_body(BatchRequest),
)
async def produce_batch(request: Request) -> Response:
    """Append to several topics atomically without a transaction: all or nothing, durable
    on return; any unknown topic is 404 and nothing is stored."""
    engine = engine_of(request)
    config = engine.config
    items = (
        await _parsed(
            request, BatchRequest, config.max_messages_per_request, config.max_message_bytes
        )
    ).pairs()
    require_topics(request, "produce", {topic for topic, _ in items})
    positions = await engine.send_batch([(topic, m) for topic, m in items])
    return await _answer(positions, None)


async def _answer(
    positions: list[Position], duplicate: bool | None, partitions: list[str] | None = None
) -> Response:
    """``{"positions": [...]}``, with ``"duplicate"`` for a produce (and ``"partitions"``
    for one to a partitioned topic); a long answer is rendered in a worker thread."""

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
class Parsed(Generic[_Model]):
    """A produce or batch body, parsed and checked."""

    request: _Model
    messages: list[tuple[str, OutgoingMessage]]
    """``(topic, message)`` pairs; the topic is "" in a produce."""
    values: list[Any] | None = None
    """Instead of ``messages``: a produce of values alone (no key, no properties)."""

    def pairs(self) -> list[tuple[str, OutgoingMessage]]:
        """The messages as ``(topic, message)`` pairs, also when parsed as values."""
        if self.values is None:
            return self.messages
        return [("", OutgoingMessage(value)) for value in self.values]


async def _parsed(
    request: Request, model: type[_Model], max_messages: int, max_message_bytes: int
) -> Parsed[_Model]:
    """The validated body and its messages (large bodies in a worker thread)."""
    raw = await json_body(request)
    if len(raw) > OFF_LOOP_BYTES:
        return await asyncio.to_thread(_parse, raw, model, max_messages, max_message_bytes)
    return _parse(raw, model, max_messages, max_message_bytes)


def _parse(
    raw: bytes, model: type[_Model], max_messages: int, max_message_bytes: int
) -> Parsed[_Model]:
    fast = _parse_fast(raw, model, max_messages, max_message_bytes)
    if fast is not None:
        return fast
    nonfinite = b"NaN" in raw or b"Infinity" in raw or _EXPONENT.search(raw) is not None
    return _parse_model(raw, model, max_messages, max_message_bytes, nonfinite)


_EXPONENT = re.compile(rb"[0-9.][eE][+-]?[0-9]")
"""A number with an exponent (``1e400`` parses as infinity). The model path's JSON parser
accepts it and NaN/Infinity, which JSON and the contract do not: a body that mentions any
of them has its values checked (the fast path's msgspec refuses them itself)."""


def _parse_model(
    raw: bytes, model: type[_Model], max_messages: int, max_message_bytes: int, nonfinite: bool
) -> Parsed[_Model]:
    """The request model's validation of the whole body: the contract's 400s."""
    body = validated(raw, model)
    messages: list[MessageIn] | list[BatchMessageIn] = body.messages  # type: ignore[attr-defined]
    if len(messages) > max_messages:
        raise TooLargeError(
            f"{len(messages)} messages in one request exceed the limit of {max_messages}"
        )
    if nonfinite:  # json accepts NaN, Infinity and 1e400; JSON and the contract do not
        for index, message in enumerate(messages):
            try:
                check_json_value(message.value)
            except ValueError as exc:
                raise InvalidArgumentError(f"messages.{index}.value: {exc}") from None
    if isinstance(body, BatchRequest):
        pairs = [(m.topic, outgoing(m, max_message_bytes)) for m in body.messages]
    else:
        pairs = [("", outgoing(m, max_message_bytes)) for m in messages]
    return Parsed(body, pairs)


# msgspec matches with Python's ``re``, whose ``$`` also matches before a final newline;
# pydantic's engine does not: ``\Z`` keeps "orders\n" out here too.
_NAME_TO_END = NAME_PATTERN.removesuffix("$") + r"\Z"


class _FastMessage(msgspec.Struct, forbid_unknown_fields=True):
    """A produce message as the fast path decodes it (UNSET: the field was absent)."""

    value: Any = msgspec.UNSET
    value_b64: bytes | msgspec.UnsetType = msgspec.UNSET  # standard base64 with padding
    key: str | None = None
    properties: dict[str, str] | None = None


class _FastBatchMessage(_FastMessage, kw_only=True):
    """A message of an atomic multi-topic batch."""

    topic: Annotated[str, msgspec.Meta(pattern=_NAME_TO_END)]


class _FastProduce(msgspec.Struct, forbid_unknown_fields=True):
    """A produce body of the common shape (no producer id)."""

    messages: list[_FastMessage]
    txn: str | None = None


class _FastBatch(msgspec.Struct, forbid_unknown_fields=True):
    """A ``/v1/batches`` body."""

    messages: list[_FastBatchMessage]


_FAST_DECODERS: dict[type[BaseModel], msgspec.json.Decoder[Any]] = {
    ProduceRequest: msgspec.json.Decoder(_FastProduce),
    BatchRequest: msgspec.json.Decoder(_FastBatch),
}
_MAX_TXN_ID = 200  # TxnIdStr's max_length


def _parse_fast(
    raw: bytes, model: type[_Model], max_messages: int, max_message_bytes: int
) -> Parsed[_Model] | None:
    """The fast path of :func:`_parse`; None: let the model decide.

    Accepts only what the model accepts, with the same result. msgspec parses,
    type-checks and base64-decodes the whole body in C (~17 us for 100 messages, where
    ``json.loads`` and a loop of checks took ~190 us): its JSON is strict (no NaN,
    Infinity, 1e400 or lone surrogates) and its base64 is the schema's pattern; any
    error it raises just sends the body to the model, which gives the contract's 400.
    """
    decoder = _FAST_DECODERS.get(model)
    if decoder is None or raw[:1] != b"{":
        return None  # (a BOM or UTF-16 is refused by the model: leave it the error)
    try:
        body = decoder.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # (nesting deeper than ~1,000)
        return None
    messages = body.messages
    batch = type(body) is _FastBatch
    txn = None if batch else body.txn
    if not messages or (txn is not None and len(txn) > _MAX_TXN_ID):
        return None
    unset = msgspec.UNSET
    # A value_b64 whose text is longer than the limit's allows may be too large: the
    # model path says which error comes first (this is that text length, decoded).
    largest = max_message_bytes // 3 * 3
    values: list[Any] = []
    append = values.append
    plain = not batch  # a produce of values alone so far
    for message in messages:
        value, data = message.value, message.value_b64
        if data is unset:
            if value is unset:
                return None
        elif value is not unset or len(data) > largest:
            return None
        else:
            value = data
        if plain and (message.key is not None or message.properties):
            plain = False
        append(value)
    if len(values) > max_messages:  # (after validating all, as the model path does)
        raise TooLargeError(
            f"{len(values)} messages in one request exceed the limit of {max_messages}"
        )
    request = (
        ProduceRequest.model_construct(messages=[], txn=txn)
        if model is ProduceRequest
        else model.model_construct(messages=[])
    )
    if plain:
        return Parsed(request, [], values)  # type: ignore[arg-type]
    pairs = [
        (m.topic if batch else "", OutgoingMessage(v, m.key, m.properties or {}))
        for m, v in zip(messages, values, strict=True)
    ]
    return Parsed(request, pairs)  # type: ignore[arg-type]
