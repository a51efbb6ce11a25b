"""Engine: the embedded facade and composition root.

The engine owns the store, every topic, the coordinator, every subscription and every
background task (started through :meth:`Engine._spawn`, cancelled and awaited by
:meth:`Engine.close`). Calls check the lifecycle state first: ``UNOPENED -> OPEN ->
CLOSING -> CLOSED``, or ``FAILED`` when the store or a background task failed.

Recovery on open: each topic's ledgers are reopened (a new ledger starts), its
transaction buffer is rebuilt by replaying the ledger, the coordinator loads its
transactions, and buffers are reconciled with the coordinator (an open transaction the
coordinator does not hold open gets the marker of its decision, or ABORT if it has none).
Nothing is dispatched or accepted until all of that is done.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import re
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from dispatcher import (
    Cursor,
    Isolation,
    Message,
    Subscription,
    SubscriptionType,
    parse_enum,
)
from ledger import (
    DB_FILE,
    ClosedError,
    EngineError,
    EngineFailedError,
    EntryKind,
    FencedError,
    InvalidArgumentError,
    ManagedLedger,
    OutgoingMessage,
    Position,
    Store,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    TooLargeError,
    TopicNotFoundError,
    TxnId,
    WriteBatch,
    encode_value,
    ms_to_datetime,
    now_ms,
    unpack,
)
from snapshots import SnapshotState, is_due, prepare_snapshot, recover
from txn_buffer import (
    Coordinator,
    FinishResult,
    PendingAck,
    ProducerState,
    Topic,
    TxnBuffer,
    TxnInfo,
    TxnRecord,
    TxnState,
)

from ._config import EngineConfig, RetentionPolicy
from ._metrics import EngineMetrics

log = logging.getLogger("txnstream.engine")

_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_REPLAY_CHUNK = 20_000
_MAINTENANCE_INTERVAL = 1.0


def validate_name(name: Any, what: str = "topic") -> str:
    """Check a topic or subscription name; raises :class:`InvalidArgumentError`."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidArgumentError(
            f"invalid {what} name {name!r}: 1-200 characters of [A-Za-z0-9._-]"
        )
    if name.startswith("__"):
        raise InvalidArgumentError(f"{what} names starting with '__' are reserved")
    return name


class EngineState(enum.Enum):
    """Lifecycle of an :class:`Engine`."""

    UNOPENED = "unopened"
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Positions of a produced batch; ``duplicate`` if an idempotent producer resent it."""

    positions: list[Position]
    duplicate: bool


@dataclass(frozen=True, slots=True)
class FetchedEntry:
    """A raw log entry returned by a range fetch (markers and aborted data included)."""

    position: Position
    kind: str
    txn: str | None
    key: str | None
    value: Any
    properties: dict[str, str]
    publish_time: datetime


@dataclass(frozen=True, slots=True)
class AbortedTxnRange:
    """An aborted transaction with data in a fetched range."""

    txn: str
    first_position: Position


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A range fetch: entries, the aborted transactions among them, where to go next."""

    entries: list[FetchedEntry]
    aborted: list[AbortedTxnRange]
    next: Position
    stable_position: Position | None
    last_confirmed: Position | None


def _check_message(
    message: OutgoingMessage, limit: int
) -> tuple[str | None, bytes, dict[str, str]]:
    if not isinstance(message, OutgoingMessage):
        raise InvalidArgumentError("messages must be OutgoingMessage instances")
    key, properties = message.key, message.properties
    if key is not None and not isinstance(key, str):
        raise InvalidArgumentError("a message key must be a string or None")
    if properties is None:
        properties = {}
    if not isinstance(properties, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
    ):
        raise InvalidArgumentError("message properties must be a dict of str to str")
    packed = encode_value(message.value)
    if len(packed) > limit:
        raise TooLargeError(f"message value of {len(packed)} bytes exceeds the {limit}-byte limit")
    return key, packed, dict(properties)


