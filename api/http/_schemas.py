"""Pydantic models of the HTTP contract (``docs/http-api.md``): requests and responses.

Request models validate strictly (no ``"1"`` for an integer, no ``1`` for a boolean), so
wrong types are 400 ``invalid_request``. Response models exist for ``/openapi.json``; the
routes build their JSON bodies directly (see ``api/http/_json.py``) and the schemathesis test
keeps the two in step. Every field has a description and every model an example: they
are what ``/docs`` shows.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator
from pydantic.config import JsonDict

NAME_PATTERN = (
    r"^(?:[A-Za-z0-9.\-][A-Za-z0-9._\-]{0,199}|_(?:[A-Za-z0-9.\-][A-Za-z0-9._\-]{0,198})?)$"
)
"""Topic and subscription names: 1-200 of ``[A-Za-z0-9._-]``, not starting with ``__``.

Written without look-ahead so both pydantic's regex engine and schemathesis accept it.
"""
POSITION_PATTERN = r"^(?:0|[1-9][0-9]{0,17}):(?:0|[1-9][0-9]{0,17})$"
SEEK_PATTERN = r"^(?:earliest|latest|(?:0|[1-9][0-9]{0,17}):(?:0|[1-9][0-9]{0,17}))$"
FETCH_FROM_PATTERN = r"^(?:earliest|(?:0|[1-9][0-9]{0,17}):(?:0|[1-9][0-9]{0,17}))$"
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"

MAX_SEQUENCE = 2**63 - 1
MAX_TXN_TIMEOUT_MS = 900_000

SubscriptionType = Literal["exclusive", "failover", "shared", "key_shared"]
InitialPosition = Literal["earliest", "latest"]
Isolation = Literal["read_committed", "read_uncommitted"]
TxnState = Literal["open", "committing", "committed", "aborting", "aborted"]
EntryKindName = Literal["data", "commit", "abort"]

PositionStr = Annotated[
    str, Field(pattern=POSITION_PATTERN, examples=["0:15"], description="A position 'L:E'.")
]
ShortText = Annotated[StrictStr, Field(min_length=1, max_length=200)]
Label = Annotated[StrictStr, Field(max_length=200)]
TxnIdStr = Annotated[StrictStr, Field(max_length=200, examples=["txn-17"])]
Properties = dict[StrictStr, StrictStr]

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

    @model_validator(mode="after")
    def _exactly_one_value(self) -> MessageIn:
        has_value = "value" in self.model_fields_set
        has_b64 = "value_b64" in self.model_fields_set
        if has_value == has_b64:
            raise ValueError("each message needs exactly one of 'value' and 'value_b64'")
        return self


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

    model_config = _examples({"positions": ["0:3"]}, strict=True)

    positions: list[PositionStr] = Field(
        description="Delivered positions to redeliver (their redelivery_count goes up by one)."
    )


class SeekRequest(_Request):
    """Body of ``POST .../seek``."""

    model_config = _examples({"position": "0:15"}, {"position": "earliest"}, strict=True)

    position: Annotated[str, Field(pattern=SEEK_PATTERN, examples=["0:15", "earliest"])] = Field(
        description="'L:E', earliest or latest: everything before it counts as acknowledged,"
        " everything from it on as not."
    )


class TopicRequest(_Request):
    """Optional body of ``PUT /v1/topics/{topic}``; no settings yet."""

    model_config = _examples({}, strict=True)


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


# --------------------------------------------------------------------------- responses


class ErrorDetail(BaseModel):
    """The ``error`` member of every 4xx/5xx body."""

    model_config = _examples({"code": "not_found", "message": "topic 'orders' not found"})

    code: str = Field(
        examples=["invalid_request"],
        description="Machine-readable: invalid_request, not_found, txn_not_open, fenced,"
        " conflict, too_large, unauthorized, forbidden, insufficient_storage, unavailable.",
    )
    message: str = Field(description="What went wrong, for people.")


class ErrorResponse(BaseModel):
    """Every error body: ``{"error": {"code", "message"}}``."""

    model_config = _examples(
        {"error": {"code": "not_found", "message": "topic 'orders' not found"}}
    )

    error: ErrorDetail = Field(description="The error's code and message.")


class HealthResponse(BaseModel):
    """``GET /v1/health``."""

    model_config = _examples(
        {"status": "ok"},
        {"status": "degraded", "reason": "writes refused: 1048576 bytes free, fewer than ..."},
    )

    status: Literal["ok", "degraded", "recovering", "failed"] = Field(
        description="ok (200) only while writes are accepted; 503 with degraded while"
        " writes are refused (the disk is full) and reads are served; recovering while the"
        " engine reopens itself after a storage failure; failed otherwise."
    )
    reason: str | None = Field(default=None, description="Why the status is not ok.")


class TopicResponse(BaseModel):
    """``PUT /v1/topics/{topic}``."""

    model_config = _examples({"topic": "orders"})

    topic: str = Field(description="The topic's name.")


class TopicDeletedResponse(BaseModel):
    """``DELETE /v1/topics/{topic}``."""

    model_config = _examples({"topic": "orders", "deleted": True})

    topic: str = Field(description="The topic's name.")
    deleted: bool = Field(
        description="Always true: its data, subscriptions and snapshots are gone."
    )


class TopicListResponse(BaseModel):
    """``GET /v1/topics``."""

    model_config = _examples({"topics": ["orders", "payments"]})

    topics: list[str] = Field(description="Every topic's name.")


class SnapshotInfo(BaseModel):
    """The newest snapshot of a topic's transaction buffer."""

    model_config = _examples({"position": "0:15", "taken_at": "2026-05-01T12:00:00.000+00:00"})

    position: str = Field(description="Recovery replays the log after this position.")
    taken_at: str = Field(description="When it was taken (ISO 8601, UTC).")


