"""Pydantic models of the HTTP contract (``docs/http-api.md``): requests and responses.

Request models validate strictly (no ``"1"`` for an integer, no ``1`` for a boolean), so
wrong types are 400 ``invalid_request``. Response models exist for ``/openapi.json``; the
routes build their JSON bodies directly (see ``api/http/_json.py``) and the schemathesis test
keeps the two in step. Every field has a description and every model an example: they
are what ``/docs`` shows.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator
from pydantic.config import JsonDict

NAME_PATTERN = (
    r"^(?:[A-Za-z0-9.\-][A-Za-z0-9._\-]{0,199}|_(?:[A-Za-z0-9.\-][A-Za-z0-9._\-]{0,198})?)$"
)
"""Topic and subscription names: 1-200 of ``[A-Za-z0-9._-]``, not starting with ``__``.

Written without look-ahead so both pydantic's regex engine and schemathesis accept it.
"""
# 'L:E', or 'L:E:P' (P a partition's index) on a partitioned topic's subscription
POSITION_PATTERN = r"^(?:0|[1-9][0-9]{0,17}):(?:0|[1-9][0-9]{0,17})(?::(?:0|[1-9][0-9]{0,8}))?$"
SEEK_PATTERN = (
    r"^(?:earliest|latest"
    r"|(?:0|[1-9][0-9]{0,17}):(?:0|[1-9][0-9]{0,17})(?::(?:0|[1-9][0-9]{0,8}))?)$"
)
FETCH_FROM_PATTERN = r"^(?:earliest|(?:0|[1-9][0-9]{0,17}):(?:0|[1-9][0-9]{0,17}))$"
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

MAX_SEQUENCE = 2**63 - 1
MAX_DELIVERY_DELAY_MS = 366 * 86_400_000  # as the engine's
MAX_NACK_DELAY_MS = 7 * 86_400_000  # as the engine's (txnstream.dispatcher.MAX_NACK_DELAY_MS)
MAX_TXN_TIMEOUT_MS = 900_000

SubscriptionType = Literal["exclusive", "failover", "shared", "key_shared"]
InitialPosition = Literal["earliest", "latest"]
Isolation = Literal["read_committed", "read_uncommitted"]
TxnState = Literal["open", "committing", "committed", "aborting", "aborted"]
EntryKindName = Literal["data", "commit", "abort"]

PositionStr = Annotated[
    str,
    Field(
        pattern=POSITION_PATTERN,
        examples=["0:15"],
        description="A position 'L:E' ('L:E:P' on a partitioned topic, P the partition's index).",
    ),
]
ShortText = Annotated[StrictStr, Field(min_length=1, max_length=200)]
Label = Annotated[StrictStr, Field(max_length=200)]
TxnIdStr = Annotated[StrictStr, Field(max_length=200, examples=["txn-17"])]
Properties = dict[StrictStr, StrictStr]
TopicNameStr = Annotated[StrictStr, Field(min_length=1, max_length=200, pattern=NAME_PATTERN)]

POSITION_TEXT = "A position 'L:E' (ledger id, entry id)."
TXN_TEXT = "A transaction id as returned by begin (opaque; never reused)."
KEY_TEXT = "The message key: key_shared subscriptions route by it; null for none."
PROPERTIES_TEXT = "String properties of the message (free key/value pairs)."


def _examples(
    *examples: dict[str, Any], strict: bool = False, json_schema_extra: dict[str, Any] | None = None
) -> ConfigDict:
    """A model config whose JSON schema carries ``examples`` (shown by ``/docs``)."""
    extra = cast(JsonDict, {**(json_schema_extra or {}), "examples": list(examples)})
    return ConfigDict(strict=strict, json_schema_extra=extra)


def check_json_value(value: Any) -> None:
    """Raise ``ValueError`` if ``value`` holds a non-finite float (NaN, Infinity).

    Python's JSON parser accepts them but they are not JSON, and they could not be sent
    back to a consumer. Iterative, so deeply nested values cannot exhaust the stack. The
    HTTP layer calls it only when the raw body contains ``NaN`` or ``Infinity``.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError("numbers must be finite (NaN and Infinity are not JSON)")
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class _Request(BaseModel):
    model_config = ConfigDict(strict=True)


