"""Every body the HTTP API reads or writes (``docs/http-api.md``), declared once, as a
msgspec ``Struct``.

One declaration serves three uses: requests are decoded and checked by it
(:func:`decode`), responses are encoded from it (:func:`encode`), and ``/openapi.json``
describes both with the JSON Schema msgspec derives from it (:func:`openapi_components`).
msgspec rather than pydantic models with a generated fast path: its decoder parses,
type-checks, range-checks and base64-decodes a body in one C pass (a produce message
costs ~0.2 us, a validated pydantic model ~2 us), it is strict JSON by itself (no ``"1"``
for an integer, no ``1`` for a boolean, no NaN, Infinity, ``1e400`` or lone surrogates:
all 400 ``invalid_request``), and it encodes a struct faster than ``json.dumps`` a dict.
So no second, fast declaration has to be kept in step with the documented one.

A field a body may leave out defaults to ``UNSET`` (not required in the schema, left out
of an answer); cross-field rules live in ``__post_init__`` (its ``ValueError`` is a 400).
Each field's description is the docstring under it (as pydantic's
``use_attribute_docstrings``); each struct's examples are given by ``@_schema``. They
are what ``/docs`` shows.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import json
import math
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from txnstream.api import InvalidArgumentError, PartitionMessage, Position

NAME_PATTERN = (
    r"^(?:[A-Za-z0-9.\-][A-Za-z0-9._\-]{0,199}|_(?:[A-Za-z0-9.\-][A-Za-z0-9._\-]{0,198})?)$"
)
"""Topic and subscription names: 1-200 of ``[A-Za-z0-9._-]``, not starting with ``__``.

Written without look-ahead so pydantic (path parameters) and schemathesis accept it."""
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
MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MAX_RETENTION_MS = MAX_OFFLOAD_AFTER_MS = 100 * 365 * 86_400_000
MAX_TTL_MS = 10 * 365 * 86_400_000

SubscriptionType = Literal["exclusive", "failover", "shared", "key_shared"]
InitialPosition = Literal["earliest", "latest"]
Isolation = Literal["read_committed", "read_uncommitted"]
TxnState = Literal["open", "committing", "committed", "aborting", "aborted"]

TIMESTAMP_TEXT = (
    "A publish time: ISO 8601 ('2026-11-27T04:00:00Z'; without an offset it is UTC) or"
    " milliseconds since the Unix epoch."
)


def _re(pattern: str) -> Meta:
    # msgspec searches with Python's ``re``, whose ``$`` also matches before a final
    # newline: ``\Z`` keeps "orders\n" out (the schema says ``$``: openapi_components).
    return Meta(pattern=pattern.removesuffix("$") + r"\Z")


def _in(low: int, high: int) -> Meta:
    return Meta(ge=low, le=high)


_S = TypeVar("_S", bound=type[Struct])
_EXTRA: dict[str, dict[str, Any]] = {}


def _schema(*examples: dict[str, Any], **extra: Any) -> Callable[[_S], _S]:
    """Add ``examples`` (and ``extra`` keywords) to a struct's JSON schema."""

    def mark(cls: _S) -> _S:
        _EXTRA[cls.__name__] = {**extra, "examples": list(examples)}
        return cls

    return mark


# Constrained types several request bodies share.
TxnIdIn = Annotated[str, Meta(max_length=200, examples=["txn-17"])]
ShortText = Annotated[str, Meta(min_length=1, max_length=200)]
PositionIn = Annotated[str, _re(POSITION_PATTERN), Meta(examples=["0:15"])]
Base64 = Annotated[bytes, Meta(extra_json_schema={"pattern": BASE64_PATTERN})]
"""Bytes as standard base64 with padding (msgspec decodes exactly this pattern)."""


class _In(Struct, forbid_unknown_fields=True):
    """A request body: unknown fields are refused."""


class _Out(Struct, kw_only=True):
    """A response body."""


# ---------------------------------------------------------------------------- requests


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


_ONE_VALUE = {"oneOf": [{"required": ["value"]}, {"required": ["value_b64"]}]}


@_schema(
    {"value": {"order": 1, "amount": 9.5}, "key": "customer-7", "properties": {"src": "web"}},
    {"value_b64": "AAEC"},
    **_ONE_VALUE,
)
class MessageIn(_In, kw_only=True):
    """One message to produce: exactly one of ``value`` (any JSON) or ``value_b64``."""

    value: Any = UNSET
    """Any JSON value, null included."""
    value_b64: Base64 | UnsetType = UNSET
    """Bytes, standard base64 with padding."""
    key: str | None = None
    """The message key: key_shared subscriptions route by it; null for none."""
    properties: dict[str, str] | None = None
    """String properties of the message (free key/value pairs)."""
    deliver_after_ms: Annotated[int, _in(0, MAX_DELIVERY_DELAY_MS)] | None = None
    """Shared and key_shared subscriptions deliver the message no earlier than this long
    after it is stored (Pulsar's deliverAfter); exclusive and failover ones deliver in
    order, at once."""
    deliver_at: Annotated[str, Meta(examples=["2026-11-27T04:00:00Z"])] | None = None
    """As deliver_after_ms, at an ISO 8601 time (UTC when it names no offset; Pulsar's
    deliverAt); at most a year ahead."""

    def __post_init__(self) -> None:
        if (self.value is UNSET) is (self.value_b64 is UNSET):
            raise ValueError("each message needs exactly one of 'value' and 'value_b64'")
        if self.deliver_at is not None:
            if self.deliver_after_ms is not None:
                raise ValueError("give deliver_after_ms or deliver_at, not both")
            if (
                parse_timestamp(self.deliver_at).timestamp() * 1000
                > time.time() * 1000 + MAX_DELIVERY_DELAY_MS
            ):
                raise ValueError("deliver_at lies more than a year ahead")

    def deliver_at_ms(self) -> int | None:
        """The delivery time in ms since the epoch (None: at once)."""
        if self.deliver_after_ms:
            return time.time_ns() // 1_000_000 + self.deliver_after_ms
        if self.deliver_at is not None:
            return int(parse_timestamp(self.deliver_at).timestamp() * 1000)
        return None


