"""R1/R2: recovery from a snapshot vs full replay, and the cost of periodic snapshots.

``run(quick) -> list[dict]`` (figure dicts as in ``bench-results.json``: ``id``,
``value``, ``unit``, ``baseline``, ``ratio``, plus ``target``/``met``/``samples``...).
Run alone: ``.venv/bin/python -m benchmarks.r_recovery [--quick] [--runs N] [--only R1]``.

R1 (issue 4): a topic of 1,000,000 entries with 10,000 aborted transactions (quick:
100,000 / 1,000), built once with the embedded engine (``durability="normal"`` for the
build only; DEFAULT snapshot policy, ``snapshot_every=1000`` markers / 5 s). The build
runs rounds of 1,000 entries, 4 rounds in flight: 10 transactions of 10 messages that
are aborted + 1 transaction of 100 messages that is committed (one ``engine.finish``
for the 11), then one plain ``produce`` of 789 messages; 100-byte values. After the
build it waits (bounded) until the periodic snapshot covers the last entry, then
closes. Each timed open works on a fresh copy of that directory:

* ``R1-snapshot-s``: wall time of ``await Engine.open(copy, EngineConfig())`` (it
  recovers before returning), from the snapshot.
* ``R1-full-s``: the same after ``DELETE FROM snapshots; DELETE FROM
  snapshot_segments`` on the copy: a full replay.
* ``R1-speedup``: median of the per-run ratios full / snapshot.

Both opens run with a warm OS page cache (the copy was just written). One extra
instrumented open of each kind times the phases of ``Engine._open`` (store open,
``ManagedLedger.open`` counting the unsealed ledger, ``recover`` = snapshot load + tail
replay or full replay, topic bookkeeping reads, ``Coordinator.load``, subscriptions and
reconciliation) by wrapping those functions for that one open (nothing is edited).

R2 (issue 4): the cost of a periodic snapshot with many aborted transactions retained.
Writing 1,000,000 aborted transactions through the engine would take minutes and write
2 M entries nobody reads here, since ``prepare_snapshot`` only looks at the transaction
buffer and the snapshot bookkeeping. So a real engine topic gets a synthetic buffer
state: ``TxnBuffer.restore`` with N aborted transactions (one data entry + its ABORT
marker each, positions laid out as the ledger would: 50,000 entries per ledger), then
the engine's own ``SnapshotState`` of that topic takes the first (full) snapshot, which
seals N / 1024 segments, written durably. Then 20 times: 10 more aborted transactions
fed through ``TxnBuffer.on_entry`` (the path durable markers take), and a periodic
snapshot: ``take_snapshot(batch, topic, state)`` + ``store.write(batch)`` (durable,
``synchronous=FULL``). The engine's own snapshot loop is kept out of the way
(``snapshot_every``/``snapshot_interval`` huge). Figures at N = 1,000,000 (quick:
100,000), and per N in {10k, 100k, 1M} (quick: {10k, 100k}) to show how the cost
depends on N: bytes written (``take_snapshot``'s return; checked against the sum of
the batch's blob parameters) and milliseconds (median of the 20). ``R2-policy-*``: the
worst case the default policy allows, a snapshot after 1,000 more aborts (5 of them;
the bytes figure is the largest). ``R2-first-snapshot-s``: the first snapshot of a
topic holding N aborted transactions and no sealed segment yet (what the first periodic
snapshot after a full-replay recovery costs; it runs on the event loop).
``R2-commit-floor-ms``: a durable write of one tiny
row on the same store (median of 20), the fsync cost any snapshot write pays.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import inspect
import json
import shutil
import sqlite3
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.core import (
    Figure,
    Target,
    collect_garbage,
    format_table,
    make_values,
    progress,
    resolve,
)
from benchmarks.r2_snapshots import r2
from txnstream.api import Engine, EngineConfig, OutgoingMessage
from txnstream.api import _engine as api_engine
from txnstream.dispatcher import SubscriptionRegistry
from txnstream.ledger import ManagedLedger, Store
from txnstream.snapshots import _replay as snapshots_replay
from txnstream.snapshots import _store as snapshots_store
from txnstream.txn_buffer import Coordinator

TOPIC = "r1"
DB_FILE = "txnstream.db"
ROUND_ENTRIES = 1000
ABORTED_PER_ROUND = 10
ABORTED_SIZE = 10
COMMITTED_SIZE = 100
PLAIN_SIZE = ROUND_ENTRIES - ABORTED_PER_ROUND * (ABORTED_SIZE + 1) - (COMMITTED_SIZE + 1)
BUILD_WORKERS = 4
SNAPSHOT_WAIT = 30.0


# -- R1: build ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Built:
    """What the R1 build left on disk."""

    entries: int
    aborted: int
    seconds: float
    snapshot: dict[str, Any]


async def build_topic(path: Path, rounds: int) -> Built:
    """``rounds`` x 1,000 entries (10 aborted transactions each), default snapshot policy."""
    started = time.perf_counter()
    values = make_values(1000)
    aborted_msgs = [OutgoingMessage(v) for v in values[:ABORTED_SIZE]]
    committed_msgs = [OutgoingMessage(v) for v in values[:COMMITTED_SIZE]]
    plain_msgs = [OutgoingMessage(v) for v in values[:PLAIN_SIZE]]
    config = EngineConfig(durability="normal")  # default snapshot_every / interval
    async with Engine.open(path, config) as engine:
        await engine.create_topic(TOPIC)
        counter = iter(range(rounds))

        async def worker() -> None:
            for _ in counter:
                aborted = [await engine.begin() for _ in range(ABORTED_PER_ROUND)]
                committed = await engine.begin()
                for txn in aborted:
                    await txn.send_messages(TOPIC, aborted_msgs)  # pipelined
                await committed.send_messages(TOPIC, committed_msgs)
                await engine.finish(commit=[committed.id], abort=[t.id for t in aborted])
                await engine.produce(TOPIC, plain_msgs)

        async def report() -> None:
            while True:
                await asyncio.sleep(5)
                stats = await engine.stats(TOPIC)
                progress(f"R1 build: {stats['entries']:,} entries")

        reporter = asyncio.create_task(report())
        try:
            await asyncio.gather(*(worker() for _ in range(BUILD_WORKERS)))
        finally:
            reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reporter
        built = time.perf_counter() - started
        progress(f"R1 build: {rounds * ROUND_ENTRIES:,} entries in {built:.1f} s; snapshot wait")
        deadline = time.monotonic() + SNAPSHOT_WAIT
        while True:
            stats = await engine.stats(TOPIC)
            snap = stats["snapshot"]
            if snap is not None and snap["position"] == stats["last_confirmed"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no snapshot at the last position after build: {stats}")
            await asyncio.sleep(0.1)
    expected = rounds * ROUND_ENTRIES
    if stats["entries"] != expected or stats["aborted_txns"] != rounds * ABORTED_PER_ROUND:
        raise AssertionError(f"R1 build: expected {expected} entries, stats {stats}")
    return Built(stats["entries"], stats["aborted_txns"], time.perf_counter() - started, snap)


def copy_data(source: Path, target: Path, *, drop_snapshots: bool) -> None:
    """A copy of the data directory; optionally without any snapshot (full replay)."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    if drop_snapshots:
        conn = sqlite3.connect(target / DB_FILE, isolation_level=None)
        try:
            conn.execute("DELETE FROM snapshots")
            conn.execute("DELETE FROM snapshot_segments")
        finally:
            conn.close()


