"""Recovery on open: load every topic, then reconcile buffers with the coordinator.

:func:`load_runtime` does it all and returns the term's
:class:`~txnstream.api._runtime.Runtime`, which the engine swaps in at once (on open,
in-place recovery and failover alike). Order (nothing is dispatched or accepted before
all of it is done):

1. :func:`load_topics` reopens each topic's ledgers (a new ledger starts), rebuilds its
   transaction buffer from the newest valid snapshot plus the tail (or a full replay),
   and loads its idempotent-producer state and retention policy — topics in parallel.
2. The coordinator loads its transactions; the registry loads subscriptions.
3. :func:`reconcile`: a buffer that holds a transaction open which the coordinator does
   not hold open gets the marker of its decision (COMMIT if committed, else ABORT) —
   Pulsar's and Kafka's "redo" of a decided-but-unmarked transaction. Open transactions
   re-register their topics, and their transactional acks are held again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from txnstream.dispatcher import SubscriptionRegistry
from txnstream.ledger import (
    Catalog,
    EngineError,
    EntryKind,
    ManagedLedger,
    OffloadStore,
    Store,
    WriteBatch,
    now_ms,
)
from txnstream.snapshots import SnapshotState, recover_topic
from txnstream.txn_buffer import Coordinator, ProducerState, Topic, TxnRecord, TxnState

from ._config import EngineConfig, OffloadPolicy, RetentionPolicy
from ._runtime import Runtime

log = logging.getLogger("txnstream.engine")

_LOADERS = 8


@dataclass(slots=True)
class LoadedTopics:
    """What :func:`load_topics` rebuilt: topics by name, snapshot state, retention and
    offload policies."""

    topics: dict[str, Topic] = field(default_factory=dict)
    snapshots: dict[int, SnapshotState] = field(default_factory=dict)
    retention: dict[str, RetentionPolicy] = field(default_factory=dict)
    offload: dict[str, OffloadPolicy] = field(default_factory=dict)


async def load_topics(
    store: Store, config: EngineConfig, remote: OffloadStore | None = None
) -> LoadedTopics:
    """Reopen and recover every topic of ``store`` (several at a time); ``remote`` reads
    the topics' offloaded ledgers."""
    catalog = Catalog(store)
    loaded = LoadedTopics()

    async def load(
        topic_id: int,
        name: str,
        created_ms: int,
        retention: bytes | None,
        offload: bytes | None,
    ) -> None:
        ledger = await ManagedLedger.open(
            store,
            topic_id,
            max_entries=config.ledger_max_entries,
            max_bytes=config.ledger_max_bytes,
            remote=remote,
            wait=False,  # one flush for every topic's new ledger, below
        )
        buffer, state = await recover_topic(ledger)
        opened_ms = now_ms()  # (rows from before producers expired: their time starts now)
        producers = {
            row.producer: ProducerState(
                row.last_seq,
                row.first_seq,
                row.positions,
                opened_ms if row.stored_ms is None else row.stored_ms,
            )
            for row in await catalog.producers(topic_id)
        }
        loaded.snapshots[topic_id] = state
        if retention is not None:
            loaded.retention[name] = RetentionPolicy.decode(retention)
        if offload is not None:
            loaded.offload[name] = OffloadPolicy.decode(offload)
        loaded.topics[name] = Topic(name, topic_id, ledger, buffer, producers, created_ms)

    rows = iter(await catalog.topics())

    async def loader() -> None:
        for row in rows:  # shared: each topic is taken by one loader
            await load(row.topic_id, row.name, row.created_ms, row.retention, row.offload)

    # Every topic's ledgers, snapshots and producers in a few reads rather than a few per
    # topic, where a read is a round trip (PostgreSQL: the failover path loads them all).
    await store.prefetch_recovery()
    try:
        # A few loaders, not a task per topic: ten thousand tasks would all take their
        # first step in one loop iteration, and the reads share two connections anyway.
        async with asyncio.TaskGroup() as group:
            for _ in range(_LOADERS):
                group.create_task(loader())
    finally:
        await store.end_recovery()
    await store.flush()  # every topic's sealed and new ledgers, durable before serving
    # TaskGroup finishes in any order; keep topics in id order as before
    loaded.topics = dict(sorted(loaded.topics.items(), key=lambda kv: kv[1].topic_id))
    return loaded


async def load_runtime(
    store: Store,
    config: EngineConfig,
    remote: OffloadStore,
    *,
    on_txn_ended: Callable[[TxnRecord, bool], None],
    on_dead_letter: Callable[[], None],
) -> Runtime:
    """Rebuild one term's state from the open ``store`` (in the order above) and make
    the redone markers durable: what is returned is ready to serve. ``remote`` reads the
    offloaded ledgers; the callbacks go to the coordinator (a transaction ended) and the
    subscriptions (messages to move to a dead-letter topic)."""
    subscriptions = SubscriptionRegistry(store)
    subscriptions.on_dead_letter = on_dead_letter
    topics: dict[str, Topic] = {}  # filled below, the coordinator's decisions resolve in it
    coordinator = Coordinator(
        store,
        topics.get,
        default_timeout=config.default_txn_timeout,
        max_timeout=config.max_txn_timeout,
        ended_retention=config.ended_txn_retention,
    )
    coordinator.ack_participant = subscriptions
    coordinator.on_ended = on_txn_ended
    # Topics and transactions load side by side: each is reads on its own reader
    # connection (SQLite works with the GIL released) plus decoding on the loop.
    async with asyncio.TaskGroup() as group:
        loading = group.create_task(load_topics(store, config, remote))
        group.create_task(coordinator.load())
    loaded = loading.result()
    topics.update(loaded.topics)
    partitioned = {row.name: row for row in await Catalog(store).partitioned()}
    by_id = {t.topic_id: t for t in topics.values()}
    await subscriptions.load(by_id)
    ttl = {
        by_id[topic_id].name: ttl_ms
        for topic_id, ttl_ms in await store.topic_ttl_rows()
        if topic_id in by_id
    }
    await store.write(reconcile(topics, coordinator, subscriptions))
    return Runtime(
        store=store,
        coordinator=coordinator,
        subscriptions=subscriptions,
        topics=topics,
        partitioned=partitioned,
        snapshots=loaded.snapshots,
        retention=loaded.retention,
        offload=loaded.offload,
        ttl=ttl,
    )


def reconcile(
    topics: dict[str, Topic], coordinator: Coordinator, subscriptions: SubscriptionRegistry
) -> WriteBatch:
    """Redo decided-but-unmarked transactions; returns the batch to write."""
    batch = WriteBatch()
    for topic in topics.values():
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
            topic.prepare_marker(batch, EntryKind.COMMIT if committed else EntryKind.ABORT, txn_id)
    subscriptions.hold_open_acks(coordinator.open_records())
    return batch
