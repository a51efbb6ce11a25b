"""Topic administration: create, list, delete, statistics, retention, snapshots."""

from __future__ import annotations

import logging
import re
from typing import Any

from txnstream.dispatcher import SubscriptionRegistry
from txnstream.ledger import (
    Catalog,
    ConflictError,
    InvalidArgumentError,
    ManagedLedger,
    NotFoundError,
    PartitionedRow,
    Store,
    WriteBatch,
    now_ms,
    partition_name,
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
from ._core import Core, EngineState
from ._maintenance import retention_cut
from ._offsets import topic_offsets
from ._partitions import MAX_PARTITIONS
from ._stats import BlockingTxn, TopicStats, iso_ms, topic_stats

_PARTITION_RE = re.compile(r"^(.+)-partition-(\d{1,9})$")
_SUMMED = (
    "open_txns",
    "aborted_txns",
    "ledgers",
    "entries",
    "bytes",
    "offloaded_ledgers",
    "offloaded_bytes",
)
"""Counts a partitioned topic's stats sum over its partitions."""
_SUMMED_PER_SUBSCRIPTION = ("backlog", "unacked", "redeliveries")

log = logging.getLogger("txnstream.engine")


class TopicAdmin:
    """The engine's topic administration (a part of :class:`~txnstream.api.Engine`):
    topics, their statistics, retention and snapshots."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._config = core.config

    async def create_topic(self, name: str, *, partitions: int | None = None) -> bool:
        """Create ``name`` if it does not exist; True if it was created (idempotent).

        With ``partitions=N`` (1..1024) a partitioned topic: N topics named
        ``{name}-partition-{i}``, created with it in one step (see
        :mod:`txnstream.api._partitions`). :class:`ConflictError` if ``name`` exists with
        another partition count, or partitioned vs not.
        """
        self._core.check_open()
        validate_name(name)
        if partitions is not None and (
            isinstance(partitions, bool)
            or not isinstance(partitions, int)
            or not 1 <= partitions <= MAX_PARTITIONS
        ):
            raise InvalidArgumentError(f"partitions must be an integer in 1..{MAX_PARTITIONS}")
        names = (
            [name] if partitions is None else [partition_name(name, i) for i in range(partitions)]
        )
        for part in names:
            validate_name(part)  # (a partition's name is longer than its topic's)
        async with self._core.admin_lock:
            self._core.check_open()
            rt = self._core.rt  # this term's: a recovery meanwhile does not get the topic twice
            existing = rt.partitioned.get(name)
            if existing is not None:
                if existing.partitions == partitions:
                    return False
                raise ConflictError(f"topic {name!r} exists with {existing.partitions} partitions")
            if name in rt.topics:
                if partitions is None:
                    return False
                raise ConflictError(f"topic {name!r} exists and is not partitioned")
            taken = [part for part in names if part in rt.topics]
            if taken:
                raise ConflictError(f"topic {taken[0]!r} exists")
            store = rt.store
            store.check_space()
            first_id = await Catalog(store).next_topic_id()
            created = now_ms()
            batch = WriteBatch()
            if partitions is not None:
                Catalog.prepare_create_partitioned(batch, name, partitions, created)
            made = [
                self._prepare_topic(store, batch, first_id + i, part, created)
                for i, part in enumerate(names)
            ]
            await store.write(batch)
            for topic in made:
                rt.topics[topic.name] = topic
                rt.snapshots[topic.topic_id] = SnapshotState()
            if partitions is not None:
                rt.partitioned[name] = PartitionedRow(name, partitions, created)
            return True

    def _prepare_topic(
        self, store: Store, batch: WriteBatch, topic_id: int, name: str, created: int
    ) -> Topic:
        """Prepare a topic's row and first ledger; the topic, to register once written."""
        Catalog.prepare_create_topic(batch, topic_id, name, created)
        ledger = ManagedLedger.create(
            store,
            batch,
            topic_id,
            max_entries=self._config.ledger_max_entries,
            max_bytes=self._config.ledger_max_bytes,
            remote=self._core.remote,
        )
        return Topic(name, topic_id, ledger, TxnBuffer(), {}, created)

    async def list_topics(self) -> list[str]:
        """Names of every topic, sorted (the partitions of partitioned topics included;
        the partitioned topics themselves are :meth:`partitioned_topics`)."""
        self._core.check_open()
        return sorted(self._core.rt.topics)

    async def partitioned_topics(self) -> dict[str, int]:
        """Every partitioned topic with its partition count, by name."""
        self._core.check_open()
        return {name: row.partitions for name, row in sorted(self._core.rt.partitioned.items())}

    def parent_of(self, name: str) -> tuple[str, int] | None:
        """``(partitioned topic, index)`` if topic ``name`` is one of its partitions."""
        match = _PARTITION_RE.match(name)
        if match is None:
            return None
        parent, index = match.group(1), int(match.group(2))
        runtime = self._core.runtime
        row = None if runtime is None else runtime.partitioned.get(parent)
        if row is None or index >= row.partitions or partition_name(parent, index) != name:
            return None
        return parent, index

    async def delete_topic(self, name: str) -> None:
        """Delete a topic with its data, subscriptions, buffer state and snapshots
        (its offloaded objects too); a partitioned topic with all its partitions."""
        async with self._core.admin_lock, self._core.tier_lock:
            self._core.check_open()
            rt = self._core.rt  # this term's, as its store is what the deletion is written to
            row = rt.partitioned.get(name)
            if row is None:
                parent = self.parent_of(name)
                if parent is not None:
                    raise ConflictError(
                        f"topic {name!r} is a partition of {parent[0]!r}: delete that topic"
                    )
                topics = [self._core.topic(name)]
            else:
                topics = [self._core.topic(partition_name(name, i)) for i in range(row.partitions)]
            urls = []
            batch = WriteBatch()
            if row is not None:
                Catalog.prepare_delete_partitioned(batch, name)
            for topic in topics:
                urls.append([i.url for i in topic.ledger.offloaded if i.url is not None])
                Catalog.prepare_delete_topic(batch, topic.topic_id)
                prepare_delete_topic(batch, topic.topic_id)
                SubscriptionRegistry.prepare_delete_topic(batch, topic.topic_id)
                rt.coordinator.forget(batch, topic.name)
            await rt.store.write(batch)
            rt.partitioned.pop(name, None)
            rt.next_partition.pop(name, None)
            for topic in topics:
                topic.deleted = True
                del rt.topics[topic.name]
                rt.snapshots.pop(topic.topic_id, None)
                rt.retention.pop(topic.name, None)
                rt.offload.pop(topic.name, None)
                rt.ttl.pop(topic.name, None)
                rt.subscriptions.remove_topic(topic.name)
                topic.notify()
            # after the commit: a failure here only leaves orphans (logged), never data
            # that a ledger row still points to
            for topic, topic_urls in zip(topics, urls, strict=True):
                await self._core.delete_objects(topic_urls, topic.name)

    async def topic_stats(self, name: str) -> TopicStats:
        """``name``'s statistics as a typed value."""
        topic = self._core.topic(name)
        started = [
            r.created_ms for r in self._core.rt.coordinator.open_records() if name in r.topics
        ]
        blocking = None
        oldest = topic.buffer.oldest_open()
        if oldest is not None:
            try:
                record = self._core.rt.coordinator.get(oldest)
                blocking = BlockingTxn(str(oldest), record.created_ms, record.deadline_ms)
            except NotFoundError:  # recovered from the log alone: its end is on the way
                blocking = BlockingTxn(str(oldest), None, None)
        return await topic_stats(
            topic,
            self._core.rt.subscriptions.of_topic(name),
            self._core.rt.snapshots.get(topic.topic_id),
            self._core.rt.retention.get(name, self._config.default_retention),
            min(started) if started else None,
            blocking,
            self._core.rt.offload.get(name),
            topic_offsets(topic),
            self._core.rt.ttl.get(name),
        )

    async def stats(self, name: str) -> dict[str, Any]:
        """The HTTP stats body of a topic, as a dict. A partitioned topic's lists its
        partitions' bodies under ``partitions`` (with the sums of their counts)."""
        row = self._core.rt.partitioned.get(name) if self._core.state is EngineState.OPEN else None
        if row is None:
            body = (await self.topic_stats(name)).as_dict()
            parent = self.parent_of(name)
            if parent is not None:
                body["partition_of"] = {"topic": parent[0], "index": parent[1]}
            return body
        parts = [
            (await self.topic_stats(partition_name(name, i))).as_dict()
            for i in range(row.partitions)
        ]
        subscriptions: dict[str, dict[str, Any]] = {}
        for part in parts:
            for sub_name, sub in part["subscriptions"].items():
                zero = dict.fromkeys(_SUMMED_PER_SUBSCRIPTION, 0)
                merged = subscriptions.setdefault(
                    sub_name, {**sub, **zero, "mark_delete": None, "consumers": []}
                )
                merged["consumers"] = sorted({*merged["consumers"], *sub["consumers"]})
                for key in _SUMMED_PER_SUBSCRIPTION:
                    merged[key] += sub.get(key, 0)
        return {
            "topic": name,
            "partitioned": True,
            "partition_count": row.partitions,
            "created_at": iso_ms(row.created_ms),
            "last_confirmed": None,  # each partition has its own positions and offsets
            "stable_position": None,
            "offsets": None,
            **{key: sum(p[key] for p in parts) for key in _SUMMED},
            "snapshot": None,
            "blocking_txn": None,
            "subscriptions": subscriptions,
            "partitions": parts,
        }

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
        owner = self._core.topic(topic)
        try:
            policy = RetentionPolicy(max_age, max_bytes, require_ack)
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(str(exc)) from None
        rt = self._core.rt
        batch = WriteBatch()
        Catalog.prepare_retention(batch, owner.topic_id, policy.encode())
        await rt.store.write(batch)
        rt.retention[topic] = policy

    async def apply_retention(self, topic: str) -> int:
        """Trim ``topic`` by its retention policy now; returns the ledgers deleted."""
        return await self.apply_retention_to(self._core.topic(topic))

    async def apply_retention_to(self, topic: Topic) -> int:
        """Trim ``topic`` by its retention policy (or the default) now."""
        async with self._core.tier_lock:
            return await self._apply_retention_locked(topic)

    async def _apply_retention_locked(self, topic: Topic) -> int:
        rt = self._core.rt
        policy = rt.retention.get(topic.name, self._config.default_retention)
        if policy is None or topic.deleted:
            return 0
        state = rt.snapshots.get(topic.topic_id)
        if state is not None and has_unsealed_segments(topic, state):
            # The snapshot that goes with the trim below is prepared in one step: seal
            # whole segments first, in slices (before the first snapshot after a full
            # replay, that is every aborted transaction of the topic).
            sealing = WriteBatch()
            await take_snapshot(sealing, topic, state)
            await rt.store.write(sealing)
            if topic.deleted:
                return 0
        upto = retention_cut(topic, policy, rt.subscriptions.of_topic(topic.name))
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
        await rt.store.write(batch)
        log.info("topic %s: retention deleted %d ledger(s)", topic.name, removed)
        await self._core.delete_objects(urls)  # remote ledgers go with their objects
        return removed

    async def take_snapshot(self, topic: str) -> dict[str, Any]:
        """Snapshot ``topic``'s transaction buffer now; returns what it holds."""
        owner = self._core.topic(topic)
        state = self._core.rt.snapshots[owner.topic_id]
        batch = WriteBatch()
        size = await take_snapshot(batch, owner, state)
        await self._core.rt.store.write(batch)
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
