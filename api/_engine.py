"""Engine: the embedded facade and composition root.

The engine owns the store, every topic, the coordinator, the subscription registry and
every background task (started through :meth:`Engine._spawn`, cancelled and awaited by
:meth:`Engine.close`). Calls check the lifecycle state first: ``UNOPENED -> OPEN ->
CLOSING -> CLOSED``, or ``FAILED`` when the store or a background task failed.

Work lives in the layers; this module wires it: recovery in :mod:`api._recovery`, the
range fetch and subscriptions in :mod:`dispatcher`, snapshots in :mod:`snapshots`,
retention and low-watermark upkeep in :mod:`api._maintenance`, statistics in
:mod:`api._stats`, and the handles it returns in :mod:`api._handles`.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from dispatcher import FetchResult, Message, Subscription, SubscriptionRegistry, fetch
from ledger import (
    DB_FILE,
    Catalog,
    ClosedError,
    EngineFailedError,
    FencedError,
    InvalidArgumentError,
    ManagedLedger,
    OutgoingMessage,
    Position,
    Store,
    TooLargeError,
    TopicNotFoundError,
    TxnId,
    WriteBatch,
    encode_value,
    now_ms,
    validate_name,
)
from snapshots import SnapshotState, is_due, prepare_delete_topic, prepare_snapshot
from txn_buffer import Coordinator, FinishResult, PendingAck, Topic, TxnBuffer, TxnInfo, TxnRecord

from ._config import EngineConfig, RetentionPolicy
from ._handles import SubscriptionHandle, Transaction, TransactionScope
from ._maintenance import prepare_low_watermark_aborts, retention_cut
from ._metrics import EngineMetrics
from ._recovery import load_topics, reconcile
from ._stats import TopicStats, topic_stats

log = logging.getLogger("txnstream.engine")

_MAINTENANCE_INTERVAL = 1.0
_MAX_RECEIVE = 10_000

PositionsArg = Sequence[Position | str] | Position | str


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


def _positions(positions: PositionsArg) -> list[Position]:
    if isinstance(positions, Position | str):
        return [Position.coerce(positions)]
    if not isinstance(positions, Sequence):
        raise InvalidArgumentError("positions must be a list")
    return [Position.coerce(p) for p in positions]


def _values(values: Sequence[Any]) -> Sequence[Any]:
    if isinstance(values, str | bytes | dict) or not isinstance(values, Sequence):
        raise InvalidArgumentError("values must be a list")
    return values


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
        self._subscriptions: SubscriptionRegistry | None = None
        self._topics: dict[str, Topic] = {}
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
            loaded = await load_topics(store, self.config)
            self._topics, self._snapshots = loaded.topics, loaded.snapshots
            self._retention = loaded.retention
            subscriptions = self._subscriptions = SubscriptionRegistry(store)
            coordinator = self._coordinator = Coordinator(
                store,
                self._topics.get,
                default_timeout=self.config.default_txn_timeout,
                max_timeout=self.config.max_txn_timeout,
                ended_retention=self.config.ended_txn_retention,
            )
            coordinator.ack_participant = subscriptions
            coordinator.on_ended = self._on_txn_ended
            await coordinator.load()
            await subscriptions.load({t.topic_id: t for t in self._topics.values()})
            await store.write(reconcile(self._topics, coordinator, subscriptions))
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
        self._wake_all()  # waiting receivers leave with ClosedError
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
        self._wake_all()

    def _wake_all(self) -> None:
        if self._subscriptions is not None:
            self._subscriptions.close()
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

    @property
    def subscriptions(self) -> SubscriptionRegistry:
        """Every subscription of every topic."""
        if self._subscriptions is None:
            raise ClosedError("the engine is not open")
        return self._subscriptions

    # -- background ----------------------------------------------------------------

    async def _maintain(self) -> None:
        """Detach silent HTTP consumers; abort buffers' transactions below the watermark."""
        while True:
            await asyncio.sleep(_MAINTENANCE_INTERVAL)
            self.subscriptions.expire(time.monotonic(), self.config.consumer_expiry)
            batch = WriteBatch()
            low_watermark = self.coordinator.low_watermark()
            prepare_low_watermark_aborts(batch, list(self._topics.values()), low_watermark)
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
            topic_id = await Catalog(store).next_topic_id()
            created = now_ms()
            batch = WriteBatch()
            Catalog.prepare_create_topic(batch, topic_id, name, created)
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
            Catalog.prepare_delete_topic(batch, topic.topic_id)
            prepare_delete_topic(batch, topic.topic_id)
            SubscriptionRegistry.prepare_delete_topic(batch, topic.topic_id)
            self.coordinator.forget(batch, name)
            await self.store.write(batch)
            topic.deleted = True
            del self._topics[name]
            self._snapshots.pop(topic.topic_id, None)
            self._retention.pop(name, None)
            self.subscriptions.remove_topic(name)
            topic.notify()

    async def topic_stats(self, name: str) -> TopicStats:
        """``name``'s statistics as a typed value."""
        topic = self._topic(name)
        started = [r.created_ms for r in self.coordinator.open_records() if name in r.topics]
        return await topic_stats(
            topic,
            self.subscriptions.of_topic(name),
            self._snapshots.get(topic.topic_id),
            self._retention.get(name),
            min(started) if started else None,
        )

    async def stats(self, name: str) -> dict[str, Any]:
        """The HTTP stats body of a topic, as a dict."""
        return (await self.topic_stats(name)).as_dict()

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
        Catalog.prepare_retention(batch, owner.topic_id, policy.encode())
        await self.store.write(batch)
        self._retention[topic] = policy

    async def apply_retention(self, topic: str) -> int:
        """Trim ``topic`` by its retention policy now; returns the ledgers deleted."""
        return await self._apply_retention(self._topic(topic))

    async def _apply_retention(self, topic: Topic) -> int:
        policy = self._retention.get(topic.name)
        if policy is None:
            return 0
        upto = retention_cut(topic, policy, self.subscriptions.of_topic(topic.name))
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

    async def take_snapshot(self, topic: str) -> dict[str, Any]:
        """Snapshot ``topic``'s transaction buffer now; returns what it holds."""
        owner = self._topic(topic)
        state = self._snapshots[owner.topic_id]
        batch = WriteBatch()
        size = prepare_snapshot(batch, owner, state)
        await self.store.write(batch)
        buffer = owner.buffer
        lac, stable = buffer.last_confirmed, buffer.max_read_position
        return {
            "topic": topic,
            "position": None if lac is None else str(lac),
            "stable_position": None if stable is None else str(stable),
            "open_txns": {str(t): str(o.first) for t, o in buffer.ongoing_txns.items()},
            "aborted_txns": len(buffer.aborted_txns),
            "segments": len(state.segments),
            "bytes_written": size,
            "snapshot_bytes": state.size,
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
        result = await self._append(topic, messages, txn, producer, sequence, wait=True)
        if isinstance(result, ProduceResult):
            return result
        positions, done = result
        assert done is not None  # wait=True always hands back the batch's future
        await done
        return ProduceResult(positions, False)

    async def send_in_txn(
        self, topic: str, messages: Sequence[OutgoingMessage], txn: TxnId
    ) -> list[Position]:
        """Append ``messages`` in open transaction ``txn`` (pipelined: its commit makes
        them durable)."""
        result = await self._append(topic, messages, txn, None, None, wait=False)
        assert not isinstance(result, ProduceResult)  # no producer: never a duplicate
        return result[0]

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
        messages = [OutgoingMessage(v, key) for v in _values(values)]
        return (await self.produce(topic, messages)).positions

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
    ) -> TransactionScope:
        """``async with engine.transaction() as txn``: commit on exit, abort on exception."""
        return TransactionScope(self, timeout, transactional_id, label)

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

    # -- subscriptions -------------------------------------------------------------

    def _subscription(self, topic: str, name: str) -> Subscription:
        self._topic(topic)
        return self.subscriptions.get(topic, name)

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
        async with self._admin_lock:
            return await self.subscriptions.create(
                self._topic(topic),
                name,
                type=type,
                initial_position=initial_position,
                isolation=isolation,
            )

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
        consumer = f"consumer-{next(self._consumer_ids)}"
        self._subscription(topic, name).attach(consumer, expires=False)
        return SubscriptionHandle(self, topic, name, consumer)

    def detach(self, topic: str, subscription: str, consumer: str) -> None:
        """Detach ``consumer``; its unacknowledged messages go to others."""
        if self._subscriptions is not None and (
            sub := self._subscriptions.find(topic, subscription)
        ):
            sub.detach(consumer)

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
        if isinstance(max, bool) or not isinstance(max, int) or not 1 <= max <= _MAX_RECEIVE:
            raise InvalidArgumentError(f"max must be an integer in 1..{_MAX_RECEIVE}")
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
        positions: PositionsArg,
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

    async def nack(self, topic: str, subscription: str, positions: PositionsArg) -> None:
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
            self.subscriptions.prepare_delete(batch, sub)
            self.coordinator.forget(batch, topic, subscription)
            await self.store.write(batch)
            self.subscriptions.remove(sub)

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
        return await fetch(self._topic(topic), start, max=max, isolation=isolation)


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
