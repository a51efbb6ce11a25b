"""Typed topic statistics, and their one JSON shape (the HTTP stats body).

:func:`topic_stats` reads a topic's state into a :class:`TopicStats`; ``as_dict()`` gives
the body ``docs/http-api.md`` specifies (positions as ``"L:E"``, ``None`` for null), which the
embedded ``Engine.stats()`` returns too, so both surfaces share one shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from txnstream.dispatcher import Subscription
from txnstream.ledger import Position, ms_to_datetime
from txnstream.snapshots import SnapshotState
from txnstream.txn_buffer import Topic

from ._config import OffloadPolicy, RetentionPolicy


def _str(position: Position | None) -> str | None:
    return None if position is None else str(position)


def _iso(ms: int | None) -> str | None:
    """ISO 8601 UTC with milliseconds and ``Z``, as every HTTP body writes times."""
    if ms is None:
        return None
    return ms_to_datetime(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    """One subscription's settings, backlog, mark-delete position and consumers."""

    type: str
    isolation: str
    backlog: int
    mark_delete: Position | None
    consumers: list[str]
    unacked: int = 0
    """Messages delivered to a consumer and not yet acknowledged."""
    redeliveries: int = 0
    """Messages released for redelivery since the engine opened."""
    policy: dict[str, Any] | None = None
    """The consumer policy's fields (``max_redeliveries``, ``dead_letter_topic``,
    ``nack_delay_ms``)."""
    delayed: int = 0
    """Nacked messages waiting for their delay to pass."""
    dead_letters: int = 0
    """Messages past the redelivery limit waiting for their dead-letter move."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {
            **(self.policy or {}),
            "delayed": self.delayed,
            "dead_letters": self.dead_letters,
            "type": self.type,
            "isolation": self.isolation,
            "backlog": self.backlog,
            "mark_delete": _str(self.mark_delete),
            "consumers": list(self.consumers),
            "unacked": self.unacked,
            "redeliveries": self.redeliveries,
        }


@dataclass(frozen=True, slots=True)
class SnapshotStats:
    """The newest snapshot of a topic's transaction buffer."""

    position: Position | None
    taken_ms: int
    size_bytes: int
    segments: int

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {
            "position": _str(self.position),
            "taken_at": _iso(self.taken_ms),
            "size_bytes": self.size_bytes,
            "segments": self.segments,
        }


@dataclass(frozen=True, slots=True)
class RecoveryStats:
    """How the topic's buffer was rebuilt at the last open."""

    from_snapshot: bool
    entries_replayed: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {
            "from_snapshot": self.from_snapshot,
            "entries_replayed": self.entries_replayed,
            "seconds": round(self.seconds, 6),
        }


@dataclass(frozen=True, slots=True)
class BlockingTxn:
    """The open transaction whose first entry holds the stable position: consumers of
    read_committed subscriptions wait behind it until it ends."""

    txn: str
    since_ms: int | None
    deadline_ms: int | None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape: ``{"txn", "since", "deadline"}`` (ISO 8601)."""
        return {"txn": self.txn, "since": _iso(self.since_ms), "deadline": _iso(self.deadline_ms)}


@dataclass(frozen=True, slots=True)
class RecoverySummary:
    """What the engine's last open (or in-place recovery) rebuilt, over every topic."""

    topics: int
    from_snapshot: int
    """Topics whose buffer started from a snapshot (the rest were replayed in full)."""
    entries_replayed: int
    open_txns: int
    """Transactions open after recovery (they keep their deadlines)."""
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape."""
        return {
            "topics": self.topics,
            "from_snapshot": self.from_snapshot,
            "entries_replayed": self.entries_replayed,
            "open_txns": self.open_txns,
            "seconds": round(self.seconds, 6),
        }


iso_ms = _iso


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """A topic's Kafka offsets: where the retained log starts, the high watermark (past
    the last durable entry) and the last stable offset (past the stable position: the
    first offset read_committed cannot read yet). ``log_start <= last_stable <=
    high_watermark``.
    """

    log_start: int
    high_watermark: int
    last_stable: int

    def as_dict(self) -> dict[str, int]:
        """The JSON shape: ``{"log_start", "high_watermark", "last_stable"}``."""
        return {
            "log_start": self.log_start,
            "high_watermark": self.high_watermark,
            "last_stable": self.last_stable,
        }


@dataclass(frozen=True, slots=True)
class TopicStats:
    """A topic's positions, transaction-buffer counts, storage and subscriptions."""

    topic: str
    last_confirmed: Position | None
    stable_position: Position | None
    stable_lag: int
    """Entries above the stable position up to last confirmed, across ledgers."""
    open_txns: int
    aborted_txns: int
    ledgers: int
    entries: int
    bytes: int
    """Payload bytes of the retained ledgers (what the entries hold, not the file size)."""
    offloaded_ledgers: int
    """Ledgers in the object store (counted in ``ledgers`` too)."""
    offloaded_bytes: int
    """Bytes of their objects."""
    oldest_open_txn_started_ms: int | None
    blocking_txn: BlockingTxn | None
    snapshot: SnapshotStats | None
    recovery: RecoveryStats | None
    retention: RetentionPolicy | None
    subscriptions: dict[str, SubscriptionStats]
    offload: OffloadPolicy | None = None
    offsets: TopicOffsets | None = None
    """The topic's Kafka offsets (beside the ``L:E`` positions)."""
    ttl_ms: int | None = None
    """The message TTL (None: messages never expire)."""

    def as_dict(self) -> dict[str, Any]:
        """The HTTP stats body (``docs/http-api.md``, "Stats"), extra fields included."""
        policy = self.retention
        return {
            "topic": self.topic,
            "ttl_ms": self.ttl_ms,
            "last_confirmed": _str(self.last_confirmed),
            "stable_position": _str(self.stable_position),
            "offsets": None if self.offsets is None else self.offsets.as_dict(),
            "open_txns": self.open_txns,
            "aborted_txns": self.aborted_txns,
            "ledgers": self.ledgers,
            "entries": self.entries,
            "bytes": self.bytes,
            "offloaded_ledgers": self.offloaded_ledgers,
            "offloaded_bytes": self.offloaded_bytes,
            "oldest_open_txn_started_at": _iso(self.oldest_open_txn_started_ms),
            "blocking_txn": None if self.blocking_txn is None else self.blocking_txn.as_dict(),
            "snapshot": None if self.snapshot is None else self.snapshot.as_dict(),
            "recovery": None if self.recovery is None else self.recovery.as_dict(),
            "retention": None
            if policy is None
            else {
                "max_age": policy.max_age,
                "max_bytes": policy.max_bytes,
                "require_ack": policy.require_ack,
                # as PUT .../retention takes them
                "time_ms": None if policy.max_age is None else round(policy.max_age * 1000),
                "size_bytes": policy.max_bytes,
            },
            "offload": None
            if self.offload is None
            else {
                "after_ms": None
                if self.offload.after is None
                else round(self.offload.after * 1000),
                "min_local_ledgers": self.offload.min_local_ledgers,
            },
            "subscriptions": {name: sub.as_dict() for name, sub in self.subscriptions.items()},
        }