# ---------------------------------------------------------------------------- requests


class MessageIn(_Request):
    """One message to produce: exactly one of ``value`` (any JSON) or ``value_b64``."""

    model_config = _examples(
        {"value": {"order": 1, "amount": 9.5}, "key": "customer-7", "properties": {"src": "web"}},
        {"value_b64": "AAEC"},
        strict=True,
        json_schema_extra={"oneOf": [{"required": ["value"]}, {"required": ["value_b64"]}]},
    )

    value: Any = Field(default=None, description="Any JSON value, null included.")
    value_b64: Annotated[
        str,
        Field(pattern=BASE64_PATTERN, json_schema_extra={"contentEncoding": "base64"}),
    ] = Field(default="", description="Bytes, standard base64 with padding.")
    key: StrictStr | None = Field(default=None, description=KEY_TEXT)
    properties: Properties | None = Field(default=None, description=PROPERTIES_TEXT)
    deliver_after_ms: Annotated[
        StrictInt | None,
        Field(
            ge=0,
            le=MAX_DELIVERY_DELAY_MS,
            description="Shared and key_shared subscriptions deliver the message no earlier"
            " than this long after it is stored (Pulsar's deliverAfter); exclusive and"
            " failover ones deliver in order, at once.",
        ),
    ] = None
    deliver_at: StrictStr | None = Field(
        default=None,
        description="As deliver_after_ms, at an ISO 8601 time (UTC when it names no offset;"
        " Pulsar's deliverAt); at most a year ahead.",
        examples=["2026-11-27T04:00:00Z"],
    )

    @model_validator(mode="after")
    def _exactly_one_value(self) -> MessageIn:
        has_value = "value" in self.model_fields_set
        has_b64 = "value_b64" in self.model_fields_set
        if has_value == has_b64:
            raise ValueError("each message needs exactly one of 'value' and 'value_b64'")
        if self.deliver_at is not None:
            if self.deliver_after_ms is not None:
                raise ValueError("give deliver_after_ms or deliver_at, not both")
            moment = parse_timestamp(self.deliver_at)
            if moment.timestamp() * 1000 > time.time() * 1000 + MAX_DELIVERY_DELAY_MS:
                raise ValueError("deliver_at lies more than a year ahead")
        return self

    def deliver_at_ms(self) -> int | None:
        """The delivery time in ms since the epoch (None: at once)."""
        if self.deliver_after_ms:
            return time.time_ns() // 1_000_000 + self.deliver_after_ms
        if self.deliver_at is not None:
            return int(parse_timestamp(self.deliver_at).timestamp() * 1000)
        return None


class ProduceRequest(_Request):
    """Body of ``POST /v1/topics/{topic}/messages``."""

    model_config = _examples(
        {"messages": [{"value": {"order": 1}, "key": "k1", "properties": {"a": "b"}}]},
        {"messages": [{"value": {"order": 2}}], "txn": "txn-17"},
        {"messages": [{"value": 1}, {"value": 2}], "producer": "orders-app", "sequence": 41},
        strict=True,
    )

    messages: Annotated[list[MessageIn], Field(min_length=1)] = Field(
        description="The batch, appended atomically (all or none), in this order."
    )
    txn: TxnIdStr | None = Field(
        default=None,
        description="Append inside this open transaction (409 txn_not_open otherwise).",
    )
    producer: ShortText | None = Field(
        default=None,
        description="Idempotent producer name (with sequence): a resent batch is a duplicate.",
    )
    sequence: Annotated[StrictInt, Field(ge=0, le=MAX_SEQUENCE)] | None = Field(
        default=None,
        description="Sequence number of the first message; the next ones count up from it.",
    )

    @model_validator(mode="after")
    def _producer_with_sequence(self) -> ProduceRequest:
        if (self.producer is None) != (self.sequence is None):
            raise ValueError("'producer' and 'sequence' go together")
        if self.sequence is not None and self.sequence + len(self.messages) - 1 > MAX_SEQUENCE:
            raise ValueError("sequence numbers of this batch exceed 2**63-1")
        return self


