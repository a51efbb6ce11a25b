"""Taking snapshots: when (policy), what (sealed segments + tail + index), and bookkeeping.

Policy (cf. Pulsar's snapshot change counter): a topic is snapshotted after
``every`` markers applied since its last snapshot, or ``interval`` seconds after it when
anything was appended since; an idle topic writes nothing. A snapshot row is written in a
batch after every entry it covers is durable, so it never describes a non-durable entry.
The two newest snapshots are kept so a damaged one falls back to the previous.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from txnstream.ledger import ManagedLedger, Position, WriteBatch, now_ms
from txnstream.txn_buffer import AbortedRow, Topic, TxnBuffer

from ._model import (
    FORMAT_VERSION,
    SEGMENT_SIZE,
    SegmentRef,
    TxnBufferSnapshot,
    seal,
)
from ._replay import RecoveryInfo, recover

_KEEP = 2


@dataclass(slots=True)
class SnapshotState:
    """Per-topic snapshot bookkeeping."""

    next_snapshot_id: int = 0
    next_segment_id: int = 0
    segments: list[SegmentRef] = field(default_factory=list)
    position: Position | None = None
    taken_ms: int | None = None
    size: int = 0
    markers_at_snapshot: int = 0
    taken_monotonic: float = field(default_factory=time.monotonic)
    purge_segments_below: int | None = None
    recovery: RecoveryInfo | None = None
    has_snapshot: bool = False

    @property
    def sealed_upto(self) -> Position | None:
        """The ABORT marker of the newest sealed aborted transaction."""
        return self.segments[-1].last_marker if self.segments else None


def is_due(state: SnapshotState, topic: Topic, *, every: int, interval: float) -> bool:
    """Whether the policy asks for a snapshot of ``topic`` now."""
    if topic.buffer.last_confirmed == state.position:
        return False  # nothing appended since: an idle topic writes none
    if topic.markers_applied - state.markers_at_snapshot >= every:
        return True
    return time.monotonic() - state.taken_monotonic >= interval


def has_unsealed_segments(topic: Topic, state: SnapshotState) -> bool:
    """Whether ``topic`` has a whole segment's worth of aborted transactions not sealed
    yet: :func:`prepare_snapshot` would seal them in one step (after a full replay, every
    aborted transaction of the topic), :func:`take_snapshot` in slices."""
    aborted = topic.buffer.aborted
    return len(aborted) - aborted.rank_after(state.sealed_upto) >= SEGMENT_SIZE


def prepare_snapshot(batch: WriteBatch, topic: Topic, state: SnapshotState) -> int:
    """Add a snapshot of ``topic``'s buffer (and any newly sealed segments) to ``batch``.

    Returns the snapshot's size in bytes (new segments included).
    """
    buffer = topic.buffer
    first_retained = topic.ledger.retained_start()
    written = 0
    if state.purge_segments_below is not None:
        batch.drop_snapshot_segments_below(topic.topic_id, state.purge_segments_below)
        state.purge_segments_below = None
    expired = [s for s in state.segments if s.max_last < first_retained]
    if expired:
        state.segments = [s for s in state.segments if s.max_last >= first_retained]
        batch.drop_snapshot_segments(topic.topic_id, [s.segment_id for s in expired])
    unsealed = list(_unsealed(buffer, state.sealed_upto))
    whole = len(unsealed) - len(unsealed) % SEGMENT_SIZE
    written += _add_segments(batch, topic, state, _seal(iter(unsealed[:whole]), None))
    tail = unsealed[whole:]
    snapshot = TxnBufferSnapshot(
        FORMAT_VERSION,
        buffer.last_confirmed,
        buffer.max_read_position,
        buffer.ongoing_txns,
        list(state.segments),
        tail,
    )
    data = snapshot.encode()
    written += len(data)
    snapshot_id = state.next_snapshot_id
    state.next_snapshot_id += 1
    position = snapshot.position
    taken = now_ms()
    batch.put_snapshot(
        topic.topic_id,
        snapshot_id,
        -1 if position is None else position.ledger_id,
        -1 if position is None else position.entry_id,
        taken,
        data,
    )
    batch.drop_snapshots_upto(topic.topic_id, snapshot_id - _KEEP)
    markers = topic.markers_applied
    state.position = position  # claimed now so the policy does not ask twice

    def durable() -> None:
        state.taken_ms = taken
        state.size = len(data)
        state.markers_at_snapshot = markers
        state.taken_monotonic = time.monotonic()
        state.has_snapshot = True

    batch.on_durable(durable)
    return written


@dataclass(frozen=True, slots=True)
class _Sealed:
    """A segment's bytes and summary, before it has an id."""

    data: bytes
    count: int
    last_marker: Position
    max_last: Position