@_schema(
    {"messages": [{"value": {"order": 1}, "key": "k1", "properties": {"a": "b"}}]},
    {"messages": [{"value": {"order": 2}}], "txn": "txn-17"},
    {"messages": [{"value": 1}, {"value": 2}], "producer": "orders-app", "sequence": 41},
)
class ProduceRequest(_In, kw_only=True):
    """Body of ``POST /v1/topics/{topic}/messages``."""

    messages: Annotated[list[MessageIn], Meta(min_length=1)]
    """The batch, appended atomically (all or none), in this order."""
    txn: TxnIdIn | None = None
    """Append inside this open transaction (409 txn_not_open otherwise)."""
    producer: ShortText | None = None
    """Idempotent producer name (with sequence): a resent batch is a duplicate."""
    sequence: Annotated[int, _in(0, MAX_SEQUENCE)] | None = None
    """Sequence number of the first message; the next ones count up from it."""

    def __post_init__(self) -> None:
        if (self.producer is None) != (self.sequence is None):
            raise ValueError("'producer' and 'sequence' go together")
        if self.sequence is not None and self.sequence + len(self.messages) - 1 > MAX_SEQUENCE:
            raise ValueError("sequence numbers of this batch exceed 2**63-1")


@_schema(
    {"topic": "orders", "value": {"order": 1}, "key": "customer-7"},
    {"topic": "audit", "value_b64": "AAEC"},
    **_ONE_VALUE,
)
class BatchMessageIn(MessageIn, kw_only=True):
    """One message of an atomic multi-topic batch: its topic and exactly one of ``value``
    and ``value_b64``."""

    topic: Annotated[str, _re(NAME_PATTERN)]
    """The topic (it must exist: 404 otherwise, and nothing is stored)."""


@_schema({"messages": [{"topic": "orders", "value": {"id": 1}}, {"topic": "audit", "value": "x"}]})
class BatchRequest(_In):
    """Body of ``POST /v1/batches``: one atomic append across topics, no transaction."""

    messages: Annotated[list[BatchMessageIn], Meta(min_length=1)]
    """Appended all or nothing; positions come back in this order."""


@_schema({"timeout_ms": 60000, "transactional_id": "orders-app-1", "label": "job-1:batch-7"}, {})
class BeginRequest(_In):
    """Body of ``POST /v1/transactions`` (may be empty)."""

    timeout_ms: Annotated[int, _in(1, MAX_TXN_TIMEOUT_MS)] | None = None
    """Abort it after this many ms unless it ends first (default 60000)."""
    transactional_id: ShortText | None = None
    """Aborts and fences any open transaction begun with the same id."""
    label: Annotated[str, Meta(max_length=200)] | None = None
    """Free text (at most 200 characters) to find it later by prefix."""


@_schema({"commit": ["txn-17", "txn-18"], "abort": ["txn-19"], "idempotence_key": "epoch-42"})
class FinishRequest(_In):
    """Body of ``POST /v1/transactions/finish``."""

    commit: list[TxnIdIn] = []
    """Transactions to commit (each must be open)."""
    abort: list[TxnIdIn] = []
    """Transactions to abort."""
    idempotence_key: ShortText | None = None
    """A key already used by a successful finish makes this one abort everything it lists
    instead (a replayed batch never lands twice)."""


@_schema({"type": "shared", "initial_position": "earliest", "isolation": "read_committed"})
class SubscriptionRequest(_In):
    """Body of ``PUT /v1/topics/{topic}/subscriptions/{sub}`` (may be empty)."""

    type: SubscriptionType = "exclusive"
    """exclusive (one consumer), failover (one active), shared (round robin) or key_shared
    (by key)."""
    initial_position: InitialPosition = "earliest"
    """Where a new subscription starts; ignored if it exists."""
    isolation: Isolation = "read_committed"
    """read_committed (decided data only, up to the stable position) or read_uncommitted
    (up to last confirmed)."""
    max_redeliveries: Annotated[int, _in(0, 1_000_000)] | None = None
    """A message delivered max_redeliveries + 1 times without an ack (nacks and expired
    deliveries count) moves to the dead-letter topic, atomically with its ack; null: no
    limit. Given for an existing subscription, it replaces the policy."""
    dead_letter_topic: Annotated[str, _re(NAME_PATTERN)] | None = None
    """Where such messages go (default '{topic}-{subscription}-DLQ', created when needed);
    their properties name origin_topic, origin_subscription, origin_position and
    redelivery_count."""
    nack_delay_ms: Annotated[int, _in(0, MAX_NACK_DELAY_MS)] | None = None
    """How long a nacked message waits before it is delivered again (shared and
    key_shared; exclusive and failover redeliver at once, in order)."""


@_schema({"positions": ["0:3", "0:4"]}, {"positions": ["0:9"], "cumulative": True, "txn": "txn-17"})
class AckRequest(_In):
    """Body of ``POST .../ack``."""

    positions: list[PositionIn]
    """Positions to acknowledge."""
    cumulative: bool = False
    """Acknowledge everything at or below the (highest) position."""
    txn: TxnIdIn | None = None
    """Make the ack part of this transaction: it counts once it commits."""


