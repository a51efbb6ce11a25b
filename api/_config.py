"""EngineConfig: every tunable of an engine, with production defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from txnstream.ledger import InvalidArgumentError, normalize_url, pack, unpack

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Settings of one :class:`~txnstream.api.Engine`. ``EngineConfig()`` gives the defaults.

    ``durability="full"`` (SQLite ``synchronous=FULL``) makes an acknowledged write
    survive power loss. ``"normal"`` (``synchronous=NORMAL`` in WAL mode) survives a
    process crash (``kill -9``) but may lose the newest commits on power loss or an OS
    crash.
    """

    durability: Literal["full", "normal"] = "full"
    ledger_max_entries: int = 50_000
    ledger_max_bytes: int = 64 * MiB
    snapshot_every: int = 1000
    """Take a snapshot after this many stable-position advances at commits/aborts..."""
    snapshot_interval: float = 5.0
    """...or after this many seconds, whichever first, when something changed."""
    default_txn_timeout: float = 60.0
    max_txn_timeout: float = 900.0
    max_message_bytes: int = 5 * MiB
    max_request_bytes: int = 32 * MiB
    max_messages_per_request: int = 10_000
    """Messages one HTTP produce or batch request may carry (413 ``too_large`` past it)."""
    consumer_expiry: float = 30.0
    """An HTTP consumer that has not polled for this long is detached."""
    ended_txn_retention: float = 3600.0
    """How long ended transactions stay known (for idempotent commit/abort and GET)."""
    producer_expiry: float = 86400.0
    """An idempotent producer's state on a topic (its last sequence number and batch) is
    forgotten once its last batch there is this many seconds old (Kafka's
    ``producer.id.expiration.ms``): a batch of it after that is a new producer's (the
    Kafka listener answers one not starting at sequence 0 UNKNOWN_PRODUCER_ID, and the
    client starts over with a new producer id)."""
    transactional_id_expiry: float = 604800.0
    """The Kafka listener forgets a transactional id (its durable producer epoch) with no
    InitProducerId and no transaction begun for this many seconds and no open transaction
    (Kafka's ``transactional.id.expiration.ms``): its next InitProducerId starts it over."""
    max_pending_entries: int = 20_000
    """Backpressure: appends wait while more entries than this await their group commit."""
    retention_check_interval: float = 30.0
    """How often topics with a retention policy are trimmed."""
    ttl_check_interval: float = 5.0
    """How often topics with a message TTL acknowledge their expired messages for every
    subscription (:meth:`~txnstream.api.Engine.set_ttl`)."""
    min_free_bytes: int = 64 * MiB
    """New data is refused (:class:`InsufficientStorageError`) while the data directory's
    file system has less free space than this; 0 turns the check off."""
    auto_recover: bool = True
    """After a storage failure, reopen and recover in place (with backoff) instead of
    staying failed until the owner reopens the engine."""
    offload_url: str | None = None
    """Where sealed, decided ledgers may be offloaded as Parquet objects: a local
    directory (``file:///dir`` or a plain path) or ``s3://bucket/prefix`` (credentials
    and endpoint from the ``AWS_*`` environment). None: no offloading (ledgers already
    offloaded stay readable)."""
    offload_check_interval: float = 5.0
    """How often topics with an offload policy are checked for ledgers to offload."""
    offload_takeover: bool = False
    """Offload into a prefix that another data directory's store claimed (its marker
    object ``__txnstream_owner.json`` names it): rewrite the marker with this directory's
    identity. Only for a prefix whose owner is gone for good (e.g. this is its restored
    backup); the other store's objects are never deleted, and it offloads there no more."""
    writer: Literal["thread", "process"] = "thread"
    """Where SQLite writes run. ``"thread"``: a thread of this process. ``"process"``: a
    child process (``ledger/_writer_process.py``), so that they do not share the GIL
    with a busy event loop, and a flush is written while the loop runs on; ``serve`` uses
    it. Same durability either way. The process adds ~25 ms to each open; with concurrent
    producers it writes faster (8 producers of transactions: ~1.3x the thread)."""
    default_retention: RetentionPolicy | None = None
    """The retention of topics that have no policy of their own (``set_retention``; a
    topic set to keep everything keeps everything). None: keep everything."""
    gc_freeze: bool = True
    """Keep CPython's garbage collections short and rare: pause automatic collection
    while recovering, then :func:`gc.freeze` what exists once open (undone when the last
    such engine of the process closes), and collect the young generation every 5,000 net
    new containers rather than 700 while open. Process-wide; see ``api/_gc.py``."""
    lease_timeout: float = 5.0
    """PostgreSQL store: seconds the active's lease lasts without a renewal (renewed
    every third of it). A standby takes over once it expired; an active that could not
    renew it in time steps down."""
    advertise_url: str | None = None
    """PostgreSQL store: the URL clients are sent to while this engine is the active
    (kept in the lease row; standbys redirect there). ``serve`` defaults it to its own."""
    kafka_advertise: str | None = None
    """PostgreSQL store: the ``HOST:PORT`` Kafka clients are sent to while this engine is
    the active (kept in the lease row; standbys' Kafka listeners name it in Metadata and
    FindCoordinator). ``serve --kafka-listen`` sets it to its listener's advertised
    address; None: this server has no Kafka listener."""

    def __post_init__(self) -> None:
        if self.durability not in ("full", "normal"):
            raise ValueError("durability must be 'full' or 'normal'")
        if self.writer not in ("thread", "process"):
            raise ValueError("writer must be 'thread' or 'process'")
        for name in (
            "ledger_max_entries",
            "ledger_max_bytes",
            "max_message_bytes",
            "max_request_bytes",
            "max_messages_per_request",
            "max_pending_entries",
            "snapshot_every",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in (
            "default_txn_timeout",
            "max_txn_timeout",
            "snapshot_interval",
            "consumer_expiry",
            "ended_txn_retention",
            "producer_expiry",
            "transactional_id_expiry",
            "retention_check_interval",
            "ttl_check_interval",
            "offload_check_interval",
            "lease_timeout",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.min_free_bytes < 0:
            raise ValueError("min_free_bytes must not be negative")
        if self.default_retention is not None and not isinstance(
            self.default_retention, RetentionPolicy
        ):
            raise ValueError("default_retention must be a RetentionPolicy or None")
        if self.default_txn_timeout > self.max_txn_timeout:
            raise ValueError("default_txn_timeout exceeds max_txn_timeout")
        if self.offload_url is not None:
            try:
                normalize_url(self.offload_url)
            except InvalidArgumentError as exc:
                raise ValueError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What of a topic's log may be deleted, by whole ledgers.

    A sealed ledger goes when it is older than ``max_age`` seconds, or when the topic's
    retained bytes exceed ``max_bytes`` without it; with ``require_ack`` (default) only
    once every subscription has acknowledged all of it. A ledger holding anything above
    the stable position is never deleted.
    """

    max_age: float | None = None
    max_bytes: int | None = None
    require_ack: bool = True

    def __post_init__(self) -> None:
        if self.max_age is not None and not self.max_age > 0:
            raise ValueError("max_age must be positive seconds")
        if self.max_bytes is not None and not self.max_bytes >= 0:
            raise ValueError("max_bytes must be non-negative")

    def encode(self) -> bytes:
        """Durable form."""
        return pack([self.max_age, self.max_bytes, self.require_ack])

    @classmethod
    def decode(cls, data: bytes) -> RetentionPolicy:
        """Inverse of :meth:`encode`."""
        max_age, max_bytes, require_ack = unpack(data)
        return cls(max_age, max_bytes, bool(require_ack))


@dataclass(frozen=True, slots=True)
class OffloadPolicy:
    """When a topic's ledgers go to the object store (``EngineConfig.offload_url``).

    A ledger qualifies once it is sealed and entirely at or below the stable position.
    With ``after`` (seconds; None: only when asked, ``engine.offload``) the background
    pass offloads it once it stopped growing that long ago (judged by the next ledger's
    creation, as retention does); the newest ``min_local_ledgers`` ledgers (the open one
    included) always stay local.
    """

    after: float | None = None
    min_local_ledgers: int = 1

    def __post_init__(self) -> None:
        after = self.after
        if after is not None and (
            isinstance(after, bool)
            or not isinstance(after, int | float)
            or not 0 <= after <= 100 * 365 * 86400
        ):
            raise ValueError("after must be seconds in 0..3153600000, or None")
        n = self.min_local_ledgers
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 1_000_000:
            raise ValueError("min_local_ledgers must be an integer in 0..1000000")

    def encode(self) -> bytes:
        """Durable form."""
        return pack([self.after, self.min_local_ledgers])

    @classmethod
    def decode(cls, data: bytes) -> OffloadPolicy:
        """Inverse of :meth:`encode`."""
        after, keep = unpack(data)
        return cls(after, int(keep))