def _unsealed(buffer: TxnBuffer, sealed_upto: Position | None) -> Iterator[AbortedRow]:
    """The aborted transactions after the newest sealed one, in marker order."""
    aborted = buffer.aborted
    return aborted.rows_from(aborted.rank_after(sealed_upto))


def _seal(unsealed: Iterator[AbortedRow], deadline: float | None) -> list[_Sealed]:
    """Whole segments from ``unsealed`` (until ``deadline``, a perf_counter time)."""
    out: list[_Sealed] = []
    while deadline is None or time.perf_counter() < deadline:
        chunk = list(itertools.islice(unsealed, SEGMENT_SIZE))
        if len(chunk) < SEGMENT_SIZE:
            break
        data = seal(chunk)  # format 2: the rows as they are
        last = max((a[3], a[4]) for a in chunk)
        marker = Position(chunk[-1][5], chunk[-1][6])
        out.append(_Sealed(data, len(chunk), marker, Position(*last)))
    return out


def _add_segments(
    batch: WriteBatch, topic: Topic, state: SnapshotState, sealed: list[_Sealed]
) -> int:
    written = 0
    for segment in sealed:
        ref = SegmentRef(
            state.next_segment_id,
            segment.count,
            zlib.crc32(segment.data),
            segment.last_marker,
            segment.max_last,
        )
        state.next_segment_id += 1
        batch.put_snapshot_segment(topic.topic_id, ref.segment_id, segment.data)
        state.segments.append(ref)
        written += len(segment.data)
    return written


async def take_snapshot(
    batch: WriteBatch, topic: Topic, state: SnapshotState, *, step: float = 0.02
) -> int:
    """:func:`prepare_snapshot` for the event loop: new segments are sealed in slices of
    about ``step`` seconds with the loop free in between (the first snapshot after a
    full replay may seal a million aborted transactions), then the snapshot itself is
    prepared in one step. Returns the bytes added to ``batch``.

    Segments sealed in the slices are added only if no other snapshot of the topic
    sealed any meanwhile (else that work is dropped and the final step seals again).
    """
    start = state.sealed_upto
    pending: list[_Sealed] = []
    last = start
    while True:
        sealed = _seal(_unsealed(topic.buffer, last), time.perf_counter() + step)
        if not sealed:
            break
        pending.extend(sealed)
        last = sealed[-1].last_marker
        await asyncio.sleep(0)
    written = 0
    if pending and state.sealed_upto == start and not topic.deleted:
        written += _add_segments(batch, topic, state, pending)
    return written + prepare_snapshot(batch, topic, state)


async def recover_topic(ledger: ManagedLedger) -> tuple[TxnBuffer, SnapshotState]:
    """Rebuild a topic's buffer (snapshot + tail, else full replay) and its bookkeeping."""
    buffer, recovery, snapshot = await recover(ledger)
    last_snapshot, last_segment = await ledger.store.snapshot_counters(ledger.topic_id)
    next_snapshot, next_segment = last_snapshot + 1, last_segment + 1
    state = SnapshotState(next_snapshot_id=next_snapshot, next_segment_id=next_segment)
    state.recovery = recovery
    if snapshot is not None:
        state.segments = list(snapshot.segments)
        state.position = snapshot.position
        state.has_snapshot = True
    else:
        state.purge_segments_below = next_segment  # segments of unusable snapshots go
    return buffer, state


def prepare_delete_topic(batch: WriteBatch, topic_id: int) -> None:
    """Add the deletion of a topic's snapshots and segments to ``batch``."""
    batch.drop_topic_snapshots(topic_id)
