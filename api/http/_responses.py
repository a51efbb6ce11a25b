"""Response models of the HTTP API: they document the bodies the routes build (see
``_json``); the schemathesis test keeps the two in step."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ._schemas import (
    KEY_TEXT,
    POSITION_TEXT,
    PROPERTIES_TEXT,
    TXN_TEXT,
    EntryKindName,
    InitialPosition,
    Isolation,
    SubscriptionType,
    TxnState,
    _examples,
)


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

    model_config = _examples({"topic": "orders"}, {"topic": "clicks", "partitions": 4})

    topic: str = Field(description="The topic's name.")
    partitions: int | None = Field(
        default=None, description="A partitioned topic's partition count (absent otherwise)."
    )


class RetentionResponse(BaseModel):
    """``PUT /v1/topics/{topic}/retention``: the retention now in force."""

    model_config = _examples({"topic": "orders", "time_ms": 604800000, "size_bytes": None})

    topic: str = Field(description="The topic's name.")
    time_ms: int | None = Field(description="Age limit of a sealed ledger (null: none).")
    size_bytes: int | None = Field(description="Size limit of the topic (null: none).")


class TtlResponse(BaseModel):
    """``PUT /v1/topics/{topic}/ttl``: the message TTL now in force."""

    model_config = _examples({"topic": "orders", "ttl_ms": 3600000})

    topic: str = Field(description="The topic's name.")
    ttl_ms: int | None = Field(description="The message TTL (null: messages never expire).")


class RetentionInfo(BaseModel):
    """A topic's retention in its stats: its own, else the server's default."""

    time_ms: int | None = Field(description="Age limit of a sealed ledger (null: none).")
    size_bytes: int | None = Field(description="Size limit of the topic (null: none).")
    require_ack: bool = Field(description="Only ledgers every subscription acknowledged go.")
    max_age: float | None = Field(description="time_ms in seconds (the embedded API's unit).")
    max_bytes: int | None = Field(description="The same as size_bytes.")


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
    max_redeliveries: int | None = Field(
        default=None,
        description="The redelivery limit: past it a message moves to the dead-letter topic"
        " (null: none).",
    )
    dead_letter_topic: str | None = Field(
        default=None, description="Where messages past the redelivery limit go."
    )
    nack_delay_ms: int = Field(
        default=0, description="How long a nacked message waits before its redelivery."
    )
    delayed: int = Field(default=0, description="Nacked messages waiting for their delay.")
    dead_letters: int = Field(
        default=0, description="Messages past the limit waiting for their dead-letter move."
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


class OffsetsInfo(BaseModel):
    """A topic's Kafka offsets (each entry takes one, markers included; see "Using Kafka
    clients" in the README)."""

    log_start: int = Field(description="The offset of the first retained entry.")
    high_watermark: int = Field(description="One past the offset of the last durable entry.")
    last_stable: int = Field(
        description="One past the stable position's offset: the first offset a"
        " read_committed reader cannot read yet."
    )


class PartitionOf(BaseModel):
    """The partitioned topic a topic is a partition of."""

    topic: str = Field(description="The partitioned topic.")
    index: int = Field(description="This partition's index (from 0).")


class StatsResponse(BaseModel):
    """``GET /v1/topics/{topic}/stats``. A partitioned topic's lists its partitions'
    bodies under ``partitions``; its counts are their sums, its subscriptions theirs
    merged (backlogs summed), and its positions null (each partition has its own)."""

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
    ttl_ms: int | None = Field(
        default=None,
        description="The message TTL: older unacknowledged messages are acknowledged for"
        " every subscription (null: never).",
    )
    retention: RetentionInfo | None = Field(
        default=None, description="What retention deletes (null: everything is kept)."
    )
    offsets: OffsetsInfo | None = Field(
        default=None,
        description="The Kafka offsets beside the `L:E` positions (null for a partitioned"
        " topic: see each partition's).",
    )
    partition_of: PartitionOf | None = Field(
        default=None, description="Set when the topic is a partition of a partitioned topic."
    )
    partitioned: bool = Field(default=False, description="True for a partitioned topic.")
    partition_count: int | None = Field(
        default=None, description="A partitioned topic's partition count."
    )
    partitions: list[StatsResponse] | None = Field(
        default=None,
        description="A partitioned topic's partitions' stats, by index (`{topic}-partition-{i}`).",
    )


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


class BatchResponse(BaseModel):
    """``POST /v1/batches``."""

    model_config = _examples({"positions": ["0:7", "3:0"]})

    positions: list[str] = Field(description="Where each message went, in request order.")


class ProduceResponse(BaseModel):
    """``POST /v1/topics/{topic}/messages``."""

    model_config = _examples(
        {"positions": ["0:3", "0:4"], "duplicate": False},
        {
            "positions": ["0:3", "0:7"],
            "duplicate": False,
            "partitions": ["clicks-partition-2", "clicks-partition-0"],
        },
    )

    positions: list[str] = Field(
        description="Where each message went, in request order (on a partitioned topic,"
        " each in the partition named beside it in `partitions`)."
    )
    duplicate: bool = Field(
        description="True when an idempotent producer resent a stored batch (nothing new)."
    )
    partitions: list[str] | None = Field(
        default=None,
        description="Produced to a partitioned topic: the partition topic"
        " (`{topic}-partition-{i}`) of each position, in order. Absent otherwise.",
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
    max_redeliveries: int | None = Field(
        default=None,
        description="The redelivery limit: past it a message moves to the dead-letter topic"
        " (null: none).",
    )
    dead_letter_topic: str | None = Field(
        default=None, description="Where messages past the redelivery limit go."
    )
    nack_delay_ms: int = Field(
        default=0, description="How long a nacked message waits before its redelivery."
    )


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
    topic: str | None = Field(
        default=None,
        description="From a subscription on a partitioned topic: the partition topic it"
        " came from (its `position` is then `L:E:P`, P the partition index). Absent"
        " otherwise.",
    )


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

    position: str = Field(
        description="The position sought, as given; for a timestamp, the position it found"
        " ('latest' if nothing was published at or after it)."
    )


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