class BeginRequest(_Request):
    """Body of ``POST /v1/transactions`` (may be empty)."""

    model_config = _examples(
        {"timeout_ms": 60000, "transactional_id": "orders-app-1", "label": "job-1:batch-7"},
        {},
        strict=True,
    )

    timeout_ms: Annotated[StrictInt, Field(ge=1, le=MAX_TXN_TIMEOUT_MS)] | None = Field(
        default=None,
        description="Abort it after this many ms unless it ends first (default 60000).",
    )
    transactional_id: ShortText | None = Field(
        default=None, description="Aborts and fences any open transaction begun with the same id."
    )
    label: Label | None = Field(
        default=None, description="Free text (at most 200 characters) to find it later by prefix."
    )


class FinishRequest(_Request):
    """Body of ``POST /v1/transactions/finish``."""

    model_config = _examples(
        {"commit": ["txn-17", "txn-18"], "abort": ["txn-19"], "idempotence_key": "epoch-42"},
        strict=True,
    )

    commit: list[TxnIdStr] = Field(
        default_factory=list, description="Transactions to commit (each must be open)."
    )
    abort: list[TxnIdStr] = Field(default_factory=list, description="Transactions to abort.")
    idempotence_key: ShortText | None = Field(
        default=None,
        description="A key already used by a successful finish makes this one abort everything"
        " it lists instead (a replayed batch never lands twice).",
    )


class SubscriptionRequest(_Request):
    """Body of ``PUT /v1/topics/{topic}/subscriptions/{sub}`` (may be empty)."""

    model_config = _examples(
        {"type": "shared", "initial_position": "earliest", "isolation": "read_committed"},
        strict=True,
    )

    type: SubscriptionType = Field(
        default="exclusive",
        description="exclusive (one consumer), failover (one active), shared (round robin)"
        " or key_shared (by key).",
    )
    initial_position: InitialPosition = Field(
        default="earliest", description="Where a new subscription starts; ignored if it exists."
    )
    isolation: Isolation = Field(
        default="read_committed",
        description="read_committed (decided data only, up to the stable position) or"
        " read_uncommitted (up to last confirmed).",
    )
    max_redeliveries: Annotated[
        StrictInt | None,
        Field(
            ge=0,
            le=1_000_000,
            description="A message delivered max_redeliveries + 1 times without an ack (nacks"
            " and expired deliveries count) moves to the dead-letter topic, atomically with"
            " its ack; null: no limit. Given for an existing subscription, it replaces the"
            " policy.",
        ),
    ] = None
    dead_letter_topic: TopicNameStr | None = Field(
        default=None,
        description="Where such messages go (default '{topic}-{subscription}-DLQ', created"
        " when needed); their properties name origin_topic, origin_subscription,"
        " origin_position and redelivery_count.",
    )
    nack_delay_ms: Annotated[
        StrictInt | None,
        Field(
            ge=0,
            le=MAX_NACK_DELAY_MS,
            description="How long a nacked message waits before it is delivered again (shared"
            " and key_shared; exclusive and failover redeliver at once, in order).",
        ),
    ] = None


class AckRequest(_Request):
    """Body of ``POST .../ack``."""

    model_config = _examples(
        {"positions": ["0:3", "0:4"]},
        {"positions": ["0:9"], "cumulative": True, "txn": "txn-17"},
        strict=True,
    )

    positions: list[PositionStr] = Field(description="Positions to acknowledge.")
    cumulative: StrictBool = Field(
        default=False, description="Acknowledge everything at or below the (highest) position."
    )
    txn: TxnIdStr | None = Field(
        default=None,
        description="Make the ack part of this transaction: it counts once it commits.",
    )