class SubscriptionStats(BaseModel):
    """One subscription in the stats body."""

    model_config = _examples(
        {
            "type": "shared",
            "isolation": "read_committed",
            "backlog": 12,
            "mark_delete": "0:3",
            "consumers": ["c1"],
            "unacked": 2,
            "redeliveries": 0,
        }
    )

    type: str = Field(description="exclusive, failover, shared or key_shared.")
    isolation: str = Field(description="read_committed or read_uncommitted.")
    backlog: int = Field(
        description="Deliverable entries up to the read limit not yet acknowledged (markers and"
        " aborted data never count)."
    )
    mark_delete: str | None = Field(
        description="Everything at or below this position is acknowledged; null for none."
    )
    consumers: list[str] = Field(description="Names of the consumers attached now.")
    unacked: int = Field(
        default=0, description="Messages delivered to a consumer, not yet acknowledged."
    )
    redeliveries: int = Field(
        default=0, description="Messages released for redelivery since the server started."
    )


class BlockingTxnInfo(BaseModel):
    """The open transaction whose first entry holds a topic's stable position."""

    model_config = _examples(
        {
            "txn": "txn-17",
            "since": "2026-05-01T12:00:00.000+00:00",
            "deadline": "2026-05-01T12:01:00.000+00:00",
        }
    )

    txn: str = Field(description=TXN_TEXT)
    since: str | None = Field(description="When it began (ISO 8601, UTC).")
    deadline: str | None = Field(description="When it times out (ISO 8601, UTC).")


