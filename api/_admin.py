"""Topic administration: create, list, delete, statistics, retention, snapshots."""

from __future__ import annotations

import logging
from typing import Any

from txnstream.dispatcher import SubscriptionRegistry
from txnstream.ledger import (
    Catalog,
    InvalidArgumentError,
    ManagedLedger,
    NotFoundError,
    WriteBatch,
    now_ms,
    validate_name,
)
from txnstream.snapshots import (
    SnapshotState,
    has_unsealed_segments,
    prepare_delete_topic,
    prepare_snapshot,
    take_snapshot,
)
from txnstream.txn_buffer import Topic, TxnBuffer

from ._config import RetentionPolicy
from ._core import EngineCore
from ._maintenance import retention_cut
from ._stats import BlockingTxn, TopicStats, topic_stats

log = logging.getLogger("txnstream.engine")


class TopicAdmin(EngineCore):
    """The engine's topic administration (a part of :class:`~txnstream.api.Engine`)."""

    async def create_topic(self, name: str) -> bool:
        """Create ``name`` if it does not exist; True if it was created (idempotent)."""
        self._check_open()
        validate_name(name)
        async with self._admin_lock:
            self._check_open()
            if name in self._topics:
                return False
            store = self.store
            store.check_space()
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
                remote=self._remote,
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
        """Delete a topic with its data, subscriptions, buffer state and snapshots
        (its offloaded objects too)."""
        async with self._admin_lock, self._tier_lock:
            topic = self._topic(name)
            urls = [info.url for info in topic.ledger.offloaded if info.url is not None]
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
            self._offload.pop(name, None)
            self._ttl.pop(name, None)
            self.subscriptions.remove_topic(name)
            topic.notify()
            # after the commit: a failure here only leaves orphans (logged), never data
            # that a ledger row still points to
            await self._delete_objects(urls, name)

    async def topic_stats(self, name: str) -> TopicStats:
        """``name``'s statistics as a typed value."""
        topic = self._topic(name)
        started = [r.created_ms for r in self.coordinator.open_records() if name in r.topics]
        blocking = None
        oldest = topic.buffer.oldest_open()
        if oldest is not None:
            try:
                record = self.coordinator.get(oldest)
                blocking = BlockingTxn(str(oldest), record.created_ms, record.deadline_ms)
            except NotFoundError:  # recovered from the log alone: its end is on the way
                blocking = BlockingTxn(str(oldest), None, None)
        return await topic_stats(
            topic,
            self.subscriptions.of_topic(name),
            self._snapshots.get(topic.topic_id),
            self._retention.get(name, self.config.default_retention),
            min(started) if started else None,
            blocking,
            self._offload.get(name),
            self._ttl.get(name),
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
        """Set ``topic``'s retention policy (None for both keeps everything, whatever
        ``EngineConfig.default_retention`` says)."""
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
        async with self._tier_lock:
            return await self._apply_retention_locked(topic)

    async def _apply_retention_locked(self, topic: Topic) -> int:
        policy = self._retention.get(topic.name, self.config.default_retention)
        if policy is None or topic.deleted:
            return 0
        state = self._snapshots.get(topic.topic_id)
        if state is not None and has_unsealed_segments(topic, state):
            # The snapshot that goes with the trim below is prepared in one step: seal
            # whole segments first, in slices (before the first snapshot after a full
            # replay, that is every aborted transaction of the topic).
            sealing = WriteBatch()
            await take_snapshot(sealing, topic, state)
            await self.store.write(sealing)
            if topic.deleted:
                return 0
        upto = retention_cut(topic, policy, self.subscriptions.of_topic(topic.name))
        if upto is None:
            return 0
        urls = [
            info.url
            for info in topic.ledger.offloaded
            if info.ledger_id <= upto and info.url is not None
        ]
        batch = WriteBatch()
        removed = topic.ledger.prepare_trim(batch, upto)
        topic.buffer.prune_aborted_before(topic.ledger.retained_start())
        if state is not None:
            prepare_snapshot(batch, topic, state)  # drops segments of deleted ledgers
        await self.store.write(batch)
        log.info("topic %s: retention deleted %d ledger(s)", topic.name, removed)
        await self._delete_objects(urls)  # remote ledgers go with their objects
        return removed

    async def take_snapshot(self, topic: str) -> dict[str, Any]:
        """Snapshot ``topic``'s transaction buffer now; returns what it holds."""
        owner = self._topic(topic)
        state = self._snapshots[owner.topic_id]
        batch = WriteBatch()
        size = await take_snapshot(batch, owner, state)
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
