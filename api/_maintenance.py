"""Background upkeep: snapshots, retention, low-watermark aborts, consumer and
producer expiry.

:class:`Maintenance` runs the loops (the lifecycle starts them with each term and stops
them before it ends); the functions below only *prepare* writes into a
:class:`~txnstream.ledger.WriteBatch`, which the loops submit, so in-memory state changes
ride the batch's durable callbacks as everywhere else.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from txnstream.dispatcher import Subscription
from txnstream.ledger import EntryKind, Position, WriteBatch, now_ms
from txnstream.snapshots import is_due, take_snapshot
from txnstream.txn_buffer import Topic

from ._config import RetentionPolicy

if TYPE_CHECKING:
    from ._admin import TopicAdmin
    from ._core import Core

log = logging.getLogger("txnstream.engine")

_MAINTENANCE_INTERVAL = 1.0
_PRODUCER_EXPIRY_CHECK = 60.0  # seconds between looks for expired producers, at most


class Maintenance:
    """The engine's periodic upkeep (a part of :class:`~txnstream.api.Engine`); retention
    is applied through the topic administration, which owns it."""

    def __init__(self, core: Core, admin: TopicAdmin) -> None:
        self._core = core
        self._config = core.config
        self._admin = admin

    async def maintain(self) -> None:
        """Detach silent HTTP consumers; abort buffers' transactions below the watermark;
        forget expired idempotent producers."""
        rt = self._core.rt  # a background task serves one term (they stop before it ends)
        next_expiry = 0.0
        while True:
            await asyncio.sleep(_MAINTENANCE_INTERVAL)
            batch = WriteBatch()
            # expired deliveries count toward redelivery limits, which outlive restarts
            rt.subscriptions.expire(time.monotonic(), self._config.consumer_expiry, batch)
            low_watermark = rt.coordinator.low_watermark()
            prepare_low_watermark_aborts(batch, list(rt.topics.values()), low_watermark)
            expiry = self._config.producer_expiry
            if time.monotonic() >= next_expiry:  # (a look at every producer: not every pass)
                next_expiry = time.monotonic() + min(expiry / 10, _PRODUCER_EXPIRY_CHECK)
                prepare_producer_expiry(batch, list(rt.topics.values()), expiry)
            if batch:
                await rt.store.write(batch)

    async def snapshot_loop(self) -> None:
        """Take snapshots as the policy asks; apply retention."""
        rt = self._core.rt
        config = self._config
        every, interval = config.snapshot_every, config.snapshot_interval
        tick = min(0.5, interval / 2)
        next_retention = 0.0
        while True:
            await asyncio.sleep(tick)
            batch = WriteBatch()
            for topic in list(rt.topics.values()):
                state = rt.snapshots.get(topic.topic_id)
                if state is not None and is_due(state, topic, every=every, interval=interval):
                    await take_snapshot(batch, topic, state)  # seals in slices
            if batch:
                await rt.store.write(batch)
            if time.monotonic() >= next_retention:
                next_retention = time.monotonic() + config.retention_check_interval
                every_topic = config.default_retention is not None
                for name in list(rt.topics if every_topic else rt.retention):
                    if name in rt.topics:
                        await self._admin.apply_retention_to(rt.topics[name])


def prepare_low_watermark_aborts(
    batch: WriteBatch, topics: Iterable[Topic], low_watermark: int
) -> None:
    """ABORT markers for transactions a buffer still holds open below the watermark.

    Such a transaction ended at the coordinator without a marker reaching this topic
    (its data here was never part of a decision), so the buffer must not wait for it.
    """
    for topic in topics:
        for txn_id in topic.buffer.open_below(low_watermark):
            if not topic.has_prepared_data(txn_id):
                continue  # its marker is already on the way
            log.warning("topic %s: aborting %s below the low watermark", topic.name, txn_id)
            topic.prepare_marker(batch, EntryKind.ABORT, txn_id)


def prepare_producer_expiry(batch: WriteBatch, topics: Iterable[Topic], expiry: float) -> int:
    """Forget the idempotent producers whose last batch on a topic is older than
    ``expiry`` seconds (Kafka's ``producer.id.expiration.ms``); returns how many."""
    before = now_ms() - int(expiry * 1000)
    expired = sum(topic.expire_producers(batch, before) for topic in topics)
    if expired:
        log.info("forgot %d idempotent producer(s) idle for %ss", expired, expiry)
    return expired


def retention_cut(
    topic: Topic, policy: RetentionPolicy, subscriptions: Iterable[Subscription]
) -> int | None:
    """The newest ledger id that ``policy`` deletes now, or None.

    Only whole sealed ledgers go, never one with an entry above the stable position,
    and with ``require_ack`` never one with an entry a subscription has not acknowledged.
    Age is judged by the *following* ledger's creation (when this one stopped growing).
    """
    stable = topic.buffer.max_read_position
    if stable is None:
        return None
    acked: Position | None = stable
    if policy.require_ack:
        for sub in subscriptions:
            md = sub.cursor.mark_delete
            if md is None:
                return None
            acked = md if acked is None or md < acked else acked
    ledgers = topic.ledger.ledgers
    now = now_ms()
    total = sum(info.bytes for info in ledgers)
    upto: int | None = None
    for info, following in itertools.pairwise(ledgers):
        if not info.sealed:
            break
        last = Position(info.ledger_id, info.entries - 1) if info.entries else None
        if last is not None and (acked is None or last > acked or last > stable):
            break
        too_old = policy.max_age is not None and following.created_ms < now - policy.max_age * 1000
        too_big = policy.max_bytes is not None and total > policy.max_bytes
        if not (too_old or too_big):
            break
        total -= info.bytes
        upto = info.ledger_id
    return upto
