"""Offsets: every entry of a topic as a contiguous int64 offset from 0 (Kafka's view).

Every entry takes one offset in order, markers included; a ledger's row keeps the offset
of its entry 0 (``base_offset``), so the mapping survives restarts, retention (the log
start offset moves up) and offload. ``L:E`` positions stay the engine's own addresses;
these calls translate between the two, and give what a Kafka listener needs besides:
the producer sequence check and a way to wait for a topic's next change.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from txnstream.ledger import Position

from ._core import EngineCore


@dataclass(frozen=True, slots=True)
class TopicOffsets:
    """A topic's offsets: where the retained log starts, the high watermark (past the
    last durable entry) and the last stable offset (past the stable position: the first
    offset read_committed cannot read yet). ``log_start <= last_stable <= high_watermark``.
    """

    log_start: int
    high_watermark: int
    last_stable: int


class Offsets(EngineCore):
    """The engine's offset calls (a part of :class:`~txnstream.api.Engine`)."""

    def offsets(self, topic: str) -> TopicOffsets:
        """The topic's log start offset, high watermark and last stable offset."""
        topic_ = self._topic(topic)
        ledger, buffer = topic_.ledger, topic_.buffer
        start = ledger.start_offset()
        lac, stable = buffer.last_confirmed, buffer.max_read_position
        high = start if lac is None else max(start, ledger.offset_of(_after(lac)))
        last_stable = start if stable is None else max(start, ledger.offset_of(_after(stable)))
        return TopicOffsets(start, high, min(last_stable, high))

    def offset_of(self, topic: str, position: Position) -> int:
        """The offset of the entry at ``position`` in ``topic``."""
        return self._topic(topic).ledger.offset_of(position)

    def position_at(self, topic: str, offset: int) -> Position | None:
        """The position of the entry with ``offset`` (None if no retained or assigned
        entry has it: before the log start, or at or past the end)."""
        return self._topic(topic).ledger.position_at(offset)

    def watch(self, topic: str) -> asyncio.Event:
        """An event set at the topic's next change (a durable append or marker, a
        subscription's news, the engine closing): take it before reading, then wait on it
        when the read found nothing, and no change falls in between."""
        return self._topic(topic).change_event()

    def last_sequence(self, topic: str, producer: str) -> int | None:
        """The last sequence number the idempotent ``producer`` stored in ``topic`` (None
        if it stored nothing there): what a producer's next batch must follow."""
        state = self._topic(topic).producers.get(producer)
        return None if state is None else state.last_seq


def _after(position: Position) -> Position:
    """The position right after ``position`` in its ledger (its offset is one more)."""
    return Position(position.ledger_id, position.entry_id + 1)