@_schema({"positions": ["0:3"]}, {"positions": ["0:3"], "delay_ms": 5000})
class NackRequest(_In):
    """Body of ``POST .../nack``."""

    positions: list[PositionIn]
    """Delivered positions to redeliver (their redelivery_count goes up by one)."""
    delay_ms: Annotated[int, _in(0, MAX_NACK_DELAY_MS)] | None = None
    """Deliver them again after this long (default: the subscription's nack_delay_ms;
    shared and key_shared only)."""


@_schema(
    {"position": "0:15"},
    {"position": "earliest"},
    {"timestamp": "2026-11-27T04:00:00Z"},
    {"timestamp": 1795752000000},
)
class SeekRequest(_In):
    """Body of ``POST .../seek``: a ``position`` or a ``timestamp``."""

    position: Annotated[str, _re(SEEK_PATTERN), Meta(examples=["0:15", "earliest"])] | None = None
    """'L:E', earliest or latest: everything before it counts as acknowledged, everything
    from it on as not."""
    timestamp: (
        Annotated[int | str, Meta(examples=["2026-11-27T04:00:00Z", 1795752000000])] | None
    ) = None
    """Instead of a position: the first message published at or after this time (latest
    if none was). A publish time: ISO 8601 ('2026-11-27T04:00:00Z'; without an offset it
    is UTC) or milliseconds since the Unix epoch."""

    def __post_init__(self) -> None:
        if (self.position is None) == (self.timestamp is None):
            raise ValueError("give exactly one of 'position' and 'timestamp'")
        if self.timestamp is not None:
            parse_timestamp(self.timestamp)

    def target(self) -> str | datetime:
        """The position, or the timestamp as an aware datetime."""
        if self.timestamp is not None:
            return parse_timestamp(self.timestamp)
        assert self.position is not None
        return self.position


Retention = Annotated[int, _in(1, MAX_RETENTION_MS)]
Size = Annotated[int, _in(0, 2**63 - 1)]
Ttl = Annotated[int, _in(1, MAX_TTL_MS)]


@_schema({"time_ms": 604800000, "size_bytes": 10737418240})
class RetentionRequest(_In):
    """Body of ``PUT /v1/topics/{topic}/retention``: null (or left out) is no limit."""

    time_ms: Retention | None = None
    """Delete a sealed ledger once it is older than this (and acknowledged by every
    subscription)."""
    size_bytes: Size | None = None
    """Delete the oldest sealed ledgers while the topic holds more bytes (acknowledged
    ones only)."""


@_schema({"ttl_ms": 3600000}, {"ttl_ms": None})
class TtlRequest(_In):
    """Body of ``PUT /v1/topics/{topic}/ttl``: null is no TTL."""

    ttl_ms: Ttl | None
    """Unacknowledged messages older than this are acknowledged for every subscription (a
    pass every ttl_check_interval seconds); null: never."""


@_schema({}, {"time_ms": 604800000}, {"partitions": 4}, {"ttl_ms": 3600000})
class TopicRequest(_In):
    """Optional body of ``PUT /v1/topics/{topic}``: the topic's retention, as
    ``PUT .../retention`` takes it, its message TTL (applied whether or not the topic
    existed), and its partition count for a partitioned topic."""

    time_ms: Retention | UnsetType | None = UNSET
    """The retention's age limit, as PUT .../retention takes it."""
    size_bytes: Size | UnsetType | None = UNSET
    """The retention's size limit, as PUT .../retention takes it."""
    partitions: Annotated[int, _in(1, 1024)] | None = None
    """Make a partitioned topic: this many topics named `{topic}-partition-{i}` (i from
    0), produced to by key (Kafka's murmur2 partitioner) or round-robin, subscribed to as
    one. Absent: a plain topic."""
    ttl_ms: Ttl | UnsetType | None = UNSET
    """The message TTL, as PUT .../ttl takes it."""

    def ttl(self) -> TtlRequest | None:
        """The TTL the body sets, if it names one."""
        return None if self.ttl_ms is UNSET else TtlRequest(self.ttl_ms)

    def retention(self) -> RetentionRequest | None:
        """The retention the body sets, if it names any."""
        if self.time_ms is UNSET and self.size_bytes is UNSET:
            return None
        return RetentionRequest(
            None if self.time_ms is UNSET else self.time_ms,
            None if self.size_bytes is UNSET else self.size_bytes,
        )


@_schema({"after_ms": 3600000, "min_local_ledgers": 2})
class OffloadRequest(_In):
    """Body of ``PUT /v1/topics/{topic}/offload`` (may be empty: manual offload only,
    one local ledger kept)."""

    after_ms: Annotated[int, _in(0, MAX_OFFLOAD_AFTER_MS)] | None = None
    """Offload a ledger this long after it stopped growing (background pass); null: only
    on POST .../offload/run."""
    min_local_ledgers: Annotated[int, _in(0, 1_000_000)] = 1
    """The newest ledgers (the open one included) that always stay local."""


# --------------------------------------------------------------------------- responses


@_schema({"code": "not_found", "message": "topic 'orders' not found"})
class ErrorDetail(_Out, kw_only=True):
    """The ``error`` member of every 4xx/5xx body."""

    code: Annotated[str, Meta(examples=["invalid_request"])]
    """Machine-readable: invalid_request, not_found, txn_not_open, fenced, conflict,
    too_large, unauthorized, forbidden, insufficient_storage, unavailable."""
    message: str
    """What went wrong, for people."""


