"""Pydantic models of the HTTP contract (``shared/HTTP_API.md``): requests and responses.

Request models validate strictly (no ``"1"`` for an integer, no ``1`` for a boolean), so
wrong types are 400 ``invalid_request``. Response models exist for ``/openapi.json``; the
routes build their JSON bodies directly (see ``api/http/_json.py``) and the schemathesis test
keeps the two in step.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, model_validator

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

    model_config = ConfigDict(
        strict=True,
        json_schema_extra={"oneOf": [{"required": ["value"]}, {"required": ["value_b64"]}]},
    )

    value: Any = Field(default=None, description="Any JSON value, null included.")
    value_b64: Annotated[
        str,
        Field(pattern=BASE64_PATTERN, json_schema_extra={"contentEncoding": "base64"}),
    ] = Field(default="", description="Bytes, standard base64 with padding.")
    key: StrictStr | None = None
    properties: Properties | None = None

    @model_validator(mode="after")
    def _exactly_one_value(self) -> MessageIn:
        has_value = "value" in self.model_fields_set
        has_b64 = "value_b64" in self.model_fields_set
        if has_value == has_b64:
            raise ValueError("each message needs exactly one of 'value' and 'value_b64'")
        return self


class ProduceRequest(_Request):
    """Body of ``POST /v1/topics/{topic}/messages``."""

    messages: Annotated[list[MessageIn], Field(min_length=1)]
    txn: TxnIdStr | None = None
    producer: ShortText | None = None
    sequence: Annotated[StrictInt, Field(ge=0, le=MAX_SEQUENCE)] | None = None

    @model_validator(mode="after")
    def _producer_with_sequence(self) -> ProduceRequest:
        if (self.producer is None) != (self.sequence is None):
            raise ValueError("'producer' and 'sequence' go together")
        if self.sequence is not None and self.sequence + len(self.messages) - 1 > MAX_SEQUENCE:
            raise ValueError("sequence numbers of this batch exceed 2**63-1")
        return self


class BeginRequest(_Request):
    """Body of ``POST /v1/transactions`` (may be empty)."""

    timeout_ms: Annotated[StrictInt, Field(ge=1, le=MAX_TXN_TIMEOUT_MS)] | None = None
    transactional_id: ShortText | None = None
    label: Label | None = None


class FinishRequest(_Request):
    """Body of ``POST /v1/transactions/finish``."""

    commit: list[TxnIdStr] = Field(default_factory=list)
    abort: list[TxnIdStr] = Field(default_factory=list)
    idempotence_key: ShortText | None = None


class SubscriptionRequest(_Request):
    """Body of ``PUT /v1/topics/{topic}/subscriptions/{sub}`` (may be empty)."""

    type: SubscriptionType = "exclusive"
    initial_position: InitialPosition = "earliest"
    isolation: Isolation = "read_committed"


class AckRequest(_Request):
    """Body of ``POST .../ack``."""

    positions: list[PositionStr]
    cumulative: StrictBool = False
    txn: TxnIdStr | None = None


class NackRequest(_Request):
    """Body of ``POST .../nack``."""

    positions: list[PositionStr]


class SeekRequest(_Request):
    """Body of ``POST .../seek``."""

    position: Annotated[str, Field(pattern=SEEK_PATTERN, examples=["0:15", "earliest"])]


class TopicRequest(_Request):
    """Optional body of ``PUT /v1/topics/{topic}``; no settings yet."""


MAX_OFFLOAD_AFTER_MS = 100 * 365 * 86_400_000


class OffloadRequest(_Request):
    """Body of ``PUT /v1/topics/{topic}/offload`` (may be empty: manual offload only,
    one local ledger kept)."""

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

    code: str = Field(examples=["invalid_request"])
    message: str


class ErrorResponse(BaseModel):
    """Every error body: ``{"error": {"code", "message"}}``."""

    error: ErrorDetail


class HealthResponse(BaseModel):
    """``GET /v1/health``."""

    status: Literal["ok"]


class TopicResponse(BaseModel):
    """``PUT /v1/topics/{topic}``."""

    topic: str


class TopicDeletedResponse(BaseModel):
    """``DELETE /v1/topics/{topic}``."""

    topic: str
    deleted: bool


class TopicListResponse(BaseModel):
    """``GET /v1/topics``."""

    topics: list[str]


class SnapshotInfo(BaseModel):
    """The newest snapshot of a topic's transaction buffer."""

    position: str
    taken_at: str


class SubscriptionStats(BaseModel):
    """One subscription in the stats body."""

    type: str
    isolation: str
    backlog: int
    mark_delete: str | None
    consumers: list[str]


