"""Recovery: the newest valid snapshot plus replay of the entries after it.

A damaged, unreadable or inconsistent snapshot falls back to an older one, then to a
full replay from the first retained entry, with a logged warning: never a refusal to
start, never a wrong state.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from dataclasses import dataclass

from txnstream.ledger import ManagedLedger, Position, SnapshotError
from txnstream.txn_buffer import AbortedRow, AbortedSet, TxnBuffer

from ._model import SegmentRef, TxnBufferSnapshot, decode_aborted_many, unseal

log = logging.getLogger("txnstream.snapshots")

_REPLAY_CHUNK = 2_500  # entries per loop step: a step stays well under 50 ms
_DECODE_STEP = 0.02  # seconds of segment decoding per loop step


@dataclass(frozen=True, slots=True)
class RecoveryInfo:
    """How a topic's buffer was recovered."""

    from_snapshot: bool
    snapshot_id: int | None
    position: Position | None
    entries_replayed: int
    seconds: float


async def replay(buffer: TxnBuffer, ledger: ManagedLedger, after: Position | None) -> int:
    """Feed ``buffer`` every durable entry after ``after`` (all when None); returns the count."""
    start = Position(0, 0) if after is None else Position(after.ledger_id, after.entry_id + 1)
    count = 0
    while True:
        metas = await ledger.read_meta(start, _REPLAY_CHUNK)
        for meta in metas:
            buffer.on_entry(meta.position, meta.kind, meta.txn_id)
        count += len(metas)
        if len(metas) < _REPLAY_CHUNK:
            return count
        last = metas[-1].position
        start = Position(last.ledger_id, last.entry_id + 1)


async def full_replay(ledger: ManagedLedger) -> tuple[TxnBuffer, int]:
    """A buffer rebuilt from the first retained entry."""
    buffer = TxnBuffer()
    count = await replay(buffer, ledger, None)
    return buffer, count


async def load_snapshot(
    ledger: ManagedLedger, snapshot_id: int, data: bytes
) -> tuple[TxnBufferSnapshot, TxnBuffer]:
    """Decode a snapshot and its segments into a restored (not yet replayed) buffer."""
    snapshot = TxnBufferSnapshot.decode(data)
    last_durable = _last_durable(ledger)
    if snapshot.position is not None and (last_durable is None or snapshot.position > last_durable):
        raise SnapshotError(f"snapshot {snapshot_id} is ahead of the log ({snapshot.position})")
    aborted = AbortedSet()
    if snapshot.segments:
        by_id = await ledger.store.snapshot_segments(
            ledger.topic_id, [ref.segment_id for ref in snapshot.segments]
        )
        deadline = time.perf_counter() + _DECODE_STEP
        for ref in snapshot.segments:
            segment = _load_segment(ref, by_id.pop(ref.segment_id, None))
            try:
                aborted.extend(segment)  # one array pass a segment, with the loop free between
            except ValueError as exc:
                raise SnapshotError(f"segment {ref.segment_id}: {exc}") from exc
            if time.perf_counter() >= deadline:
                await asyncio.sleep(0)  # many segments: let the loop breathe
                deadline = time.perf_counter() + _DECODE_STEP
    try:
        aborted.extend(snapshot.tail)
    except ValueError as exc:
        raise SnapshotError(f"snapshot {snapshot_id}: {exc}") from exc
    buffer = TxnBuffer()
    buffer.restore(
        last_confirmed=snapshot.position,
        max_read_position=snapshot.max_read_position,
        ongoing=snapshot.ongoing,
        aborted=aborted,
    )
    buffer.prune_aborted_before(ledger.retained_start())
    return snapshot, buffer


def _load_segment(ref: SegmentRef, data: bytes | None) -> list[AbortedRow]:
    if data is None:
        raise SnapshotError(f"segment {ref.segment_id} is missing")
    if zlib.crc32(data) != ref.crc:
        raise SnapshotError(f"segment {ref.segment_id} checksum mismatch")
    version, items = unseal(data)
    if len(items) != ref.count:
        raise SnapshotError(f"segment {ref.segment_id} holds {len(items)} of {ref.count}")
    return decode_aborted_many(items, version)


def _last_durable(ledger: ManagedLedger) -> Position | None:
    for info in reversed(ledger.ledgers):
        if info.entries:
            return Position(info.ledger_id, info.entries - 1)
    return None


async def recover(
    ledger: ManagedLedger,
) -> tuple[TxnBuffer, RecoveryInfo, TxnBufferSnapshot | None]:
    """Rebuild a topic's buffer: newest valid snapshot + tail, else a full replay."""
    started = time.perf_counter()
    rows = await ledger.store.snapshot_rows(ledger.topic_id)
    for snapshot_id, data in rows:
        try:
            snapshot, buffer = await load_snapshot(ledger, snapshot_id, data)
        except (SnapshotError, ValueError, TypeError, IndexError) as exc:
            log.warning(
                "topic %d: snapshot %d unusable (%s); trying an older one",
                ledger.topic_id,
                snapshot_id,
                exc,
            )
            continue
        count = await replay(buffer, ledger, snapshot.position)
        info = RecoveryInfo(
            True, snapshot_id, snapshot.position, count, time.perf_counter() - started
        )
        return buffer, info, snapshot
    if rows:
        log.warning("topic %d: no usable snapshot; full replay", ledger.topic_id)
    buffer, count = await full_replay(ledger)
    info = RecoveryInfo(False, None, None, count, time.perf_counter() - started)
    return buffer, info, None