@_schema({"error": {"code": "not_found", "message": "topic 'orders' not found"}})
class ErrorResponse(_Out, kw_only=True):
    """Every error body: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail
    """The error's code and message."""


@_schema(
    {"status": "ok"},
    {"status": "degraded", "reason": "writes refused: 1048576 bytes free, fewer than ..."},
    {"status": "standby", "active": "http://10.0.0.7:8080"},
)
class HealthResponse(_Out, kw_only=True):
    """``GET /v1/health``."""

    status: Literal["ok", "degraded", "recovering", "failed", "standby"]
    """ok (200) only while writes are accepted; 503 with degraded while writes are refused
    (the disk is full) and reads are served; recovering while the engine reopens itself
    after a storage failure; standby on a server waiting to take over; failed otherwise."""
    reason: str | UnsetType | None = UNSET
    """Why the status is not ok."""
    active: str | UnsetType | None = UNSET
    """On a standby: the active server's ``--advertise-url`` (null: not known)."""


@_schema({"topic": "orders"}, {"topic": "clicks", "partitions": 4})
class TopicResponse(_Out, kw_only=True):
    """``PUT /v1/topics/{topic}``."""

    topic: str
    """The topic's name."""
    partitions: int | UnsetType = UNSET
    """A partitioned topic's partition count (absent otherwise)."""


@_schema({"topic": "orders", "time_ms": 604800000, "size_bytes": None})
class RetentionResponse(_Out, kw_only=True):
    """``PUT /v1/topics/{topic}/retention``: the retention now in force."""

    topic: str
    """The topic's name."""
    time_ms: int | None
    """Age limit of a sealed ledger (null: none)."""
    size_bytes: int | None
    """Size limit of the topic (null: none)."""


@_schema({"topic": "orders", "ttl_ms": 3600000})
class TtlResponse(_Out, kw_only=True):
    """``PUT /v1/topics/{topic}/ttl``: the message TTL now in force."""

    topic: str
    """The topic's name."""
    ttl_ms: int | None
    """The message TTL (null: messages never expire)."""


@_schema({"topic": "orders", "deleted": True})
class TopicDeletedResponse(_Out, kw_only=True):
    """``DELETE /v1/topics/{topic}``."""

    topic: str
    """The topic's name."""
    deleted: bool
    """Always true: its data, subscriptions and snapshots are gone."""


@_schema({"topics": ["orders", "payments"]})
class TopicListResponse(_Out, kw_only=True):
    """``GET /v1/topics``."""

    topics: list[str]
    """Every topic's name."""


# The stats body is the embedded ``Engine.stats()`` (``txnstream.api._stats``: the engine's
# shape, outside this package); these structs describe it, and
# tests/http/test_openapi_conformance.py holds what the server answers to them.


class RetentionInfo(_Out, kw_only=True):
    """A topic's retention in its stats: its own, else the server's default."""

    time_ms: int | None
    """Age limit of a sealed ledger (null: none)."""
    size_bytes: int | None
    """Size limit of the topic (null: none)."""
    require_ack: bool
    """Only ledgers every subscription acknowledged go."""
    max_age: float | None
    """time_ms in seconds (the embedded API's unit)."""
    max_bytes: int | None
    """The same as size_bytes."""


@_schema({"position": "0:15", "taken_at": "2026-05-01T12:00:00.000Z"})
class SnapshotInfo(_Out, kw_only=True):
    """The newest snapshot of a topic's transaction buffer."""

    position: str | None
    """Recovery replays the log after this position."""
    taken_at: str | None
    """When it was taken (ISO 8601, UTC)."""
    size_bytes: int | UnsetType = UNSET
    """Its size in bytes."""
    segments: int | UnsetType = UNSET
    """How many pieces it is stored in."""


class RecoveryInfo(_Out, kw_only=True):
    """How the topic's transaction buffer was rebuilt when the server opened it."""

    from_snapshot: bool
    """Whether it started from a snapshot."""
    entries_replayed: int
    """Entries of the log replayed."""
    seconds: float
    """How long it took."""


class OffloadInfo(_Out, kw_only=True):
    """A topic's offload policy in its stats."""

    after_ms: int | None
    """Offload a ledger this long after it was sealed (null: only when asked)."""
    min_local_ledgers: int
    """The newest ledgers always kept local."""


class _Policy(_Out, kw_only=True):
    max_redeliveries: int | None
    """The redelivery limit: past it a message moves to the dead-letter topic (null:
    none)."""
    dead_letter_topic: str | None
    """Where messages past the redelivery limit go."""
    nack_delay_ms: int
    """How long a nacked message waits before its redelivery."""


@_schema(
    {
        "type": "shared",
        "isolation": "read_committed",
        "backlog": 12,
        "mark_delete": "0:3",
        "consumers": ["c1"],
        "unacked": 2,
        "redeliveries": 0,
        "max_redeliveries": None,
        "dead_letter_topic": None,
        "nack_delay_ms": 0,
        "delayed": 0,
        "dead_letters": 0,
    }
)
class SubscriptionStats(_Policy, kw_only=True):
    """One subscription in the stats body."""

    type: SubscriptionType
    """exclusive, failover, shared or key_shared."""
    isolation: Isolation
    """read_committed or read_uncommitted."""
    backlog: int
    """Deliverable entries up to the read limit not yet acknowledged (markers and aborted
    data never count)."""
    mark_delete: str | None
    """Everything at or below this position is acknowledged; null for none."""
    consumers: list[str]
    """Names of the consumers attached now."""
    unacked: int
    """Messages delivered to a consumer, not yet acknowledged."""
    redeliveries: int
    """Messages released for redelivery since the server started."""
    delayed: int
    """Nacked messages waiting for their delay."""
    dead_letters: int
    """Messages past the limit waiting for their dead-letter move."""