# -- R1: timed opens ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Opened:
    """One timed ``Engine.open``."""

    seconds: float
    recovery: dict[str, Any]
    aborted: int
    stable: str | None
    ledgers: int
    phases: dict[str, float] = field(default_factory=dict)


async def timed_open(path: Path, phases: dict[str, float] | None = None) -> Opened:
    """Wall time of ``Engine.open`` (recovery included), and what it recovered."""
    collect_garbage()
    started = time.perf_counter()
    engine = await Engine.open(path, EngineConfig())
    seconds = time.perf_counter() - started
    try:
        stats = await engine.stats(TOPIC)
    finally:
        await engine.close()
    return Opened(
        seconds,
        stats["recovery"],
        stats["aborted_txns"],
        stats["stable_position"],
        stats["ledgers"],
        dict(phases or {}),
    )


_PHASES: tuple[tuple[Any, str, str], ...] = (
    (Store, "open", "store open (connections, pragmas, schema)"),
    (ManagedLedger, "open", "ManagedLedger.open (seal/count the unsealed ledger)"),
    (snapshots_replay, "load_snapshot", "recover: load snapshot + segments"),
    (snapshots_replay, "replay", "recover: replay entries (tail or all)"),
    (snapshots_store, "recover", "recover() total"),
    (api_engine, "load_topics", "_load_topics total"),
    (Coordinator, "load", "Coordinator.load (txns table)"),
    (SubscriptionRegistry, "load", "_load_subscriptions"),
    (api_engine, "reconcile", "_reconcile"),
)