class NackRequest(_Request):
    """Body of ``POST .../nack``."""

    model_config = _examples(
        {"positions": ["0:3"]}, {"positions": ["0:3"], "delay_ms": 5000}, strict=True
    )

    positions: list[PositionStr] = Field(
        description="Delivered positions to redeliver (their redelivery_count goes up by one)."
    )
    delay_ms: Annotated[
        StrictInt | None,
        Field(
            ge=0,
            le=MAX_NACK_DELAY_MS,
            description="Deliver them again after this long (default: the subscription's"
            " nack_delay_ms; shared and key_shared only).",
        ),
    ] = None


MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
TIMESTAMP_TEXT = (
    "A publish time: ISO 8601 ('2026-11-27T04:00:00Z'; without an offset it is UTC) or"
    " milliseconds since the Unix epoch."
)


def parse_timestamp(value: int | str) -> datetime:
    """A publish time given as ISO 8601 text (UTC when it names no offset) or integer
    milliseconds since the epoch, as an aware datetime; ``ValueError`` otherwise.

    >>> parse_timestamp("2026-11-27T04:00:00Z") == parse_timestamp(1795752000000)
    True
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= MAX_TIMESTAMP_MS:
            raise ValueError(f"timestamp must be 0..{MAX_TIMESTAMP_MS} ms since the epoch")
        return datetime.fromtimestamp(value / 1000, UTC)
    if isinstance(value, str):
        if value.isdigit():
            return parse_timestamp(int(value))
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"timestamp {value!r} is not ISO 8601 (or milliseconds)") from None
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    raise ValueError("timestamp must be ISO 8601 text or integer milliseconds")


class SeekRequest(_Request):
    """Body of ``POST .../seek``: a ``position`` or a ``timestamp``."""

    model_config = _examples(
        {"position": "0:15"},
        {"position": "earliest"},
        {"timestamp": "2026-11-27T04:00:00Z"},
        {"timestamp": 1795752000000},
        strict=True,
    )

    position: Annotated[str | None, Field(pattern=SEEK_PATTERN, examples=["0:15", "earliest"])] = (
        Field(
            default=None,
            description="'L:E', earliest or latest: everything before it counts as acknowledged,"
            " everything from it on as not.",
        )
    )
    timestamp: StrictInt | StrictStr | None = Field(
        default=None,
        description=f"Instead of a position: the first message published at or after this"
        f" time (latest if none was). {TIMESTAMP_TEXT}",
        examples=["2026-11-27T04:00:00Z", 1795752000000],
    )

    @model_validator(mode="after")
    def _position_or_timestamp(self) -> SeekRequest:
        if (self.position is None) == (self.timestamp is None):
            raise ValueError("give exactly one of 'position' and 'timestamp'")
        if self.timestamp is not None:
            parse_timestamp(self.timestamp)
        return self

    def target(self) -> str | datetime:
        """The position, or the timestamp as an aware datetime."""
        if self.timestamp is not None:
            return parse_timestamp(self.timestamp)
        assert self.position is not None
        return self.position


MAX_RETENTION_MS = 100 * 365 * 86_400_000


class RetentionRequest(_Request):
    """Body of ``PUT /v1/topics/{topic}/retention``: null (or left out) is no limit."""

    model_config = _examples({"time_ms": 604800000, "size_bytes": 10737418240}, strict=True)

    time_ms: Annotated[
        StrictInt | None,
        Field(
            ge=1,
            le=MAX_RETENTION_MS,
            description="Delete a sealed ledger once it is older than this (and acknowledged"
            " by every subscription).",
        ),
    ] = None
    size_bytes: Annotated[
        StrictInt | None,
        Field(
            ge=0,
            le=2**63 - 1,
            description="Delete the oldest sealed ledgers while the topic holds more bytes"
            " (acknowledged ones only).",
        ),
    ] = None


MAX_TTL_MS = 10 * 365 * 86_400_000


class TtlRequest(_Request):
    """Body of ``PUT /v1/topics/{topic}/ttl``: null is no TTL."""

    model_config = _examples({"ttl_ms": 3600000}, {"ttl_ms": None}, strict=True)

    ttl_ms: Annotated[
        StrictInt | None,
        Field(
            ge=1,
            le=MAX_TTL_MS,
            description="Unacknowledged messages older than this are acknowledged for every"
            " subscription (a pass every ttl_check_interval seconds); null: never.",
        ),
    ]


class TopicRequest(RetentionRequest):
    """Optional body of ``PUT /v1/topics/{topic}``: the topic's retention, as
    ``PUT .../retention`` takes it, its message TTL (applied whether or not the topic
    existed), and its partition count for a partitioned topic."""

    model_config = _examples(
        {}, {"time_ms": 604800000}, {"partitions": 4}, {"ttl_ms": 3600000}, strict=True
    )

    partitions: Annotated[
        StrictInt | None,
        Field(
            ge=1,
            le=1024,
            description="Make a partitioned topic: this many topics named"
            " `{topic}-partition-{i}` (i from 0), produced to by key (Kafka's murmur2"
            " partitioner) or round-robin, subscribed to as one. Absent: a plain topic.",
        ),
    ] = None
    ttl_ms: Annotated[
        StrictInt | None,
        Field(ge=1, le=MAX_TTL_MS, description="The message TTL, as PUT .../ttl takes it."),
    ] = None

    def ttl(self) -> TtlRequest | None:
        """The TTL the body sets, if it names one."""
        if "ttl_ms" not in self.model_fields_set:
            return None
        return TtlRequest(ttl_ms=self.ttl_ms)

    def retention(self) -> RetentionRequest | None:
        """The retention the body sets, if it names any."""
        if not self.model_fields_set & {"time_ms", "size_bytes"}:
            return None
        return RetentionRequest(time_ms=self.time_ms, size_bytes=self.size_bytes)


MAX_OFFLOAD_AFTER_MS = 100 * 365 * 86_400_000


class OffloadRequest(_Request):
    """Body of ``PUT /v1/topics/{topic}/offload`` (may be empty: manual offload only,
    one local ledger kept)."""

    model_config = _examples({"after_ms": 3600000, "min_local_ledgers": 2}, strict=True)

    after_ms: Annotated[
        StrictInt | None,
        Field(
            ge=0,
            le=MAX_OFFLOAD_AFTER_MS,
            description="Offload a ledger this long after it stopped growing (background"
            " pass); null: only on POST .../offload/run.",
        ),
    ] = None
    min_local_ledgers: Annotated[
        StrictInt,
        Field(
            ge=0,
            le=1_000_000,
            description="The newest ledgers (the open one included) that always stay local.",
        ),
    ] = 1


class BatchMessageIn(MessageIn):
    """One message of an atomic multi-topic batch: its topic and exactly one of ``value``
    and ``value_b64``."""

    model_config = _examples(
        {"topic": "orders", "value": {"order": 1}, "key": "customer-7"},
        {"topic": "audit", "value_b64": "AAEC"},
        strict=True,
        json_schema_extra={"oneOf": [{"required": ["value"]}, {"required": ["value_b64"]}]},
    )

    topic: Annotated[str, Field(pattern=NAME_PATTERN)] = Field(
        description="The topic (it must exist: 404 otherwise, and nothing is stored)."
    )


class BatchRequest(_Request):
    """Body of ``POST /v1/batches``: one atomic append across topics, no transaction."""

    model_config = _examples(
        {"messages": [{"topic": "orders", "value": {"id": 1}}, {"topic": "audit", "value": "x"}]},
        strict=True,
    )

    messages: Annotated[list[BatchMessageIn], Field(min_length=1)] = Field(
        description="Appended all or nothing; positions come back in this order."
    )