@_schema(
    {"txn": "txn-17", "since": "2026-05-01T12:00:00.000Z", "deadline": "2026-05-01T12:01:00.000Z"}
)
class BlockingTxnInfo(_Out, kw_only=True):
    """The open transaction whose first entry holds a topic's stable position."""

    txn: str
    """A transaction id as returned by begin."""
    since: str | None
    """When it began (ISO 8601, UTC)."""
    deadline: str | None
    """When it times out (ISO 8601, UTC)."""


class OffsetsInfo(_Out, kw_only=True):
    """A topic's Kafka offsets (each entry takes one, markers included; see "Using Kafka
    clients" in the README)."""

    log_start: int
    """The offset of the first retained entry."""
    high_watermark: int
    """One past the offset of the last durable entry."""
    last_stable: int
    """One past the stable position's offset: the first offset a read_committed reader
    cannot read yet."""


class PartitionOf(_Out, kw_only=True):
    """The partitioned topic a topic is a partition of."""

    topic: str
    """The partitioned topic."""
    index: int
    """This partition's index (from 0)."""


_SUB_STATS = {
    "type": "shared",
    "isolation": "read_committed",
    "backlog": 12,
    "mark_delete": "0:2",
    "consumers": ["c1"],
    "unacked": 2,
    "redeliveries": 0,
}


@_schema(
    {
        "topic": "orders",
        "last_confirmed": "0:17",
        "stable_position": "0:14",
        "open_txns": 1,
        "aborted_txns": 0,
        "ledgers": 1,
        "entries": 18,
        "bytes": 1480,
        "offloaded_ledgers": 0,
        "offloaded_bytes": 0,
        "offsets": {"log_start": 0, "high_watermark": 18, "last_stable": 15},
        "snapshot": {"position": "0:12", "taken_at": "2026-05-01T12:00:00.000Z"},
        "blocking_txn": {
            "txn": "txn-17",
            "since": "2026-05-01T12:00:00.000Z",
            "deadline": "2026-05-01T12:01:00.000Z",
        },
        "subscriptions": {"billing": _SUB_STATS},
    }
)
class StatsResponse(_Out, kw_only=True):
    """``GET /v1/topics/{topic}/stats``. A partitioned topic's lists its partitions'
    bodies under ``partitions``; its counts are their sums, its subscriptions theirs
    merged (backlogs summed), and its positions null (each partition has its own)."""

    topic: str
    """The topic's name."""
    last_confirmed: str | None
    """The newest durable entry; null while the topic is empty."""
    stable_position: str | None
    """Read-committed consumers read up to here: last confirmed, or just before the first
    entry of the oldest open transaction."""
    open_txns: int
    """Open transactions with entries on the topic."""
    aborted_txns: int
    """Aborted transactions retained in its aborted set."""
    ledgers: int
    """Retained ledgers (segments of the log)."""
    entries: int
    """Entries of the retained ledgers, markers included."""
    bytes: int
    """Payload bytes of the retained ledgers."""
    offloaded_ledgers: int
    """Ledgers in the object store."""
    offloaded_bytes: int
    """Bytes of their objects."""
    offsets: OffsetsInfo | None
    """The Kafka offsets beside the `L:E` positions (null for a partitioned topic: see each
    partition's)."""
    snapshot: SnapshotInfo | None
    """The newest transaction-buffer snapshot, or null."""
    blocking_txn: BlockingTxnInfo | None
    """The open transaction holding the stable position, if any."""
    subscriptions: dict[str, SubscriptionStats]
    """Subscriptions by name."""
    ttl_ms: int | UnsetType | None = UNSET
    """A plain topic's message TTL: older unacknowledged messages are acknowledged for
    every subscription (null: never)."""
    retention: RetentionInfo | UnsetType | None = UNSET
    """A plain topic's retention: what it deletes (null: everything is kept)."""
    offload: OffloadInfo | UnsetType | None = UNSET
    """A plain topic's offload policy (null: none)."""
    oldest_open_txn_started_at: str | UnsetType | None = UNSET
    """A plain topic's: when its oldest open transaction began (ISO 8601)."""
    recovery: RecoveryInfo | UnsetType | None = UNSET
    """A plain topic's: how its buffer was rebuilt at the last open (null: not yet)."""
    partition_of: PartitionOf | UnsetType = UNSET
    """Set when the topic is a partition of a partitioned topic."""
    partitioned: bool | UnsetType = UNSET
    """True for a partitioned topic (absent otherwise)."""
    partition_count: int | UnsetType = UNSET
    """A partitioned topic's partition count."""
    created_at: str | UnsetType = UNSET
    """When the partitioned topic was created (ISO 8601)."""
    partitions: list[StatsResponse] | UnsetType = UNSET
    """A partitioned topic's partitions' stats, by index (`{topic}-partition-{i}`)."""


class LedgerOut(_Out, kw_only=True):
    """One ledger of a topic, in either tier."""

    ledger: int
    """The ledger's id."""
    entries: int
    """Entries in it, markers included."""
    bytes: int
    """Payload bytes of its entries."""
    has_aborts: bool
    """Whether it holds aborted-index rows (false: a reader skips its index)."""
    location: Literal["local", "remote"]
    """local: in the server's store; remote: offloaded to the object store."""
    url: str | None
    """The Parquet object of a remote ledger."""