async def topic_stats(
    topic: Topic,
    subscriptions: list[Subscription],
    snapshot: SnapshotState | None,
    retention: RetentionPolicy | None,
    oldest_open_txn_started_ms: int | None,
    blocking_txn: BlockingTxn | None = None,
    offload: OffloadPolicy | None = None,
    offsets: TopicOffsets | None = None,
    ttl_ms: int | None = None,
) -> TopicStats:
    """Read ``topic``'s statistics (one backlog query per subscription)."""
    buffer = topic.buffer
    subs = {}
    for sub in subscriptions:
        subs[sub.name] = SubscriptionStats(
            str(sub.type),
            str(sub.isolation),
            await sub.backlog(),
            sub.cursor.mark_delete,
            list(sub.consumers),
            sub.unacked,
            sub.redeliveries,
            sub.policy.as_dict(),
            sub.delayed,
            len(sub.dead_letters),
        )
    lac, stable = buffer.last_confirmed, buffer.max_read_position
    taken = None
    if snapshot is not None and snapshot.has_snapshot and snapshot.taken_ms is not None:
        taken = SnapshotStats(
            snapshot.position, snapshot.taken_ms, snapshot.size, len(snapshot.segments)
        )
    info = None if snapshot is None else snapshot.recovery
    remote = topic.ledger.offloaded
    return TopicStats(
        topic=topic.name,
        last_confirmed=lac,
        stable_position=stable,
        stable_lag=topic.ledger.count_between(stable, lac),
        open_txns=len(buffer.ongoing_txns),
        aborted_txns=len(buffer.aborted_txns),
        ledgers=len(topic.ledger.ledgers),
        entries=topic.ledger.count_between(None, lac),
        bytes=sum(info.bytes for info in topic.ledger.ledgers),
        offloaded_ledgers=len(remote),
        offloaded_bytes=sum(ledger.size or 0 for ledger in remote),
        oldest_open_txn_started_ms=oldest_open_txn_started_ms,
        blocking_txn=blocking_txn,
        snapshot=taken,
        recovery=None
        if info is None
        else RecoveryStats(info.from_snapshot, info.entries_replayed, info.seconds),
        retention=retention,
        subscriptions=subs,
        offload=offload,
        offsets=offsets,
        ttl_ms=ttl_ms,
    )


def summarize_recovery(
    states: Iterable[SnapshotState], open_txns: int, seconds: float
) -> RecoverySummary:
    """Sum the topics' recovery records into one :class:`RecoverySummary`."""
    topics = from_snapshot = replayed = 0
    for state in states:
        topics += 1
        info = state.recovery
        if info is not None:
            from_snapshot += info.from_snapshot
            replayed += info.entries_replayed
    return RecoverySummary(topics, from_snapshot, replayed, open_txns, seconds)