class StatsResponse(BaseModel):
    """``GET /v1/topics/{topic}/stats``."""

    model_config = _examples(
        {
            "topic": "orders",
            "last_confirmed": "0:17",
            "stable_position": "0:14",
            "open_txns": 1,
            "aborted_txns": 0,
            "ledgers": 1,
            "entries": 18,
            "bytes": 1480,
            "snapshot": {"position": "0:12", "taken_at": "2026-05-01T12:00:00.000+00:00"},
            "blocking_txn": {
                "txn": "txn-17",
                "since": "2026-05-01T12:00:00.000+00:00",
                "deadline": "2026-05-01T12:01:00.000+00:00",
            },
            "subscriptions": {
                "billing": {
                    "type": "shared",
                    "isolation": "read_committed",
                    "backlog": 12,
                    "mark_delete": "0:2",
                    "consumers": ["c1"],
                    "unacked": 2,
                    "redeliveries": 0,
                }
            },
        }
    )

    topic: str = Field(description="The topic's name.")
    last_confirmed: str | None = Field(
        description="The newest durable entry; null while the topic is empty."
    )
    stable_position: str | None = Field(
        description="Read-committed consumers read up to here: last confirmed, or just before"
        " the first entry of the oldest open transaction."
    )
    open_txns: int = Field(description="Open transactions with entries on the topic.")
    aborted_txns: int = Field(description="Aborted transactions retained in its aborted set.")
    ledgers: int = Field(description="Retained ledgers (segments of the log).")
    entries: int = Field(description="Entries of the retained ledgers, markers included.")
    bytes: int = Field(default=0, description="Payload bytes of the retained ledgers.")
    snapshot: SnapshotInfo | None = Field(
        description="The newest transaction-buffer snapshot, or null."
    )
    blocking_txn: BlockingTxnInfo | None = Field(
        default=None, description="The open transaction holding the stable position, if any."
    )
    subscriptions: dict[str, SubscriptionStats] = Field(description="Subscriptions by name.")
    offloaded_ledgers: int = Field(0, description="Ledgers in the object store.")
    offloaded_bytes: int = Field(0, description="Bytes of their objects.")


class LedgerOut(BaseModel):
    """One ledger of a topic, in either tier."""

    ledger: int = Field(description="The ledger's id.")
    entries: int = Field(description="Entries in it, markers included.")
    bytes: int = Field(description="Payload bytes of its entries.")
    has_aborts: bool = Field(
        description="Whether it holds aborted-index rows (false: a reader skips its index)."
    )
    location: Literal["local", "remote"] = Field(
        description="local: in the SQLite file; remote: offloaded to the object store."
    )
    url: str | None = Field(description="The Parquet object of a remote ledger.")


class LedgerListResponse(BaseModel):
    """``GET /v1/topics/{topic}/ledgers``: oldest first."""

    model_config = _examples(
        {
            "ledgers": [
                {
                    "ledger": 0,
                    "entries": 50000,
                    "bytes": 5600000,
                    "has_aborts": False,
                    "location": "remote",
                    "url": "s3://bucket/txnstream/orders/00000000000000000000.parquet",
                },
                {
                    "ledger": 1,
                    "entries": 12,
                    "bytes": 1300,
                    "has_aborts": True,
                    "location": "local",
                    "url": None,
                },
            ]
        }
    )

    ledgers: list[LedgerOut] = Field(description="The topic's ledgers, oldest first.")


class OffloadPolicyResponse(BaseModel):
    """``PUT /v1/topics/{topic}/offload``: the policy now in force."""

    model_config = _examples({"topic": "orders", "after_ms": 3600000, "min_local_ledgers": 2})

    topic: str = Field(description="The topic's name.")
    after_ms: int | None = Field(
        description="Offload a ledger this long after it was sealed (null: only when asked)."
    )
    min_local_ledgers: int = Field(description="The newest ledgers always kept local.")


class OffloadRunResponse(BaseModel):
    """``POST /v1/topics/{topic}/offload/run``: the ledgers offloaded, oldest first."""

    model_config = _examples({"offloaded": [0, 1, 2]})

    offloaded: list[int] = Field(description="Ids of the ledgers offloaded by this run.")


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


class BatchResponse(BaseModel):
    """``POST /v1/batches``."""

    model_config = _examples({"positions": ["0:7", "3:0"]})

    positions: list[str] = Field(description="Where each message went, in request order.")


class ProduceResponse(BaseModel):
    """``POST /v1/topics/{topic}/messages``."""

    model_config = _examples({"positions": ["0:3", "0:4"], "duplicate": False})

    positions: list[str] = Field(description="Where each message went, in request order.")
    duplicate: bool = Field(
        description="True when an idempotent producer resent a stored batch (nothing new)."
    )