_LEDGER = {"ledger": 1, "entries": 12, "bytes": 1300, "has_aborts": True, "location": "local"}


@_schema(
    {
        "ledgers": [
            {
                **_LEDGER,
                "ledger": 0,
                "has_aborts": False,
                "location": "remote",
                "url": "s3://bucket/txnstream/orders/00000000000000000000.parquet",
            },
            {**_LEDGER, "url": None},
        ]
    }
)
class LedgerListResponse(_Out, kw_only=True):
    """``GET /v1/topics/{topic}/ledgers``: oldest first."""

    ledgers: list[LedgerOut]
    """The topic's ledgers, oldest first."""


@_schema({"topic": "orders", "after_ms": 3600000, "min_local_ledgers": 2})
class OffloadPolicyResponse(OffloadInfo, kw_only=True):
    """``PUT /v1/topics/{topic}/offload``: the policy now in force."""

    topic: str
    """The topic's name."""


@_schema({"offloaded": [0, 1, 2]})
class OffloadRunResponse(_Out, kw_only=True):
    """``POST /v1/topics/{topic}/offload/run``: the ledgers offloaded, oldest first."""

    offloaded: list[int]
    """Ids of the ledgers offloaded by this run."""


@_schema({"positions": ["0:7", "3:0"]})
class BatchResponse(_Out, kw_only=True):
    """``POST /v1/batches``."""

    positions: list[str]
    """Where each message went, in request order."""


@_schema(
    {"positions": ["0:3", "0:4"], "duplicate": False},
    {
        "positions": ["0:3", "0:7"],
        "partitions": ["clicks-partition-2", "clicks-partition-0"],
        "duplicate": False,
    },
)
class ProduceResponse(_Out, kw_only=True):
    """``POST /v1/topics/{topic}/messages``."""

    positions: list[str]
    """Where each message went, in request order (on a partitioned topic, each in the
    partition named beside it in `partitions`)."""
    partitions: list[str] | UnsetType = UNSET
    """Produced to a partitioned topic: the partition topic (`{topic}-partition-{i}`) of
    each position, in order. Absent otherwise."""
    duplicate: bool
    """True when an idempotent producer resent a stored batch (nothing new)."""


_TXN = {
    "txn": "txn-17",
    "state": "open",
    "label": "job-1:batch-7",
    "topics": ["orders", "payments"],
    "fenced": False,
    "timeout_ms": 60000,
    "owner": None,
    "created_at": "2026-05-01T12:00:00.000Z",
    "deadline": "2026-05-01T12:01:00.000Z",
    "reason": None,
}


@_schema(_TXN, {**_TXN, "state": "aborted", "reason": "timeout"})
class TxnResponse(_Out, kw_only=True):
    """A transaction: begin, get, commit, abort and list items (begin's leaves out
    ``created_at``, ``deadline`` and ``reason``)."""

    txn: str
    """A transaction id as returned by begin (opaque; never reused)."""
    state: TxnState
    """open, committing, committed, aborting or aborted."""
    label: str | None
    """The label given at begin, or null."""
    topics: list[str]
    """Topics it has sent to, in first-use order."""
    fenced: bool
    """True when a reused transactional_id aborted and fenced it."""
    timeout_ms: int | None
    """Its timeout in milliseconds."""
    owner: str | None
    """The principal that began it (with `serve --auth`), else null."""
    created_at: str | UnsetType = UNSET
    """When it began (ISO 8601, UTC)."""
    deadline: str | UnsetType = UNSET
    """When it times out (ISO 8601, UTC)."""
    reason: Literal["client", "timeout", "fenced", "low_watermark"] | UnsetType | None = UNSET
    """Once ended: why (its client, its timeout, fencing, low watermark); else null."""

    @classmethod
    def of(cls, info: Any) -> TxnResponse:
        """The body of the engine's transaction info."""
        return cls(
            txn=str(info.txn),
            state=_name(info.state),  # type: ignore[arg-type]
            label=info.label,
            topics=list(info.topics),
            fenced=bool(info.fenced),
            timeout_ms=info.timeout_ms,
            owner=getattr(info, "owner", None),
            created_at=iso(info.created_at),
            deadline=iso(info.deadline),
            reason=info.reason,
        )


@_schema({"transactions": [_TXN]})
class TxnListResponse(_Out, kw_only=True):
    """``GET /v1/transactions``."""

    transactions: list[TxnResponse]
    """Matching transactions, oldest first."""


@_schema({"committed": ["txn-17", "txn-18"], "aborted": ["txn-19"], "duplicate": False})
class FinishResponse(_Out, kw_only=True):
    """``POST /v1/transactions/finish``."""

    committed: list[str]
    """Transactions now committed."""
    aborted: list[str]
    """Transactions now aborted."""
    duplicate: bool
    """True when the idempotence key was used before: everything listed aborted."""


@_schema(
    {
        "topic": "orders",
        "subscription": "billing",
        "type": "shared",
        "isolation": "read_committed",
        "initial_position": "earliest",
        "created": True,
        "max_redeliveries": None,
        "dead_letter_topic": None,
        "nack_delay_ms": 0,
    }
)
class SubscriptionResponse(_Policy, kw_only=True):
    """``PUT /v1/topics/{topic}/subscriptions/{sub}``."""

    topic: str
    """The topic's name."""
    subscription: str
    """The subscription's name."""
    type: SubscriptionType
    """Its type."""
    isolation: Isolation
    """Its isolation level."""
    initial_position: InitialPosition
    """Where it started when created."""
    created: bool
    """False when it existed with the same settings."""


