"""EngineConfig: every tunable of an engine, with production defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ledger import pack, unpack

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Settings of one :class:`~api.Engine`. ``EngineConfig()`` gives the defaults.

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
    consumer_expiry: float = 30.0
    """An HTTP consumer that has not polled for this long is detached."""
    ended_txn_retention: float = 3600.0
    """How long ended transactions stay known (for idempotent commit/abort and GET)."""
    max_pending_entries: int = 20_000
    """Backpressure: appends wait while more entries than this await their group commit."""
    retention_check_interval: float = 30.0
    """How often topics with a retention policy are trimmed."""
    min_free_bytes: int = 64 * MiB
    """New data is refused (:class:`InsufficientStorageError`) while the data directory's
    file system has less free space than this; 0 turns the check off."""
    auto_recover: bool = True
    """After a storage failure, reopen and recover in place (with backoff) instead of
    staying failed until the owner reopens the engine."""

    def __post_init__(self) -> None:
        if self.durability not in ("full", "normal"):
            raise ValueError("durability must be 'full' or 'normal'")
        for name in (
            "ledger_max_entries",
            "ledger_max_bytes",
            "max_message_bytes",
            "max_request_bytes",
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
            "retention_check_interval",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.min_free_bytes < 0:
            raise ValueError("min_free_bytes must not be negative")
        if self.default_txn_timeout > self.max_txn_timeout:
            raise ValueError("default_txn_timeout exceeds max_txn_timeout")


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