@contextlib.contextmanager
def instrumented() -> Iterator[dict[str, float]]:
    """Time the phases of ``Engine._open`` by wrapping them (restored on exit)."""
    spent: dict[str, float] = defaultdict(float)
    saved: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, attr: str, label: str) -> None:
        if isinstance(owner, type):  # wrap the method where it is defined
            owner = next(c for c in owner.__mro__ if attr in c.__dict__)
        original = owner.__dict__[attr]
        func = original.__func__ if isinstance(original, classmethod) else original
        if inspect.iscoroutinefunction(func):

            async def timed_call(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await func(*args, **kwargs)
                finally:
                    spent[label] += time.perf_counter() - started

        else:

            def timed_call(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return func(*args, **kwargs)
                finally:
                    spent[label] += time.perf_counter() - started

        setattr(
            owner,
            attr,
            classmethod(timed_call) if isinstance(original, classmethod) else timed_call,
        )
        saved.append((owner, attr, original))

    try:
        for owner, attr, label in _PHASES:
            wrap(owner, attr, label)
        yield spent
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)


def open_instrumented(path: Path) -> Opened:
    with instrumented() as spent:
        opened = asyncio.run(timed_open(path, spent))
    return Opened(
        opened.seconds, opened.recovery, opened.aborted, opened.stable, opened.ledgers, dict(spent)
    )


def _phase_table(opened: Opened) -> dict[str, float]:
    """The instrumented phases plus what is left of the open, in ms."""
    phases = {label: round(s * 1000, 2) for label, s in opened.phases.items()}
    accounted = sum(
        opened.phases.get(label, 0.0)
        for label in (
            "store open (connections, pragmas, schema)",
            "_load_topics total",
            "Coordinator.load (txns table)",
            "_load_subscriptions",
            "_reconcile",
        )
    )
    phases["rest of Engine.open"] = round((opened.seconds - accounted) * 1000, 2)
    phases["Engine.open total"] = round(opened.seconds * 1000, 2)
    return phases


def r1(quick: bool, runs: int, work: Path) -> tuple[list[Figure], dict[str, Any]]:
    """R1 figures and details (build, recovery stats, phase breakdowns)."""
    rounds = 100 if quick else 1000
    source = work / "r1-built"
    built = asyncio.run(build_topic(source, rounds))
    db_bytes = sum(f.stat().st_size for f in source.iterdir() if f.is_file())
    progress(
        f"R1 built {built.entries:,} entries, {built.aborted:,} aborted txns in"
        f" {built.seconds:.1f} s ({db_bytes / 2**20:.0f} MiB); snapshot {built.snapshot}"
    )
    snap_s: list[float] = []
    full_s: list[float] = []
    details: dict[str, Any] = {
        "build": {
            "entries": built.entries,
            "aborted_txns": built.aborted,
            "seconds": round(built.seconds, 1),
            "db_mib": round(db_bytes / 2**20, 1),
            "snapshot": built.snapshot,
        }
    }
    target = work / "r1-open"
    reference: tuple[int, str | None] | None = None
    for run in range(runs):
        for kind in ("snapshot", "full"):
            copy_data(source, target, drop_snapshots=kind == "full")
            opened = asyncio.run(timed_open(target))
            rec = opened.recovery
            if rec["from_snapshot"] != (kind == "snapshot"):
                raise AssertionError(f"R1 {kind}: recovered {rec}")
            state = (opened.aborted, opened.stable)
            if reference is None:
                reference = state
            elif state != reference:
                raise AssertionError(f"R1 {kind}: state {state} differs from {reference}")
            (snap_s if kind == "snapshot" else full_s).append(opened.seconds)
            details.setdefault(f"recovery_{kind}", rec)
            progress(
                f"R1 run {run + 1}/{runs} {kind}: open {opened.seconds * 1000:,.1f} ms"
                f" (recover {rec['seconds'] * 1000:,.1f} ms, {rec['entries_replayed']:,} entries"
                f" replayed; {opened.aborted:,} aborted, stable {opened.stable})"
            )
    for kind in ("snapshot", "full"):
        copy_data(source, target, drop_snapshots=kind == "full")
        opened = open_instrumented(target)
        details[f"phases_ms_{kind}"] = _phase_table(opened)
        progress(f"R1 phases ({kind}): {details[f'phases_ms_{kind}']}")
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)
    speedups = [f / s for f, s in zip(full_s, snap_s, strict=True)]
    figures = [
        Figure.of("R1-snapshot-s", snap_s, "s", target=Target("<=", 0.5)),
        Figure.of("R1-full-s", full_s, "s"),
        Figure.of("R1-speedup", speedups, "x", target=Target(">=", 50.0)),
    ]
    return figures, details


