"""Background upkeep the engine schedules: retention and low-watermark aborts.

Both only *prepare* writes into a :class:`~txnstream.ledger.WriteBatch`; the engine's loops submit
them, so in-memory state changes ride the batch's durable callbacks as everywhere else.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable

from txnstream.dispatcher import Subscription
from txnstream.ledger import EntryKind, Position, WriteBatch, now_ms
from txnstream.txn_buffer import Topic

from ._config import RetentionPolicy

log = logging.getLogger("txnstream.engine")


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