class Engine:
    """An embedded txnstream engine over one data directory.

    Use ``async with Engine.open(path) as engine:`` or ``engine = await Engine.open(path)``
    then ``await engine.close()``. One engine per data directory per process.
    """

    def __init__(self, path: str | Path, config: EngineConfig | None = None) -> None:
        self.path = Path(path)
        self.config = config or EngineConfig()
        self.metrics = EngineMetrics()
        self.state = EngineState.UNOPENED
        self._failure: BaseException | None = None
        self._store: Store | None = None
        self._coordinator: Coordinator | None = None
        self._topics: dict[str, Topic] = {}
        self._subscriptions: dict[tuple[str, str], Subscription] = {}
        self._snapshots: dict[int, SnapshotState] = {}
        self._retention: dict[str, RetentionPolicy] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._admin_lock = asyncio.Lock()
        self._consumer_ids = itertools.count(1)
        self._messages_in: dict[str, Any] = {}  # per-topic counter children, looked up once

    # -- lifecycle -----------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path, config: EngineConfig | None = None) -> _EngineOpener:
        """Create or open the data directory at ``path``; recovers before returning."""
        return _EngineOpener(cls(path, config))

    async def _open(self) -> None:
        if self.state is not EngineState.UNOPENED:
            raise ClosedError("an engine cannot be reopened; make a new one")
        self.path.mkdir(parents=True, exist_ok=True)
        store = await Store.open(
            self.path / DB_FILE,
            synchronous="FULL" if self.config.durability == "full" else "NORMAL",
            max_pending_entries=self.config.max_pending_entries,
        )
        self._store = store
        try:
            store.on_failure = self._fail
            store.on_flush = self.metrics.append_batch_size.observe
            coordinator = Coordinator(
                store,
                self._topics.get,
                default_timeout=self.config.default_txn_timeout,
                max_timeout=self.config.max_txn_timeout,
                ended_retention=self.config.ended_txn_retention,
            )
            coordinator.ack_participant = self
            coordinator.on_ended = self._on_txn_ended
            self._coordinator = coordinator
            await self._load_topics()
            await coordinator.load()
            await self._load_subscriptions()
            await self._reconcile()
        except BaseException:
            await store.close()
            raise
        self.state = EngineState.OPEN
        self._spawn(coordinator.run_timeouts(), name="txnstream-timeouts")
        self._spawn(self._maintain(), name="txnstream-maintenance")
        self._spawn(self._snapshot_loop(), name="txnstream-snapshots")

    async def close(self) -> None:
        """Stop background work, write everything queued, close the store. Idempotent.

        Open transactions stay open with their original deadlines.
        """
        if self.state in (EngineState.CLOSED, EngineState.UNOPENED):
            self.state = EngineState.CLOSED
            return
        if self.state is EngineState.CLOSING:
            return
        self.state = EngineState.CLOSING
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._store is not None and self._store.failure is None:
            batch = WriteBatch()
            self.coordinator.persist_open(batch)  # open transactions survive a clean close
            if batch:
                self._store.submit(batch, wait=False)
        for subscription in self._subscriptions.values():
            subscription.closed = True  # waiting receivers leave with ClosedError
        for topic in self._topics.values():
            topic.notify()
        if self._store is not None:
            await self._store.close()
        self.state = EngineState.CLOSED

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("engine task %s crashed", task.get_name(), exc_info=exc)
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        if self.state in (EngineState.CLOSED, EngineState.FAILED):
            return
        self._failure = exc
        self.state = EngineState.FAILED
        for subscription in self._subscriptions.values():
            subscription.closed = True
        for topic in self._topics.values():
            topic.notify()

    def _check_open(self) -> None:
        if self.state is EngineState.OPEN:
            return
        if self.state is EngineState.FAILED:
            raise EngineFailedError(f"the engine failed: {self._failure}") from self._failure
        raise ClosedError(f"the engine is {self.state.value}")

    @property
    def store(self) -> Store:
        """The engine's store (for tools and tests)."""
        if self._store is None:
            raise ClosedError("the engine is not open")
        return self._store

    @property
    def coordinator(self) -> Coordinator:
        """The transaction coordinator."""
        if self._coordinator is None:
            raise ClosedError("the engine is not open")
        return self._coordinator

    # -- recovery ------------------------------------------------------------------

    async def _load_topics(self) -> None:
        store = self.store
        rows = await store.read(
            "SELECT topic_id, name, created_ms, retention FROM topics ORDER BY topic_id"
        )

        async def load(topic_id: int, name: str, created_ms: int, retention: bytes | None) -> None:
            ledger = await ManagedLedger.open(
                store,
                topic_id,
                max_entries=self.config.ledger_max_entries,
                max_bytes=self.config.ledger_max_bytes,
            )
            buffer, recovery, snapshot = await recover(ledger)
            ids = await store.read(
                "SELECT (SELECT coalesce(max(snapshot_id), -1) FROM snapshots WHERE topic_id = ?),"
                " (SELECT coalesce(max(segment_id), -1) FROM snapshot_segments WHERE topic_id = ?)",
                (topic_id, topic_id),
            )
            next_snapshot, next_segment = ids[0][0] + 1, ids[0][1] + 1
            state = SnapshotState(next_snapshot_id=next_snapshot, next_segment_id=next_segment)
            state.recovery = recovery
            if snapshot is not None:
                state.segments = list(snapshot.segments)
                state.position = snapshot.position
                state.has_snapshot = True
            else:
                state.purge_segments_below = next_segment
            self._snapshots[topic_id] = state
            if retention is not None:
                self._retention[name] = RetentionPolicy.decode(retention)
            producers = {}
            for producer, last_seq, packed in await store.read(
                "SELECT producer, last_seq, positions FROM producers WHERE topic_id = ?",
                (topic_id,),
            ):
                first_seq, positions = unpack(packed)
                producers[producer] = ProducerState(
                    last_seq, first_seq, [Position.parse(p) for p in positions]
                )
            self._topics[name] = Topic(name, topic_id, ledger, buffer, producers, created_ms)

        async with asyncio.TaskGroup() as group:
            for topic_id, name, created_ms, retention in rows:
                group.create_task(load(topic_id, name, created_ms, retention))

    async def _load_subscriptions(self) -> None:
        by_id = {topic.topic_id: topic for topic in self._topics.values()}
        rows = await self.store.read(
            "SELECT topic_id, name, type, isolation, cursor, created_ms FROM subscriptions"
        )
        for topic_id, name, type_, isolation, cursor, created_ms in rows:
            topic = by_id.get(topic_id)
            if topic is None:
                continue
            self._subscriptions[(topic.name, name)] = Subscription(
                topic,
                name,
                SubscriptionType(type_),
                Isolation(isolation),
                Cursor.decode(cursor),
                created_ms,
            )

    async def _reconcile(self) -> None:
        coordinator = self.coordinator
        batch = WriteBatch()
        for topic in self._topics.values():
            for txn_id in list(topic.buffer.ongoing_txns):
                try:
                    record: TxnRecord | None = coordinator.get(txn_id)
                except EngineError:
                    record = None
                if record is not None and record.state is TxnState.OPEN:
                    coordinator.register_topic(batch, record, topic.name)
                    continue
                committed = record is not None and record.state is TxnState.COMMITTED
                log.warning(
                    "topic %s: redoing %s of transaction %s",
                    topic.name,
                    "commit" if committed else "abort",
                    txn_id,
                )
                kind = EntryKind.COMMIT if committed else EntryKind.ABORT
                topic.prepare_marker(batch, kind, txn_id)
        for record in coordinator.open_records():
            for ack in record.acks:
                subscription = self._subscriptions.get((ack.topic, ack.subscription))
                if subscription is not None:
                    positions = [Position.parse(p) for p in ack.positions]
                    subscription.hold_for_txn(positions, ack.cumulative, record.txn_id)
        await self.store.write(batch)

    # -- background ----------------------------------------------------------------

    async def _maintain(self) -> None:
        """Detach silent HTTP consumers; abort buffers' transactions below the watermark."""
        while True:
            await asyncio.sleep(_MAINTENANCE_INTERVAL)
            now = time.monotonic()
            for subscription in list(self._subscriptions.values()):
                subscription.expire(now, self.config.consumer_expiry)
            low_watermark = self.coordinator.low_watermark()
            batch = WriteBatch()
            for topic in list(self._topics.values()):
                for txn_id in topic.buffer.open_below(low_watermark):
                    if not topic.has_prepared_data(txn_id):
                        continue  # its marker is already on the way
                    log.warning("topic %s: aborting %s below the low watermark", topic.name, txn_id)
                    topic.prepare_marker(batch, EntryKind.ABORT, txn_id)
            if batch:
                await self.store.write(batch)

    async def _snapshot_loop(self) -> None:
        """Take snapshots as the policy asks; apply retention."""
        every, interval = self.config.snapshot_every, self.config.snapshot_interval
        tick = min(0.5, interval / 2)
        next_retention = 0.0
        while True:
            await asyncio.sleep(tick)
            batch = WriteBatch()
            for topic in list(self._topics.values()):
                state = self._snapshots.get(topic.topic_id)
                if state is not None and is_due(state, topic, every=every, interval=interval):
                    prepare_snapshot(batch, topic, state)
            if batch:
                await self.store.write(batch)
            if time.monotonic() >= next_retention:
                next_retention = time.monotonic() + self.config.retention_check_interval
                for name in list(self._retention):
                    if name in self._topics:
                        await self._apply_retention(self._topics[name])

    async def set_retention(
        self,
        topic: str,
        *,
        max_age: float | None = None,
        max_bytes: int | None = None,
        require_ack: bool = True,
    ) -> None:
        """Set ``topic``'s retention policy (None for both keeps everything)."""
        owner = self._topic(topic)
        try:
            policy = RetentionPolicy(max_age, max_bytes, require_ack)
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(str(exc)) from None
        batch = WriteBatch()
        batch.add(
            "UPDATE topics SET retention = ? WHERE topic_id = ?", (policy.encode(), owner.topic_id)
        )
        await self.store.write(batch)
        self._retention[topic] = policy

    async def apply_retention(self, topic: str) -> int:
        """Trim ``topic`` by its retention policy now; returns the ledgers deleted."""
        return await self._apply_retention(self._topic(topic))

    async def _apply_retention(self, topic: Topic) -> int:
        policy = self._retention.get(topic.name)
        stable = topic.buffer.max_read_position
        if policy is None or stable is None:
            return 0
        ledgers = topic.ledger.ledgers
        now = now_ms()
        acked: Position | None = stable
        if policy.require_ack:
            for (name, _), sub in self._subscriptions.items():
                if name == topic.name:
                    md = sub.cursor.mark_delete
                    if md is None:
                        return 0
                    acked = md if acked is None or md < acked else acked
        total = sum(info.bytes for info in ledgers)
        upto: int | None = None
        for info, following in itertools.pairwise(ledgers):
            if not info.sealed:
                break
            last = Position(info.ledger_id, info.entries - 1) if info.entries else None
            if last is not None and (acked is None or last > acked or last > stable):
                break
            too_old = (
                policy.max_age is not None and following.created_ms < now - policy.max_age * 1000
            )
            too_big = policy.max_bytes is not None and total > policy.max_bytes
            if not (too_old or too_big):
                break
            total -= info.bytes
            upto = info.ledger_id
        if upto is None:
            return 0
        batch = WriteBatch()
        removed = topic.ledger.prepare_trim(batch, upto)
        first = topic.ledger.first_position()
        if first is not None:
            topic.buffer.prune_aborted_before(first)
        state = self._snapshots.get(topic.topic_id)
        if state is not None:
            prepare_snapshot(batch, topic, state)  # drops segments of deleted ledgers
        await self.store.write(batch)
        log.info("topic %s: retention deleted %d ledger(s)", topic.name, removed)
        return removed

    def _retention_stats(self, name: str) -> dict[str, Any] | None:
        policy = self._retention.get(name)
        if policy is None:
            return None
        return {
            "max_age": policy.max_age,
            "max_bytes": policy.max_bytes,
            "require_ack": policy.require_ack,
        }

    async def take_snapshot(self, topic: str) -> dict[str, Any]:
        """Snapshot ``topic``'s transaction buffer now; returns what it holds."""
        owner = self._topic(topic)
        state = self._snapshots[owner.topic_id]
        batch = WriteBatch()
        size = prepare_snapshot(batch, owner, state)
        await self.store.write(batch)
        buffer = owner.buffer
        return {
            "topic": topic,
            "position": _str(buffer.last_confirmed),
            "stable_position": _str(buffer.max_read_position),
            "open_txns": {str(t): str(o.first) for t, o in buffer.ongoing_txns.items()},
            "aborted_txns": len(buffer.aborted_txns),
            "segments": len(state.segments),
            "bytes_written": size,
            "snapshot_bytes": state.size,
        }

    def _on_txn_ended(self, record: TxnRecord, committed: bool) -> None:
        if committed:
            self.metrics.txns_committed.inc()
        else:
            self.metrics.txns_aborted.inc()
            if record.timed_out:
                self.metrics.txns_timed_out.inc()

    # -- topics --------------------------------------------------------------------

    def _topic(self, name: str) -> Topic:
        self._check_open()
        topic = self._topics.get(name)
        if topic is None:
            validate_name(name)
            raise TopicNotFoundError(f"topic {name!r} not found")
        return topic

    async def create_topic(self, name: str) -> bool:
        """Create ``name`` if it does not exist; True if it was created (idempotent)."""
        self._check_open()
        validate_name(name)
        async with self._admin_lock:
            self._check_open()
            if name in self._topics:
                return False
            store = self.store
            rows = await store.read("SELECT coalesce(max(topic_id), -1) FROM topics")
            meta = await store.read("SELECT value FROM meta WHERE key = 'next_topic_id'")
            topic_id = max(int(rows[0][0]) + 1, int(meta[0][0]) if meta else 0)
            created = now_ms()
            batch = WriteBatch()
            batch.add(
                "INSERT INTO topics (topic_id, name, created_ms) VALUES (?, ?, ?)",
                (topic_id, name, created),
            )
            batch.add(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('next_topic_id', ?)",
                (topic_id + 1,),
            )
            ledger = ManagedLedger.create(
                store,
                batch,
                topic_id,
                max_entries=self.config.ledger_max_entries,
                max_bytes=self.config.ledger_max_bytes,
            )
            await store.write(batch)
            self._topics[name] = Topic(name, topic_id, ledger, TxnBuffer(), {}, created)
            self._snapshots[topic_id] = SnapshotState()
            return True

    async def list_topics(self) -> list[str]:
        """Names of every topic, sorted."""
        self._check_open()
        return sorted(self._topics)

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its data, subscriptions, buffer state and snapshots."""
        async with self._admin_lock:
            topic = self._topic(name)
            batch = WriteBatch()
            for table in (
                "entries",
                "ledgers",
                "snapshot_segments",
                "aborted_txns",
                "producers",
                "subscriptions",
                "snapshots",
                "topics",
            ):
                batch.add(f"DELETE FROM {table} WHERE topic_id = ?", (topic.topic_id,))
            self.coordinator.forget(batch, name)
            await self.store.write(batch)
            topic.deleted = True
            del self._topics[name]
            self._snapshots.pop(topic.topic_id, None)
            self._retention.pop(name, None)
            for key in [k for k in self._subscriptions if k[0] == name]:
                self._subscriptions.pop(key).deleted = True
            topic.notify()

    async def stats(self, name: str) -> dict[str, Any]:
        """The HTTP stats body of a topic, as a dict."""
        topic = self._topic(name)
        buffer = topic.buffer
        subscriptions: dict[str, Any] = {}
        for (topic_name, sub_name), sub in list(self._subscriptions.items()):
            if topic_name != name:
                continue
            md = sub.cursor.mark_delete
            subscriptions[sub_name] = {
                "type": str(sub.type),
                "isolation": str(sub.isolation),
                "backlog": await sub.backlog(),
                "mark_delete": None if md is None else str(md),
                "consumers": list(sub.consumers),
            }
        lac, stable = buffer.last_confirmed, buffer.max_read_position
        return {
            "topic": name,
            "last_confirmed": None if lac is None else str(lac),
            "stable_position": None if stable is None else str(stable),
            "open_txns": len(buffer.ongoing_txns),
            "aborted_txns": len(buffer.aborted_txns),
            "ledgers": len(topic.ledger.ledgers),
            "entries": topic.ledger.count_between(None, lac),
            "oldest_open_txn_started_at": self._oldest_open_txn(name),
            "snapshot": self._snapshot_stats(topic),
            "recovery": self._recovery_stats(topic),
            "retention": self._retention_stats(name),
            "subscriptions": subscriptions,
        }

    def _oldest_open_txn(self, topic: str) -> str | None:
        started = [
            record.created_ms
            for record in self.coordinator.open_records()
            if topic in record.topics
        ]
        return ms_to_datetime(min(started)).isoformat() if started else None

    def _snapshot_stats(self, topic: Topic) -> dict[str, Any] | None:
        state = self._snapshots.get(topic.topic_id)
        if state is None or not state.has_snapshot or state.taken_ms is None:
            return None
        return {
            "position": _str(state.position),
            "taken_at": ms_to_datetime(state.taken_ms).isoformat(),
            "size_bytes": state.size,
            "segments": len(state.segments),
        }

    def _recovery_stats(self, topic: Topic) -> dict[str, Any] | None:
        state = self._snapshots.get(topic.topic_id)
        if state is None or state.recovery is None:
            return None
        info = state.recovery
        return {
            "from_snapshot": info.from_snapshot,
            "entries_replayed": info.entries_replayed,
            "seconds": round(info.seconds, 6),
        }

    # -- producing -----------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage],
        *,
        txn: TxnId | str | None = None,
        producer: str | None = None,
        sequence: int | None = None,
    ) -> ProduceResult:
        """Append ``messages`` atomically; durable when this returns.

        With ``producer`` and ``sequence`` (the first message's sequence number), a
        batch at or below the producer's last stored sequence is a duplicate: nothing is
        appended and the original positions are returned if known. With ``txn`` the
        messages belong to that open transaction.
        """
        self._topic(topic)
        if (producer is None) != (sequence is None):
            raise InvalidArgumentError("producer and sequence go together")
        if producer is not None and (not isinstance(producer, str) or not 0 < len(producer) <= 200):
            raise InvalidArgumentError("producer must be a non-empty string of at most 200 chars")
        if sequence is not None and (
            isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0
        ):
            raise InvalidArgumentError("sequence must be a non-negative integer")
        future = await self._append(topic, messages, txn, producer, sequence, wait=True)
        if isinstance(future, ProduceResult):
            return future
        positions, done = future
        assert done is not None
        await done
        return ProduceResult(positions, False)

    async def _append(
        self,
        topic_name: str,
        messages: Sequence[OutgoingMessage],
        txn: TxnId | str | None,
        producer: str | None,
        sequence: int | None,
        *,
        wait: bool,
    ) -> ProduceResult | tuple[list[Position], asyncio.Future[None] | None]:
        if isinstance(messages, OutgoingMessage | str | bytes) or not messages:
            raise InvalidArgumentError("messages must be a non-empty list")
        limit = self.config.max_message_bytes
        encoded = [_check_message(m, limit) for m in messages]
        store = self.store
        if store.over_limit or store.failure is not None:
            await store.wait_writable()
        # Nothing below awaits: positions are assigned and submitted in one step.
        topic = self._topic(topic_name)
        if producer is not None and sequence is not None:
            duplicate = topic.duplicate_of(producer, sequence)
            if duplicate is not None:
                return ProduceResult(duplicate, True)
        batch = WriteBatch()
        txn_id = None
        if txn is not None:
            record = self._check_txn(txn)
            self.coordinator.register_topic(batch, record, topic_name)
            txn_id = record.txn_id
        positions = topic.prepare_data(batch, encoded, txn_id)
        if producer is not None and sequence is not None:
            topic.record_producer(batch, producer, sequence, positions)
        done = self.store.submit(batch, wait=wait)
        counter = self._messages_in.get(topic_name)
        if counter is None:
            counter = self._messages_in[topic_name] = self.metrics.messages_in.labels(topic_name)
        counter.inc(len(positions))
        return positions, done

    def _check_txn(self, txn: TxnId | str) -> TxnRecord:
        try:
            return self.coordinator.check_open(txn)
        except FencedError:
            self.metrics.fenced_requests.inc()
            raise

    async def send(
        self,
        topic: str,
        value: Any,
        *,
        key: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> Position:
        """Append one message; returns its position once it is durable."""
        result = await self.produce(topic, [OutgoingMessage(value, key, properties or {})])
        return result.positions[0]

    async def send_many(
        self, topic: str, values: Sequence[Any], *, key: str | None = None
    ) -> list[Position]:
        """Append several messages as one atomic, durable batch."""
        if isinstance(values, str | bytes | dict) or not isinstance(values, Sequence):
            raise InvalidArgumentError("values must be a list")
        result = await self.produce(topic, [OutgoingMessage(v, key) for v in values])
        return result.positions

    # -- transactions --------------------------------------------------------------

    async def begin(
        self,
        *,
        timeout: float | None = None,
        transactional_id: str | None = None,
        label: str | None = None,
    ) -> Transaction:
        """Begin a transaction (``timeout`` in seconds, default from the config).

        A ``transactional_id`` held by an open transaction aborts and fences it.
        """
        self._check_open()
        await self.store.wait_writable()
        self._check_open()
        record = self.coordinator.begin(
            timeout=timeout, transactional_id=transactional_id, label=label
        )
        if transactional_id is not None or not self.coordinator.id_is_durable(record.txn_id):
            # the fenced predecessor's abort, or the id block's reservation, is durable on
            # return: a crash can then neither revive the old holder nor reuse the id
            await self.store.flush()
        return Transaction(self, record.txn_id)

    def transaction(
        self,
        *,
        timeout: float | None = None,
        transactional_id: str | None = None,
        label: str | None = None,
    ) -> _TransactionScope:
        """``async with engine.transaction() as txn``: commit on exit, abort on exception."""
        return _TransactionScope(self, timeout, transactional_id, label)

    async def commit(self, txn: TxnId | str) -> TxnInfo:
        """Commit; returns once the decision and every topic's marker are durable."""
        self._check_open()
        started = time.perf_counter()
        try:
            record = await self.coordinator.commit(txn)
        except FencedError:
            self.metrics.fenced_requests.inc()
            raise
        self.metrics.commit_latency.observe(time.perf_counter() - started)
        return record.info()

    async def abort(self, txn: TxnId | str) -> TxnInfo:
        """Abort; returns once the decision and every topic's marker are durable."""
        self._check_open()
        try:
            record = await self.coordinator.abort(txn)
        except FencedError:
            self.metrics.fenced_requests.inc()
            raise
        return record.info()

    async def get_transaction(self, txn: TxnId | str) -> TxnInfo:
        """The transaction's current state, label and topics."""
        self._check_open()
        return self.coordinator.get(txn).info()

    async def transactions(
        self, state: str | None = None, label_prefix: str | None = None
    ) -> list[TxnInfo]:
        """Known transactions, filtered by state and label prefix."""
        self._check_open()
        return self.coordinator.list_txns(state, label_prefix)

    async def finish(
        self,
        commit: Sequence[TxnId | str] = (),
        abort: Sequence[TxnId | str] = (),
        idempotence_key: str | None = None,
    ) -> FinishResult:
        """Commit and abort several transactions in one atomic step (see Coordinator)."""
        self._check_open()
        for name, ids in (("commit", commit), ("abort", abort)):
            if isinstance(ids, str) or not isinstance(ids, Sequence):
                raise InvalidArgumentError(f"{name} must be a list of transaction ids")
        try:
            return await self.coordinator.finish(commit, abort, idempotence_key)
        except FencedError:
            self.metrics.fenced_requests.inc()
            raise

    def prepare_txn_end(self, batch: WriteBatch, record: TxnRecord, committed: bool) -> None:
        """Apply (commit) or release (abort) ``record``'s transactional acks into ``batch``."""
        grouped: dict[tuple[str, str], list[tuple[list[Position], bool]]] = {}
        for ack in record.acks:
            positions = [Position.parse(p) for p in ack.positions]
            grouped.setdefault((ack.topic, ack.subscription), []).append(
                (positions, ack.cumulative)
            )
        for key, acks in grouped.items():
            subscription = self._subscriptions.get(key)
            if subscription is None:
                continue
            subscription.release_txn(record.txn_id, committed, acks)
            if committed:
                subscription.prepare_cursor_write(batch)

    # -- subscriptions -------------------------------------------------------------

    def _subscription(self, topic: str, name: str) -> Subscription:
        self._topic(topic)
        subscription = self._subscriptions.get((topic, name))
        if subscription is None:
            validate_name(name, "subscription")
            raise SubscriptionNotFoundError(f"subscription {name!r} not found on topic {topic!r}")
        return subscription

    async def create_subscription(
        self,
        topic: str,
        name: str,
        *,
        type: str = "exclusive",
        initial_position: str = "earliest",
        isolation: str = "read_committed",
    ) -> bool:
        """Create a subscription; False if it exists with the same type and isolation.

        Raises :class:`SubscriptionConflictError` if it exists with other settings.
        """
        validate_name(name, "subscription")
        sub_type = parse_enum(SubscriptionType, type, "subscription type")
        sub_isolation = parse_enum(Isolation, isolation, "isolation")
        if initial_position not in ("earliest", "latest"):
            raise InvalidArgumentError("initial_position must be 'earliest' or 'latest'")
        async with self._admin_lock:
            owner = self._topic(topic)
            existing = self._subscriptions.get((topic, name))
            if existing is not None:
                if existing.type is not sub_type or existing.isolation is not sub_isolation:
                    raise SubscriptionConflictError(
                        f"subscription {name!r} exists as {existing.type}/{existing.isolation}"
                    )
                return False
            mark_delete = owner.buffer.last_confirmed if initial_position == "latest" else None
            cursor = Cursor(mark_delete)
            created = now_ms()
            batch = WriteBatch()
            batch.add(
                "INSERT INTO subscriptions (topic_id, name, type, isolation, cursor, created_ms)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (owner.topic_id, name, str(sub_type), str(sub_isolation), cursor.encode(), created),
            )
            await self.store.write(batch)
            self._subscriptions[(topic, name)] = Subscription(
                owner, name, sub_type, sub_isolation, cursor, created
            )
            return True

    async def subscribe(
        self,
        topic: str,
        name: str,
        *,
        type: str = "exclusive",
        initial_position: str = "earliest",
        isolation: str = "read_committed",
    ) -> SubscriptionHandle:
        """Create the subscription if needed and attach a new consumer to it."""
        await self.create_subscription(
            topic, name, type=type, initial_position=initial_position, isolation=isolation
        )
        subscription = self._subscription(topic, name)
        consumer = f"consumer-{next(self._consumer_ids)}"
        subscription.attach(consumer, expires=False)
        return SubscriptionHandle(self, topic, name, consumer)

    async def receive(
        self,
        topic: str,
        subscription: str,
        *,
        consumer: str = "default",
        max: int = 100,
        timeout: float = 0.0,
        expires: bool = True,
    ) -> list[Message]:
        """Deliver up to ``max`` messages to ``consumer``, waiting up to ``timeout`` s.

        Attaches the consumer (an ``expires`` consumer is detached after
        ``consumer_expiry`` seconds without polling).
        """
        if isinstance(max, bool) or not isinstance(max, int) or not 1 <= max <= 10_000:
            raise InvalidArgumentError("max must be an integer in 1..10000")
        if not isinstance(timeout, int | float) or timeout < 0:
            raise InvalidArgumentError("timeout must be a non-negative number of seconds")
        if not isinstance(consumer, str) or not consumer or len(consumer) > 200:
            raise InvalidArgumentError("consumer must be a non-empty string")
        sub = self._subscription(topic, subscription)
        sub.attach(consumer, expires=expires, expiry=self.config.consumer_expiry)
        started = time.perf_counter()
        messages = await sub.receive(consumer, max, timeout)
        if self.state is not EngineState.OPEN:
            self._check_open()
        if messages:
            self.metrics.receive_wait.observe(time.perf_counter() - started)
            self.metrics.messages_out.labels(topic).inc(len(messages))
        return messages

    async def ack(
        self,
        topic: str,
        subscription: str,
        positions: Sequence[Position | str] | Position | str,
        *,
        cumulative: bool = False,
        txn: TxnId | str | None = None,
    ) -> int:
        """Acknowledge positions (durable on return); with ``txn``, on its commit only."""
        sub = self._subscription(topic, subscription)
        parsed = _positions(positions)
        if not parsed:
            return 0
        batch = WriteBatch()
        if txn is not None:
            record = self._check_txn(txn)
            sub.check_ack(parsed, cumulative, record.txn_id)
            ack = PendingAck(topic, subscription, tuple(str(p) for p in parsed), cumulative)
            self.coordinator.register_ack(batch, record, ack)
            sub.hold_for_txn(parsed, cumulative, record.txn_id)
        else:
            sub.check_ack(parsed, cumulative, None)
            sub.apply_ack(parsed, cumulative)
            sub.prepare_cursor_write(batch)
        await self.store.write(batch)
        return len(parsed)

    async def nack(
        self, topic: str, subscription: str, positions: Sequence[Position | str] | Position | str
    ) -> None:
        """Redeliver delivered, unacknowledged positions with ``redelivery_count + 1``."""
        self._subscription(topic, subscription).nack(_positions(positions))

    async def seek(self, topic: str, subscription: str, position: Position | str) -> None:
        """Reset the cursor: before ``position`` acknowledged, from it on not."""
        sub = self._subscription(topic, subscription)
        target: Position | str = position
        if position not in ("earliest", "latest"):
            target = Position.coerce(position)
        sub.seek(target)
        batch = WriteBatch()
        sub.prepare_cursor_write(batch)
        await self.store.write(batch)

    async def delete_subscription(self, topic: str, subscription: str) -> None:
        """Delete a subscription and its cursor."""
        async with self._admin_lock:
            sub = self._subscription(topic, subscription)
            batch = WriteBatch()
            batch.add(
                "DELETE FROM subscriptions WHERE topic_id = ? AND name = ?",
                (sub.topic.topic_id, subscription),
            )
            self.coordinator.forget(batch, topic, subscription)
            await self.store.write(batch)
            del self._subscriptions[(topic, subscription)]
            sub.deleted = True
            sub.topic.notify()

    # -- range fetch ---------------------------------------------------------------

    async def fetch(
        self,
        topic: str,
        start: Position | str | None = None,
        *,
        max: int = 1000,
        isolation: str = "read_committed",
    ) -> FetchResult:
        """Raw entries from ``start`` (inclusive) up to the read limit, with the aborted list.

        read_committed returns entries at or below the stable position; ``aborted``
        names exactly the aborted transactions with data entries in the result.
        """
        owner = self._topic(topic)
        level = parse_enum(Isolation, isolation, "isolation")
        if isinstance(max, bool) or not isinstance(max, int) or not 1 <= max <= 10_000:
            raise InvalidArgumentError("max must be an integer in 1..10000")
        buffer = owner.buffer
        first = owner.ledger.first_position() or Position(0, 0)
        begin = first if start is None or start == "earliest" else Position.coerce(start)
        begin = max_position(begin, first)
        limit = (
            buffer.max_read_position if level is Isolation.READ_COMMITTED else buffer.last_confirmed
        )
        stable, lac = buffer.max_read_position, buffer.last_confirmed
        if limit is None or begin > limit:
            return FetchResult([], [], begin, stable, lac)
        entries = await owner.ledger.read(begin, limit, max)
        aborted: dict[TxnId, Position] = {}
        fetched = []
        for entry in entries:
            txn_id = entry.txn_id
            if entry.kind is EntryKind.DATA and txn_id is not None and txn_id not in aborted:
                info = buffer.aborted_txns.get(txn_id)
                if info is not None:
                    aborted[txn_id] = info.first
            fetched.append(
                FetchedEntry(
                    entry.position,
                    entry.kind.label,
                    None if txn_id is None else str(txn_id),
                    entry.key,
                    entry.value,
                    entry.properties,
                    ms_to_datetime(entry.publish_time),
                )
            )
        last = entries[-1].position if entries else limit
        return FetchResult(
            fetched,
            [AbortedTxnRange(str(t), p) for t, p in aborted.items()],
            Position(last.ledger_id, last.entry_id + 1),
            stable,
            lac,
        )


def max_position(a: Position, b: Position) -> Position:
    """The later of two positions."""
    return a if a >= b else b


def _positions(positions: Sequence[Position | str] | Position | str) -> list[Position]:
    if isinstance(positions, Position | str):
        return [Position.coerce(positions)]
    if not isinstance(positions, Sequence):
        raise InvalidArgumentError("positions must be a list")
    return [Position.coerce(p) for p in positions]


class _EngineOpener:
    """``await Engine.open(...)`` or ``async with Engine.open(...) as engine``."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __await__(self) -> Any:
        return self._open().__await__()

    async def _open(self) -> Engine:
        await self._engine._open()
        return self._engine

    async def __aenter__(self) -> Engine:
        return await self._open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._engine.close()


class Transaction:
    """A handle on one transaction: send, ack, commit, abort."""

    def __init__(self, engine: Engine, txn_id: TxnId) -> None:
        self._engine = engine
        self.txn_id = txn_id
        self.id = str(txn_id)

    def __repr__(self) -> str:
        return f"<Transaction {self.id}>"

    async def send(
        self,
        topic: str,
        value: Any,
        *,
        key: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> Position:
        """Append one message to ``topic`` in this transaction (pipelined).

        Durable at the latest when :meth:`commit` returns.
        """
        (position,) = await self.send_messages(
            topic, [OutgoingMessage(value, key, properties or {})]
        )
        return position

    async def send_many(
        self, topic: str, values: Sequence[Any], *, key: str | None = None
    ) -> list[Position]:
        """Append several messages to ``topic`` in this transaction (pipelined)."""
        if isinstance(values, str | bytes | dict) or not isinstance(values, Sequence):
            raise InvalidArgumentError("values must be a list")
        return await self.send_messages(topic, [OutgoingMessage(v, key) for v in values])

    async def send_messages(
        self, topic: str, messages: Sequence[OutgoingMessage]
    ) -> list[Position]:
        """Append prepared messages (with keys and properties) in this transaction."""
        engine = self._engine
        result = await engine._append(topic, messages, self.txn_id, None, None, wait=False)
        assert not isinstance(result, ProduceResult)
        return result[0]

    async def ack(
        self,
        topic: str,
        subscription: str,
        positions: Sequence[Position | str] | Position | str,
        *,
        cumulative: bool = False,
    ) -> int:
        """Acknowledge on ``subscription`` when this transaction commits."""
        return await self._engine.ack(
            topic, subscription, positions, cumulative=cumulative, txn=self.txn_id
        )

    async def commit(self) -> None:
        """Commit: every send and ack of this transaction takes effect atomically."""
        await self._engine.commit(self.txn_id)

    async def abort(self) -> None:
        """Abort: nothing of this transaction is ever delivered."""
        await self._engine.abort(self.txn_id)

    async def info(self) -> TxnInfo:
        """The transaction's current state."""
        return await self._engine.get_transaction(self.txn_id)


class _TransactionScope:
    def __init__(
        self,
        engine: Engine,
        timeout: float | None,
        transactional_id: str | None,
        label: str | None,
    ) -> None:
        self._engine = engine
        self._args = (timeout, transactional_id, label)
        self._txn: Transaction | None = None

    async def __aenter__(self) -> Transaction:
        timeout, transactional_id, label = self._args
        self._txn = await self._engine.begin(
            timeout=timeout, transactional_id=transactional_id, label=label
        )
        return self._txn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._txn is not None
        if exc_type is None:
            await self._txn.commit()
            return
        record = self._engine.coordinator.get(self._txn.txn_id)
        if record.state is TxnState.OPEN and not record.fenced:
            await self._txn.abort()


class SubscriptionHandle:
    """One consumer attached to a subscription (the embedded ``subscribe`` result).

    Also an async iterator: ``async for msg in sub`` receives forever.
    """

    def __init__(self, engine: Engine, topic: str, name: str, consumer: str) -> None:
        self._engine = engine
        self.topic = topic
        self.name = name
        self.consumer = consumer
        self._closed = False
        self._buffer: list[Message] = []

    async def receive(self, max: int = 100, timeout: float = 0.0) -> list[Message]:
        """Up to ``max`` messages, as soon as one is deliverable; ``[]`` after ``timeout``."""
        if self._closed:
            raise ClosedError("this consumer was closed")
        return await self._engine.receive(
            self.topic, self.name, consumer=self.consumer, max=max, timeout=timeout, expires=False
        )

    async def ack(
        self, positions: Sequence[Position | str] | Position | str, *, cumulative: bool = False
    ) -> int:
        """Acknowledge positions (or everything at or below one, with ``cumulative``)."""
        return await self._engine.ack(self.topic, self.name, positions, cumulative=cumulative)

    async def nack(self, positions: Sequence[Position | str] | Position | str) -> None:
        """Ask for redelivery of delivered, unacknowledged positions."""
        await self._engine.nack(self.topic, self.name, positions)

    async def seek(self, position: Position | str) -> None:
        """Move the cursor (``"earliest"``, ``"latest"`` or a position)."""
        await self._engine.seek(self.topic, self.name, position)

    async def close(self) -> None:
        """Detach this consumer; its unacknowledged messages go to others."""
        if self._closed:
            return
        self._closed = True
        subscription = self._engine._subscriptions.get((self.topic, self.name))
        if subscription is not None:
            subscription.detach(self.consumer)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            self._buffer = await self.receive(max=100, timeout=3600.0)
        return self._buffer.pop(0)


def _str(position: Position | None) -> str | None:
    return None if position is None else str(position)