# -- figures -----------------------------------------------------------------------------


def as_dicts(figures: Sequence[Figure], details: dict[str, Any]) -> list[dict[str, Any]]:
    """``bench-results.json``-style figure dicts with the target check and the samples."""
    out = []
    for row in resolve(figures):
        f = row.figure
        item = row.as_json()
        if f.target is not None:
            item["target"] = f.target.describe(f.unit)
            item["target_spec"] = f.target.spec()
            item["actual"] = row.target_measured
            item["met"] = row.target_met
        item["samples"] = [round(v, 6) for v in f.samples]
        item["spread"] = None if f.spread is None else round(f.spread, 3)
        group = f.id.split("-", 1)[0]
        if group in details and f.id in ("R1-snapshot-s", "R2-bytes"):
            item["details"] = details[group]
        out.append(item)
    return out


def measure(
    quick: bool, runs: int = 3, only: Sequence[str] = ("R1", "R2")
) -> tuple[list[Figure], dict[str, Any]]:
    """Run R1 and/or R2; the figures and the details per group."""
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    parts: dict[str, Callable[[bool, int, Path], tuple[list[Figure], dict[str, Any]]]] = {
        "R1": r1,
        "R2": r2,
    }
    work = Path(tempfile.mkdtemp(prefix="txnstream-bench-r-"))
    try:
        for name in only:
            got, info = parts[name](quick, runs, work)
            figures += got
            details[name] = info
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return figures, details


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure R1 and R2 (3 runs, medians); returns the figure dicts."""
    figures, details = measure(quick)
    return as_dicts(figures, details)


def main(argv: list[str] | None = None) -> int:
    """Run alone: progress on stderr; the table, then the figure dicts as JSON."""
    parser = argparse.ArgumentParser(description="txnstream R1/R2 recovery benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--only", default="R1,R2", help="R1, R2 or R1,R2")
    args = parser.parse_args(argv)
    only = [part.strip().upper() for part in args.only.split(",") if part.strip()]
    if not set(only) <= {"R1", "R2"}:
        parser.error("--only takes R1 and/or R2")
    figures, details = measure(args.quick, max(1, args.runs), only)
    print(format_table(resolve(figures)))
    print(json.dumps(as_dicts(figures, details), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
