"""Offsets: every entry of a topic as a contiguous int64 offset from 0 (Kafka's view).

Every entry takes one offset in order, markers included; a ledger's row keeps the offset
of its entry 0 (``base_offset``), so the mapping survives restarts, retention (the log
start offset moves up) and offload. ``L:E`` positions stay the engine's own addresses;
these calls translate between the two, and give what a Kafka listener needs besides:
the producer sequence check and a way to wait for a topic's next change.
"""

from __future__ import annotations

import asyncio

from txnstream.ledger import InvalidArgumentError, Position, TxnId
from txnstream.txn_buffer import Topic

from ._core import Core
from ._partitions import PartitionedConsuming
from ._stats import TopicOffsets

__all__ = ["Offsets", "TopicOffsets", "topic_offsets"]


def topic_offsets(topic: Topic) -> TopicOffsets:
    """``topic``'s log start offset, high watermark and last stable offset."""
    ledger, buffer = topic.ledger, topic.buffer
    start = ledger.start_offset()
    lac, stable = buffer.last_confirmed, buffer.max_read_position
    high = start if lac is None else max(start, ledger.offset_of(_after(lac)))
    last_stable = start if stable is None else max(start, ledger.offset_of(_after(stable)))
    return TopicOffsets(start, high, min(last_stable, high))


class Offsets:
    """The engine's offset calls (a part of :class:`~txnstream.api.Engine`); an offset
    commit acknowledges or seeks through the consuming part."""

    def __init__(self, core: Core, consuming: PartitionedConsuming) -> None:
        self._core = core
        self._consuming = consuming

    def offsets(self, topic: str) -> TopicOffsets:
        """The topic's log start offset, high watermark and last stable offset."""
        return topic_offsets(self._core.topic(topic))

    def offset_of(self, topic: str, position: Position) -> int:
        """The offset of the entry at ``position`` in ``topic``."""
        return self._core.topic(topic).ledger.offset_of(position)

    def position_at(self, topic: str, offset: int) -> Position | None:
        """The position of the entry with ``offset`` (None if no retained or assigned
        entry has it: before the log start, or at or past the end)."""
        return self._core.topic(topic).ledger.position_at(offset)

    def committed_offset(self, topic: str, subscription: str) -> int | None:
        """The subscription's committed offset: the offset after its mark-delete position
        (everything before it acknowledged). None if there is no such subscription."""
        topic_ = self._core.topic(topic)
        sub = self._core.rt.subscriptions.find(topic, subscription)
        if sub is None:
            return None
        ledger = topic_.ledger
        start = ledger.start_offset()
        mark_delete = sub.cursor.mark_delete
        return start if mark_delete is None else max(start, ledger.offset_of(_after(mark_delete)))

    async def commit_offset(
        self, topic: str, subscription: str, offset: int, *, txn: TxnId | str | None = None
    ) -> None:
        """Acknowledge everything before ``offset`` on ``subscription`` (made if missing:
        exclusive, read_committed, from the earliest entry), as a Kafka offset commit.

        Without ``txn`` the cursor moves to ``offset``, back or forth (a seek); with it,
        everything before ``offset`` is acknowledged when ``txn`` commits (a transactional
        cumulative ack; it only moves forward).
        """
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise InvalidArgumentError("an offset must be a non-negative integer")
        ledger = self._core.topic(topic).ledger
        if self._core.rt.subscriptions.find(topic, subscription) is None:
            await self._consuming.create_subscription(topic, subscription)
        if txn is not None:
            last = ledger.position_at(offset - 1) if offset > ledger.start_offset() else None
            if last is not None:
                await self._consuming.ack(topic, subscription, [last], cumulative=True, txn=txn)
            return
        position = ledger.position_at(offset)
        if position is None:
            target: Position | str = "earliest" if offset <= ledger.start_offset() else "latest"
        else:
            target = position
        await self._consuming.seek(topic, subscription, target)

    def watch(self, topic: str) -> asyncio.Event:
        """An event set at the topic's next change (a durable append or marker, a
        subscription's news, the engine closing): take it before reading, then wait on it
        when the read found nothing, and no change falls in between."""
        return self._core.topic(topic).change_event()

    def last_sequence(self, topic: str, producer: str) -> int | None:
        """The last sequence number the idempotent ``producer`` stored in ``topic`` (None
        if it stored nothing there): what a producer's next batch must follow."""
        state = self._core.topic(topic).producers.get(producer)
        return None if state is None else state.last_seq


def _after(position: Position) -> Position:
    """The position right after ``position`` in its ledger (its offset is one more)."""
    return Position(position.ledger_id, position.entry_id + 1)