class BlockingTxnInfo(BaseModel):
    """The open transaction whose first entry holds a topic's stable position."""

    txn: str
    since: str | None = Field(description="When it began (ISO 8601, UTC).")
    deadline: str | None = Field(description="When it times out (ISO 8601, UTC).")


class StatsResponse(BaseModel):
    """``GET /v1/topics/{topic}/stats``."""

    topic: str
    last_confirmed: str | None
    stable_position: str | None
    open_txns: int
    aborted_txns: int
    ledgers: int
    entries: int
    snapshot: SnapshotInfo | None
    blocking_txn: BlockingTxnInfo | None = Field(
        None, description="The open transaction holding the stable position, if any."
    )
    subscriptions: dict[str, SubscriptionStats]
    offloaded_ledgers: int = Field(0, description="Ledgers in the object store.")
    offloaded_bytes: int = Field(0, description="Bytes of their objects.")


class LedgerOut(BaseModel):
    """One ledger of a topic, in either tier."""

    ledger: int
    entries: int
    bytes: int
    has_aborts: bool
    location: Literal["local", "remote"]
    url: str | None = Field(description="The Parquet object of a remote ledger.")


class LedgerListResponse(BaseModel):
    """``GET /v1/topics/{topic}/ledgers``: oldest first."""

    ledgers: list[LedgerOut]


class OffloadPolicyResponse(BaseModel):
    """``PUT /v1/topics/{topic}/offload``: the policy now in force."""

    topic: str
    after_ms: int | None
    min_local_ledgers: int


class OffloadRunResponse(BaseModel):
    """``POST /v1/topics/{topic}/offload/run``: the ledgers offloaded, oldest first."""

    offloaded: list[int]


class ProduceResponse(BaseModel):
    """``POST /v1/topics/{topic}/messages``."""

    positions: list[str]
    duplicate: bool


class TxnResponse(BaseModel):
    """A transaction: begin, get, commit, abort and list items."""

    txn: str
    state: TxnState
    label: str | None = None
    topics: list[str] = Field(default_factory=list)
    fenced: bool = False
    timeout_ms: int | None = None
    created_at: str | None = Field(None, description="When it began (ISO 8601, UTC).")
    deadline: str | None = Field(None, description="When it times out (ISO 8601, UTC).")
    reason: Literal["client", "timeout", "fenced", "low_watermark"] | None = Field(
        None, description="Once ended: why (its client, its timeout, fencing, low watermark)."
    )


class TxnListResponse(BaseModel):
    """``GET /v1/transactions``."""

    transactions: list[TxnResponse]


class FinishResponse(BaseModel):
    """``POST /v1/transactions/finish``."""

    committed: list[str]
    aborted: list[str]
    duplicate: bool


class SubscriptionResponse(BaseModel):
    """``PUT /v1/topics/{topic}/subscriptions/{sub}``."""

    topic: str
    subscription: str
    type: SubscriptionType
    isolation: Isolation
    initial_position: InitialPosition
    created: bool


class SubscriptionDeletedResponse(BaseModel):
    """``DELETE /v1/topics/{topic}/subscriptions/{sub}``."""

    topic: str
    subscription: str
    deleted: bool


class MessageOut(BaseModel):
    """A delivered message; ``value`` or ``value_b64``, as it was produced."""

    position: str
    value: Any = Field(default=None, description="Present when produced as JSON.")
    value_b64: str | None = Field(default=None, description="Present when produced as bytes.")
    key: str | None
    properties: dict[str, str]
    txn: str | None
    publish_time: str = Field(description="ISO-8601, UTC.")
    redelivery_count: int


class ReceiveResponse(BaseModel):
    """``GET .../subscriptions/{sub}/messages``."""

    messages: list[MessageOut]


class AckResponse(BaseModel):
    """``POST .../ack``: the number of positions named in the request."""

    acked: int


class NackResponse(BaseModel):
    """``POST .../nack``."""

    nacked: int


class SeekResponse(BaseModel):
    """``POST .../seek``."""

    position: str


class FetchedEntryOut(BaseModel):
    """One raw entry of a range fetch (data or marker)."""

    position: str
    kind: EntryKindName
    txn: str | None
    key: str | None
    value: Any = None
    value_b64: str | None = None
    properties: dict[str, str]
    publish_time: str


class AbortedTxnOut(BaseModel):
    """An aborted transaction with data in the fetched range."""

    txn: str
    first_position: str


class FetchResponse(BaseModel):
    """``GET /v1/topics/{topic}/fetch``."""

    entries: list[FetchedEntryOut]
    aborted: list[AbortedTxnOut]
    next: str
    stable_position: str | None
    last_confirmed: str | None