@_schema({"topic": "orders", "subscription": "billing", "deleted": True})
class SubscriptionDeletedResponse(_Out, kw_only=True):
    """``DELETE /v1/topics/{topic}/subscriptions/{sub}``."""

    topic: str
    """The topic's name."""
    subscription: str
    """The subscription's name."""
    deleted: bool
    """Always true."""


_MESSAGE = {
    "position": "0:3",
    "value": {"order": 1},
    "key": "k1",
    "properties": {"a": "b"},
    "txn": None,
    "publish_time": "2026-05-01T12:00:00.000Z",
    "redelivery_count": 0,
}


@_schema(_MESSAGE, **_ONE_VALUE)
class MessageOut(_Out, kw_only=True):
    """A delivered message; ``value`` or ``value_b64``, as it was produced."""

    position: str
    """A position 'L:E' (ledger id, entry id): acknowledge it by this."""
    value: Any = UNSET
    """Present when produced as JSON."""
    value_b64: bytes | UnsetType = UNSET
    """Present when produced as bytes (standard base64)."""
    key: str | None
    """The message key, or null."""
    properties: dict[str, str]
    """String properties of the message (free key/value pairs)."""
    txn: str | None
    """The transaction it was produced in, or null."""
    publish_time: str
    """ISO 8601, UTC, with milliseconds."""
    redelivery_count: int
    """How often it was delivered before (nack, expiry)."""
    topic: str | UnsetType = UNSET
    """From a subscription on a partitioned topic: the partition topic it came from (its
    `position` is then `L:E:P`, P the partition index). Absent otherwise."""

    @classmethod
    def of(cls, msg: Any) -> MessageOut:
        """The body of a message the engine delivered."""
        value, data = _value_fields(msg.value)
        return cls(
            position=str(msg.position),
            value=value,
            value_b64=data,
            key=msg.key,
            properties=msg.properties,
            txn=None if msg.txn is None else str(msg.txn),
            publish_time=iso(msg.publish_time),
            redelivery_count=msg.redelivery_count,
            topic=msg.topic if isinstance(msg, PartitionMessage) else UNSET,
        )


@_schema({"messages": [_MESSAGE]})
class ReceiveResponse(_Out, kw_only=True):
    """``GET .../subscriptions/{sub}/messages``."""

    messages: list[MessageOut]
    """In position order; empty when none came."""


@_schema({"acked": 2})
class AckResponse(_Out, kw_only=True):
    """``POST .../ack``."""

    acked: int
    """The number of positions named in the request."""


@_schema({"nacked": 1})
class NackResponse(_Out, kw_only=True):
    """``POST .../nack``."""

    nacked: int
    """The number of positions named in the request."""


@_schema({"position": "0:15"})
class SeekResponse(_Out, kw_only=True):
    """``POST .../seek``."""

    position: str
    """The position sought, as given; for a timestamp, the position it found ('latest' if
    nothing was published at or after it)."""


_ENTRY = {
    "position": "0:2",
    "kind": "data",
    "txn": "txn-16",
    "key": None,
    "value": {"order": 2},
    "properties": {},
    "publish_time": "2026-05-01T12:00:00.000Z",
}


@_schema(_ENTRY)
class FetchedEntryOut(_Out, kw_only=True):
    """One raw entry of a range fetch (data or marker)."""

    position: str
    """A position 'L:E' (ledger id, entry id)."""
    kind: Literal["data", "commit", "abort"]
    """data, or a commit/abort marker ending a transaction on this topic."""
    txn: str | None
    """Its transaction, or null for a plain message."""
    key: str | None
    """The message key, or null."""
    value: Any = UNSET
    """Present for data produced as JSON (null for a marker)."""
    value_b64: bytes | UnsetType = UNSET
    """Present for data produced as bytes (standard base64)."""
    properties: dict[str, str]
    """String properties of the message (free key/value pairs)."""
    publish_time: str
    """ISO 8601, UTC, with milliseconds."""

    @classmethod
    def of(cls, entry: Any) -> FetchedEntryOut:
        """The body of one raw entry of the engine's range fetch."""
        value, data = _value_fields(entry.value)
        return cls(
            position=str(entry.position),
            kind=_name(entry.kind),  # type: ignore[arg-type]
            txn=None if entry.txn is None else str(entry.txn),
            key=entry.key,
            value=value,
            value_b64=data,
            properties=entry.properties or {},
            publish_time=iso(entry.publish_time),
        )


class AbortedTxnOut(_Out, kw_only=True):
    """An aborted transaction with data in the fetched range."""

    txn: str
    """Drop every data entry of this transaction."""
    first_position: str
    """Its first entry on this topic."""


@_schema(
    {
        "entries": [
            _ENTRY,
            {**_ENTRY, "position": "0:3", "kind": "abort", "value": None},
        ],
        "aborted": [{"txn": "txn-16", "first_position": "0:2"}],
        "next": "0:4",
        "stable_position": "0:3",
        "last_confirmed": "0:3",
    }
)
class FetchResponse(_Out, kw_only=True):
    """``GET /v1/topics/{topic}/fetch``."""

    entries: list[FetchedEntryOut]
    """Raw entries in position order: markers and aborted data included."""
    aborted: list[AbortedTxnOut]
    """Every aborted transaction with data in the returned entries."""
    next: str
    """Where the following fetch starts."""
    stable_position: str | None
    """The topic's stable position now."""
    last_confirmed: str | None
    """The topic's last confirmed entry now."""


