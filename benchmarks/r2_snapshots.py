"""R2: the cost of a periodic snapshot with many aborted transactions retained (the
figures and method are described in :mod:`benchmarks.r_recovery`, which runs them)."""

from __future__ import annotations

import asyncio
import gc
import shutil
import statistics
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.core import Figure, Target, collect_garbage, progress, stall_phase
from txnstream.api import Engine, EngineConfig
from txnstream.ledger import EntryKind, Position, TxnId, WriteBatch
from txnstream.snapshots import SEGMENT_SIZE, take_snapshot
from txnstream.txn_buffer import AbortedTxn, Topic

R2_SNAPSHOTS = 20
R2_ABORTS_BETWEEN = 10
R2_POLICY_SNAPSHOTS = 5
R2_POLICY_ABORTS = 1000  # EngineConfig().snapshot_every
LEDGER_ENTRIES = 50_000  # EngineConfig().ledger_max_entries
KiB = 1024


# -- R2 ----------------------------------------------------------------------------------


def _pos(n: int) -> Position:
    """The position of the ``n``-th entry of a topic with full 50,000-entry ledgers."""
    return Position(n // LEDGER_ENTRIES, n % LEDGER_ENTRIES)


@dataclass(slots=True)
class Synthetic:
    """A topic whose buffer holds synthetic aborted transactions."""

    topic: Topic
    next_entry: int
    next_txn: int

    def abort_more(self, count: int) -> None:
        """``count`` more aborted transactions, fed as durable entries are."""
        buffer = self.topic.buffer
        for _ in range(count):
            txn = TxnId(self.next_txn)
            buffer.on_entry(_pos(self.next_entry), EntryKind.DATA, txn)
            buffer.on_entry(_pos(self.next_entry + 1), EntryKind.ABORT, txn)
            self.topic.markers_applied += 1
            self.next_entry += 2
            self.next_txn += 1


async def synthetic_topic(engine: Engine, name: str, retained: int) -> Synthetic:
    """A real engine topic whose buffer holds ``retained`` aborted transactions."""
    await engine.create_topic(name)
    topic = engine._rt.topics[name]
    aborted = []
    previous: Position | None = None
    for seq in range(retained):
        data, marker = _pos(2 * seq), _pos(2 * seq + 1)
        aborted.append(AbortedTxn(TxnId(seq), data, data, marker, previous))
        previous = marker
    last = _pos(2 * retained - 1)
    topic.buffer.restore(last_confirmed=last, max_read_position=last, ongoing={}, aborted=aborted)
    # A real recovery builds this state with collection paused and the engine freezes
    # it once open (EngineConfig.gc_freeze, api/_gc.py); the synthetic state gets the
    # same treatment, else every full collection of the first snapshot walks the
    # million-row containers (~20 ms each) where a recovered engine's would not.
    gc.collect()
    gc.freeze()  # the engine's close unfreezes (the last open engine of the process)
    return Synthetic(topic, 2 * retained, retained)


def _blob_bytes(batch: WriteBatch) -> int:
    """Sum of the blob parameters of ``batch`` (the snapshot and segment payloads)."""
    return sum(
        len(param)
        for _, rows in batch.ops
        for row in rows
        for param in row
        if isinstance(param, bytes)
    )


async def snapshot_once(engine: Engine, topic: Topic) -> tuple[int, float, float]:
    """One snapshot of ``topic`` the way the engine takes it (``take_snapshot``: new
    segments sealed in slices that yield to the loop): (bytes, prepare ms, write ms)."""
    state = engine._rt.snapshots[topic.topic_id]
    batch = WriteBatch()
    started = time.perf_counter()
    written = await take_snapshot(batch, topic, state)
    prepared = time.perf_counter()
    await engine._rt.store.write(batch)
    done = time.perf_counter()
    blobs = _blob_bytes(batch)
    if blobs != written:
        raise AssertionError(f"prepare_snapshot said {written} bytes, the batch holds {blobs}")
    return written, (prepared - started) * 1000, (done - prepared) * 1000


@dataclass(slots=True)
class Series:
    """Periodic snapshots at one retained count."""

    retained: int
    initial_bytes: int = 0
    initial_ms: float = 0.0
    segments: int = 0
    bytes: list[int] = field(default_factory=list)
    prepare_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    policy_bytes: list[int] = field(default_factory=list)
    policy_ms: list[float] = field(default_factory=list)
    floor_ms: list[float] = field(default_factory=list)
    """Durable writes of one tiny row: the commit cost any snapshot pays."""


async def r2_series(path: Path, retained: int, policy: bool) -> Series:
    """The first snapshot, then 20 periodic ones after 10 more aborts each."""
    config = EngineConfig(snapshot_every=10**9, snapshot_interval=10**6)
    series = Series(retained)
    async with Engine.open(path, config) as engine:
        with stall_phase("R2 synthetic setup", watched=False):  # harness, not the engine
            synthetic = await synthetic_topic(engine, f"r2-{retained}", retained)
        topic = synthetic.topic
        collect_garbage()
        written, prepare_ms, write_ms = await snapshot_once(engine, topic)
        series.initial_bytes, series.initial_ms = written, prepare_ms + write_ms
        series.segments = len(engine._rt.snapshots[topic.topic_id].segments)
        for _ in range(R2_SNAPSHOTS):
            with stall_phase("R2 synthetic aborts", watched=False):
                synthetic.abort_more(R2_ABORTS_BETWEEN)
            written, prepare_ms, write_ms = await snapshot_once(engine, topic)
            series.bytes.append(written)
            series.prepare_ms.append(prepare_ms)
            series.total_ms.append(prepare_ms + write_ms)
        if policy:
            for _ in range(R2_POLICY_SNAPSHOTS):
                with stall_phase("R2 synthetic aborts", watched=False):
                    synthetic.abort_more(R2_POLICY_ABORTS)
                written, prepare_ms, write_ms = await snapshot_once(engine, topic)
                series.policy_bytes.append(written)
                series.policy_ms.append(prepare_ms + write_ms)
        for i in range(R2_SNAPSHOTS):
            batch = WriteBatch()
            batch.add("INSERT OR REPLACE INTO meta (key, value) VALUES ('r2-floor', ?)", (i,))
            started = time.perf_counter()
            await engine._rt.store.write(batch)
            series.floor_ms.append((time.perf_counter() - started) * 1000)
        if len(topic.buffer.aborted_txns) != synthetic.next_txn:
            raise AssertionError("R2: the buffer lost aborted transactions")
    return series


def _label(count: int) -> str:
    return f"{count // 1_000_000}M" if count >= 1_000_000 else f"{count // 1000}k"


def r2(quick: bool, runs: int, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    """R2 figures: periodic snapshot bytes and ms at each retained count."""
    scales = (10_000, 100_000) if quick else (10_000, 100_000, 1_000_000)
    headline = scales[-1]
    by_scale: dict[int, list[Series]] = defaultdict(list)
    for run in range(runs):
        for retained in scales:
            path = work / f"r2-{run}-{retained}"
            series = asyncio.run(r2_series(path, retained, policy=retained == headline))
            shutil.rmtree(path, ignore_errors=True)
            by_scale[retained].append(series)
            policy = ""
            if series.policy_bytes:
                policy = (
                    f"; after {R2_POLICY_ABORTS} aborts: {max(series.policy_bytes) / KiB:.1f} KiB"
                    f" max, {statistics.median(series.policy_ms):.2f} ms"
                )
            floor = statistics.median(series.floor_ms)
            progress(
                f"R2 run {run + 1}/{runs} {_label(retained)} aborted: first snapshot"
                f" {series.initial_bytes / KiB:,.0f} KiB in {series.initial_ms:,.0f} ms"
                f" ({series.segments} segments); periodic"
                f" {statistics.median(series.bytes) / KiB:.1f} KiB (max"
                f" {max(series.bytes) / KiB:.1f}), {statistics.median(series.total_ms):.2f} ms"
                f" (prepare {statistics.median(series.prepare_ms):.2f} ms; a one-row commit"
                f" {floor:.2f} ms){policy}"
            )
            collect_garbage()
    base = _label(scales[0])
    figures: list[Figure] = []
    head = by_scale[headline]
    figures.append(
        Figure.of(
            "R2-bytes",
            [statistics.median(s.bytes) for s in head],
            "B",
            target=Target("<=", 64 * KiB),
        )
    )
    figures.append(
        Figure.of(
            "R2-ms",
            [statistics.median(s.total_ms) for s in head],
            "ms",
            target=Target("<=", 5.0),
        )
    )
    for retained in scales:
        label = _label(retained)
        runs_ = by_scale[retained]
        baseline = None if retained == scales[0] else f"R2-{base}-bytes"
        figures.append(
            Figure.of(
                f"R2-{label}-bytes",
                [statistics.median(s.bytes) for s in runs_],
                "B",
                baseline=baseline,
            )
        )
        figures.append(
            Figure.of(
                f"R2-{label}-ms",
                [statistics.median(s.total_ms) for s in runs_],
                "ms",
                baseline=None if baseline is None else f"R2-{base}-ms",
            )
        )
        figures.append(
            Figure.of(
                f"R2-{label}-prepare-ms", [statistics.median(s.prepare_ms) for s in runs_], "ms"
            )
        )
    figures.append(
        Figure.of(
            "R2-policy-bytes",
            [float(max(s.policy_bytes)) for s in head],
            "B",
            target=Target("<=", 64 * KiB),
        )
    )
    figures.append(Figure.of("R2-policy-ms", [statistics.median(s.policy_ms) for s in head], "ms"))
    figures.append(
        Figure.of("R2-commit-floor-ms", [statistics.median(s.floor_ms) for s in head], "ms")
    )
    figures.append(Figure.of("R2-first-snapshot-s", [s.initial_ms / 1000 for s in head], "s"))
    details = {
        _label(retained): {
            "segments": by_scale[retained][0].segments,
            "first_snapshot_kib": round(by_scale[retained][0].initial_bytes / KiB, 1),
            "first_snapshot_ms": round(by_scale[retained][0].initial_ms, 1),
            "periodic_bytes_min_max": [
                min(min(s.bytes) for s in by_scale[retained]),
                max(max(s.bytes) for s in by_scale[retained]),
            ],
        }
        for retained in scales
    }
    return figures, {"segment_size": SEGMENT_SIZE, "scales": details}