class TxnResponse(BaseModel):
    """A transaction: begin, get, commit, abort and list items."""

    model_config = _examples(
        {
            "txn": "txn-17",
            "state": "open",
            "label": "job-1:batch-7",
            "topics": ["orders", "payments"],
            "fenced": False,
            "timeout_ms": 60000,
            "created_at": "2026-05-01T12:00:00.000Z",
            "deadline": "2026-05-01T12:01:00.000Z",
            "reason": None,
        },
        {
            "txn": "txn-16",
            "state": "aborted",
            "label": None,
            "topics": ["orders"],
            "fenced": False,
            "timeout_ms": 60000,
            "created_at": "2026-05-01T11:58:00.000Z",
            "deadline": "2026-05-01T11:59:00.000Z",
            "reason": "timeout",
        },
    )

    txn: str = Field(description=TXN_TEXT)
    state: TxnState = Field(description="open, committing, committed, aborting or aborted.")
    label: str | None = Field(default=None, description="The label given at begin, or null.")
    topics: list[str] = Field(
        default_factory=list, description="Topics it has sent to, in first-use order."
    )
    fenced: bool = Field(
        default=False, description="True when a reused transactional_id aborted and fenced it."
    )
    timeout_ms: int | None = Field(default=None, description="Its timeout in milliseconds.")
    created_at: str | None = Field(default=None, description="When it began (ISO 8601, UTC).")
    deadline: str | None = Field(default=None, description="When it times out (ISO 8601, UTC).")
    reason: Literal["client", "timeout", "fenced", "low_watermark"] | None = Field(
        default=None,
        description="Once ended: why (its client, its timeout, fencing, low watermark).",
    )
    owner: str | None = Field(
        None, description="The principal that began it (with `serve --auth`), else null."
    )


class TxnListResponse(BaseModel):
    """``GET /v1/transactions``."""

    model_config = _examples(
        {
            "transactions": [
                {
                    "txn": "txn-17",
                    "state": "open",
                    "label": "job-1:batch-7",
                    "topics": ["orders"],
                    "fenced": False,
                    "timeout_ms": 60000,
                    "created_at": "2026-05-01T12:00:00.000Z",
                    "deadline": "2026-05-01T12:01:00.000Z",
                    "reason": None,
                }
            ]
        }
    )

    transactions: list[TxnResponse] = Field(description="Matching transactions, oldest first.")


class FinishResponse(BaseModel):
    """``POST /v1/transactions/finish``."""

    model_config = _examples(
        {"committed": ["txn-17", "txn-18"], "aborted": ["txn-19"], "duplicate": False}
    )

    committed: list[str] = Field(description="Transactions now committed.")
    aborted: list[str] = Field(description="Transactions now aborted.")
    duplicate: bool = Field(
        description="True when the idempotence key was used before: everything listed aborted."
    )


class SubscriptionResponse(BaseModel):
    """``PUT /v1/topics/{topic}/subscriptions/{sub}``."""

    model_config = _examples(
        {
            "topic": "orders",
            "subscription": "billing",
            "type": "shared",
            "isolation": "read_committed",
            "initial_position": "earliest",
            "created": True,
        }
    )

    topic: str = Field(description="The topic's name.")
    subscription: str = Field(description="The subscription's name.")
    type: SubscriptionType = Field(description="Its type.")
    isolation: Isolation = Field(description="Its isolation level.")
    initial_position: InitialPosition = Field(description="Where it started when created.")
    created: bool = Field(description="False when it existed with the same settings.")


class SubscriptionDeletedResponse(BaseModel):
    """``DELETE /v1/topics/{topic}/subscriptions/{sub}``."""

    model_config = _examples({"topic": "orders", "subscription": "billing", "deleted": True})

    topic: str = Field(description="The topic's name.")
    subscription: str = Field(description="The subscription's name.")
    deleted: bool = Field(description="Always true.")