# ------------------------------------------------------------------------------ codec


_T = TypeVar("_T", bound=Struct)
_ENCODER = msgspec.json.Encoder()
_DECODERS: dict[type[Struct], msgspec.json.Decoder[Any]] = {}


def decode(raw: bytes, shape: type[_T]) -> _T:
    """``shape`` decoded from a JSON body; :class:`InvalidArgumentError` (400
    ``invalid_request``) for anything it does not accept."""
    decoder = _DECODERS.get(shape)
    if decoder is None:
        decoder = _DECODERS[shape] = msgspec.json.Decoder(shape)
    try:
        body: _T = decoder.decode(raw or b"null")
        return body
    except msgspec.ValidationError as exc:
        raise InvalidArgumentError(_readable(str(exc))) from None
    except msgspec.DecodeError as exc:  # (msgspec calls a lone surrogate "truncated")
        raise InvalidArgumentError(
            f"malformed JSON body: {exc} (NaN, Infinity and lone surrogates are not JSON)"
        ) from None
    except RecursionError:
        raise InvalidArgumentError("malformed JSON body: nested too deeply") from None


def decode_optional(raw: bytes, shape: type[_T]) -> _T:
    """As :func:`decode`, for a body that may be empty or ``null`` (the defaults)."""
    return shape() if raw.strip() in (b"", b"null") else decode(raw, shape)


_RULES = {
    _re(NAME_PATTERN).pattern: "1-200 characters of [A-Za-z0-9._-], not starting with '__'",
    _re(POSITION_PATTERN).pattern: "a position 'L:E'",
    _re(SEEK_PATTERN).pattern: "'L:E', earliest or latest",
}


def _readable(message: str) -> str:
    """msgspec's message, a pattern's rule in words instead of the pattern."""
    for pattern, rule in _RULES.items():
        message = message.replace(f"matching regex {pattern!r}", f"of {rule}")
    return message


def encode(content: Any) -> bytes:
    """Compact UTF-8 JSON of a response struct (or any JSON-like value); never fails on
    values JSON cannot hold, which the embedded API may have stored (non-finite floats
    become null, bytes base64, lone surrogates escapes, other objects their ``str``)."""
    try:
        return _ENCODER.encode(content)
    except (TypeError, ValueError, OverflowError):  # (UnicodeEncodeError is a ValueError)
        builtins = msgspec.to_builtins(content, str_keys=True, enc_hook=str)
        return json.dumps(_finite(builtins), separators=(",", ":")).encode()


def _finite(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return None if isinstance(value, float) and not math.isfinite(value) else value


def iso(moment: datetime) -> str:
    """ISO-8601 in UTC with milliseconds and a ``Z`` (naive times count as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def pos(position: Position | None) -> str | None:
    """``"L:E"`` or None."""
    return None if position is None else str(position)


def _value_fields(value: Any) -> tuple[Any, bytes | UnsetType]:
    """``(value, value_b64)`` of a stored value: bytes as base64, anything else as JSON
    (a consumer gets back the field it was produced with)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return UNSET, bytes(value)
    return value, UNSET


def _name(value: Any) -> str:
    """A lowercase enum name (``EntryKind.COMMIT`` -> ``commit``) or the string itself."""
    if isinstance(value, str):
        return value
    label = getattr(value, "label", None)
    if isinstance(label, str):
        return label
    name = getattr(value, "value", None)
    return name if isinstance(name, str) else str(getattr(value, "name", value)).lower()


# ---------------------------------------------------------------------------- OpenAPI

REF = "#/components/schemas/{name}"


def ref(shape: type[Struct]) -> dict[str, str]:
    """A JSON Schema reference to ``shape``'s component."""
    return {"$ref": REF.format(name=shape.__name__)}


def openapi_components() -> dict[str, Any]:
    """The JSON Schema of every body, as OpenAPI components: each field described by its
    docstring, each struct with its examples."""
    shapes = [
        value
        for value in globals().values()
        if isinstance(value, type)
        and issubclass(value, Struct)
        and value.__module__ == __name__  # (not the engine's structs imported here)
        and value.__name__[0] != "_"
    ]
    _, components = msgspec.json.schema_components(shapes, ref_template=REF)
    docs = _field_docs()
    for shape in shapes:
        component = components[shape.__name__]
        component.update(_EXTRA.get(shape.__name__, {}))
        component["description"] = inspect.cleandoc(shape.__doc__ or "")
        for cls in reversed(shape.__mro__):  # (a base's fields first, then its own)
            for name, text in docs.get(cls.__name__, {}).items():
                component["properties"][name]["description"] = text
    _ecma(components)
    return components


def _field_docs() -> dict[str, dict[str, str]]:
    """The docstring under each field of each class of this module, by class name."""
    tree = ast.parse(inspect.getsource(sys.modules[__name__]))
    docs: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            fields = docs[node.name] = {}
            for field, after in itertools.pairwise(node.body):
                if (
                    isinstance(field, ast.AnnAssign)
                    and isinstance(field.target, ast.Name)
                    and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                ):
                    fields[field.target.id] = " ".join(after.value.value.split())
    return docs


def _ecma(node: Any) -> None:
    """Patterns as ECMA 262 writes them (``$``, not Python's ``\\Z``)."""
    if isinstance(node, dict):
        pattern = node.get("pattern")
        if isinstance(pattern, str) and pattern.endswith(r"\Z"):
            node["pattern"] = pattern.removesuffix(r"\Z") + "$"
        for child in node.values():
            _ecma(child)
    elif isinstance(node, list):
        for child in node:
            _ecma(child)