class MessageOut(BaseModel):
    """A delivered message; ``value`` or ``value_b64``, as it was produced."""

    model_config = _examples(
        {
            "position": "0:3",
            "value": {"order": 1},
            "key": "k1",
            "properties": {"a": "b"},
            "txn": None,
            "publish_time": "2026-05-01T12:00:00.000Z",
            "redelivery_count": 0,
        }
    )

    position: str = Field(description=POSITION_TEXT + " Acknowledge it by this.")
    value: Any = Field(default=None, description="Present when produced as JSON.")
    value_b64: str | None = Field(default=None, description="Present when produced as bytes.")
    key: str | None = Field(description=KEY_TEXT)
    properties: dict[str, str] = Field(description=PROPERTIES_TEXT)
    txn: str | None = Field(description="The transaction it was produced in, or null.")
    publish_time: str = Field(description="ISO-8601, UTC.")
    redelivery_count: int = Field(description="How often it was delivered before (nack, expiry).")


class ReceiveResponse(BaseModel):
    """``GET .../subscriptions/{sub}/messages``."""

    model_config = _examples(
        {
            "messages": [
                {
                    "position": "0:3",
                    "value": {"order": 1},
                    "key": "k1",
                    "properties": {},
                    "txn": None,
                    "publish_time": "2026-05-01T12:00:00.000Z",
                    "redelivery_count": 0,
                }
            ]
        }
    )

    messages: list[MessageOut] = Field(description="In position order; empty when none came.")


class AckResponse(BaseModel):
    """``POST .../ack``: the number of positions named in the request."""

    model_config = _examples({"acked": 2})

    acked: int = Field(description="The number of positions named in the request.")


class NackResponse(BaseModel):
    """``POST .../nack``."""

    model_config = _examples({"nacked": 1})

    nacked: int = Field(description="The number of positions named in the request.")


class SeekResponse(BaseModel):
    """``POST .../seek``."""

    model_config = _examples({"position": "0:15"})

    position: str = Field(description="The position sought, as given.")


class FetchedEntryOut(BaseModel):
    """One raw entry of a range fetch (data or marker)."""

    model_config = _examples(
        {
            "position": "0:5",
            "kind": "data",
            "txn": "txn-17",
            "key": None,
            "value": {"order": 2},
            "properties": {},
            "publish_time": "2026-05-01T12:00:00.000Z",
        }
    )

    position: str = Field(description=POSITION_TEXT)
    kind: EntryKindName = Field(
        description="data, or a commit/abort marker ending a transaction on this topic."
    )
    txn: str | None = Field(description="Its transaction, or null for a plain message.")
    key: str | None = Field(description=KEY_TEXT)
    value: Any = Field(default=None, description="Present for data produced as JSON.")
    value_b64: str | None = Field(default=None, description="Present for data produced as bytes.")
    properties: dict[str, str] = Field(description=PROPERTIES_TEXT)
    publish_time: str = Field(description="ISO-8601, UTC.")


class AbortedTxnOut(BaseModel):
    """An aborted transaction with data in the fetched range."""

    model_config = _examples({"txn": "txn-16", "first_position": "0:2"})

    txn: str = Field(description="Drop every data entry of this transaction.")
    first_position: str = Field(description="Its first entry on this topic.")


class FetchResponse(BaseModel):
    """``GET /v1/topics/{topic}/fetch``."""

    model_config = _examples(
        {
            "entries": [
                {
                    "position": "0:2",
                    "kind": "data",
                    "txn": "txn-16",
                    "key": None,
                    "value": {"order": 2},
                    "properties": {},
                    "publish_time": "2026-05-01T12:00:00.000Z",
                },
                {
                    "position": "0:3",
                    "kind": "abort",
                    "txn": "txn-16",
                    "key": None,
                    "value": None,
                    "properties": {},
                    "publish_time": "2026-05-01T12:00:01.000Z",
                },
            ],
            "aborted": [{"txn": "txn-16", "first_position": "0:2"}],
            "next": "0:4",
            "stable_position": "0:3",
            "last_confirmed": "0:3",
        }
    )

    entries: list[FetchedEntryOut] = Field(
        description="Raw entries in position order: markers and aborted data included."
    )
    aborted: list[AbortedTxnOut] = Field(
        description="Every aborted transaction with data in the returned entries."
    )
    next: str = Field(description="Where the following fetch starts.")
    stable_position: str | None = Field(description="The topic's stable position now.")
    last_confirmed: str | None = Field(description="The topic's last confirmed entry now.")
