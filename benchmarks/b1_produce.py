"""B1: produce throughput, one producer and eight, against a plain-SQLite ceiling.

Workloads (each run in a fresh data directory, default durable config, 100-byte values):

* ``B1-txn10`` / ``B1-txn100``: ``begin``, one ``txn.send`` per message (a producer
  pipelining its sends), ``commit``; transactions of 10 / 100 messages.
* ``B1-plain10`` / ``B1-plain100``: non-transactional ``send_many`` batches of 10 / 100.
* ``B1-txn10-8p``: eight producers (asyncio tasks on one engine, one topic), each with
  transactions of 10, sharing the total message count.
* ``B1-ceiling``: the txn10 workload written straight to SQLite with the stdlib
  ``sqlite3`` module: WAL, ``synchronous=FULL``, a ``WITHOUT ROWID`` table shaped like the
  engine's ``entries`` table, ``executemany`` of each transaction's rows + ``COMMIT``.
* ``B1-fsync-busy-us`` / ``B1-fsync-idle-us``: what one ``COMMIT`` of 10 such rows costs
  (median, microseconds) when commits follow each other as in the ceiling, and when the
  disk had no I/O for 200 us before each (about what one producer's transaction of 10
  spends in Python on the loop). The ratio idle/busy says how much of B1-txn10's gap to
  the ceiling is the disk's, not the engine's: on virtual disks an fsync right after
  another can cost a fraction of one after a short pause (measured on the 2-core VM: ~60
  against 200-800 us).

The workloads are interleaved run by run (ceiling, txn10, ..., 8p; then again) so that
noise from other processes on the machine spreads over all of them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from txnstream.api import Engine, EngineConfig

from .core import (
    VALUE_SIZE,
    Figure,
    Samples,
    Settings,
    Target,
    collect_garbage,
    fresh_dir,
    group,
    make_values,
    progress,
)

TOPIC = "bench"
PRODUCERS = 8
_POOL = 1000  # distinct values, cycled; a multiple of every batch size

Workload = Callable[[Engine, list[list[bytes]]], Awaitable[None]]


def split_batches(values: list[bytes], count: int, size: int) -> list[list[bytes]]:
    """``count`` messages as ``count // size`` lists of ``size`` values."""
    pool = len(values)
    return [values[(start % pool) : (start % pool) + size] for start in range(0, count, size)]


async def txn_producer(engine: Engine, batches: list[list[bytes]]) -> None:
    """One producer: a transaction per batch, a ``txn.send`` per message, ``commit``."""
    for batch in batches:
        txn = await engine.begin()
        for value in batch:
            await txn.send(TOPIC, value)
        await txn.commit()


async def _plain_producer(engine: Engine, batches: list[list[bytes]]) -> None:
    for batch in batches:
        await engine.send_many(TOPIC, batch)


async def txn_producers(engine: Engine, batches: list[list[bytes]]) -> None:
    """:data:`PRODUCERS` producers (tasks) sharing the batches, on one topic."""
    shares = [batches[i::PRODUCERS] for i in range(PRODUCERS)]
    await asyncio.gather(*(txn_producer(engine, share) for share in shares))


def measure_engine(
    tag: str, workload: Workload, batches: list[list[bytes]], *, transactional: bool
) -> float:
    """Messages/s of ``workload`` on a fresh engine (open and topic creation not timed)."""
    count = sum(len(b) for b in batches)
    expected = count + (len(batches) if transactional else 0)  # + one marker per txn

    async def main() -> float:
        with fresh_dir(tag) as path:
            async with Engine.open(path, EngineConfig()) as engine:
                await engine.create_topic(TOPIC)
                collect_garbage()
                started = time.perf_counter()
                await workload(engine, batches)
                elapsed = time.perf_counter() - started
                stats = await engine.stats(TOPIC)
        if stats["entries"] != expected or stats["open_txns"] != 0:
            raise AssertionError(f"{tag}: expected {expected} entries, stats say {stats}")
        return count / elapsed

    return asyncio.run(main())


_CEILING_DDL = """
CREATE TABLE entries (
    topic_id  INTEGER NOT NULL,
    ledger_id INTEGER NOT NULL,
    entry_id  INTEGER NOT NULL,
    kind      INTEGER NOT NULL,
    txn       INTEGER,
    data      BLOB NOT NULL,
    PRIMARY KEY (topic_id, ledger_id, entry_id)
) WITHOUT ROWID
"""
_CEILING_INSERT = (
    "INSERT INTO entries (topic_id, ledger_id, entry_id, kind, txn, data) VALUES (?, ?, ?, ?, ?, ?)"
)


def _ceiling_db(path: Path) -> sqlite3.Connection:
    """A new SQLite file set up as the ceiling writes it: WAL, FULL, the entries table."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA cache_size=-65536")  # as the engine's writer
    conn.execute(_CEILING_DDL)
    return conn


def measure_ceiling(batches: list[list[bytes]]) -> float:
    """Messages/s of the same transactions written straight to SQLite (one COMMIT each)."""
    count = sum(len(b) for b in batches)
    with fresh_dir("ceiling") as path:
        conn = _ceiling_db(path / "ceiling.db")
        try:
            collect_garbage()
            started = time.perf_counter()
            entry_id = 0
            for txn, batch in enumerate(batches):
                rows = [(0, 0, entry_id + i, 0, txn, value) for i, value in enumerate(batch)]
                entry_id += len(batch)
                conn.execute("BEGIN")
                conn.executemany(_CEILING_INSERT, rows)
                conn.execute("COMMIT")
            elapsed = time.perf_counter() - started
            (stored,) = conn.execute("SELECT count(*) FROM entries").fetchone()
        finally:
            conn.close()
    if stored != count:
        raise AssertionError(f"ceiling: expected {count} rows, found {stored}")
    return count / elapsed


FSYNC_IDLE_US = 200  # the pause before each commit of B1-fsync-idle-us
_FSYNC_COMMITS = 1000


def measure_commit_us(idle_us: int, commits: int = _FSYNC_COMMITS) -> float:
    """Median microseconds of one ``COMMIT`` of 10 ceiling rows, the disk idle for
    ``idle_us`` before each (a busy wait: no I/O, no sleep's timer slack)."""
    clock = time.perf_counter_ns
    costs: list[int] = []
    with fresh_dir("fsync") as path:
        conn = _ceiling_db(path / "fsync.db")
        try:
            value = bytes(VALUE_SIZE)
            for txn in range(commits):
                rows = [(0, 0, txn * 10 + i, 0, txn, value) for i in range(10)]
                conn.execute("BEGIN")
                conn.executemany(_CEILING_INSERT, rows)
                until = clock() + idle_us * 1000
                while clock() < until:
                    pass
                started = clock()
                conn.execute("COMMIT")
                costs.append(clock() - started)
        finally:
            conn.close()
    return statistics.median(costs) / 1000


@group(
    "B1",
    "produce throughput",
    [
        "B1-txn10",
        "B1-txn100",
        "B1-plain10",
        "B1-plain100",
        "B1-txn10-8p",
        "B1-ceiling",
        "B1-fsync-busy-us",
        "B1-fsync-idle-us",
    ],
)
def produce(settings: Settings) -> list[Figure]:
    """B1 figures: messages/s of each producer pattern and of the SQLite ceiling."""
    count = settings.size(200_000, 10_000)
    count -= count % 400  # whole transactions of 100, and of 10 for each of 8 producers
    values = make_values(_POOL)
    by10, by100 = split_batches(values, count, 10), split_batches(values, count, 100)
    workloads: list[tuple[str, Callable[[], float]]] = [
        ("B1-ceiling", lambda: measure_ceiling(by10)),
        ("B1-txn10", lambda: measure_engine("txn10", txn_producer, by10, transactional=True)),
        ("B1-txn100", lambda: measure_engine("txn100", txn_producer, by100, transactional=True)),
        (
            "B1-plain10",
            lambda: measure_engine("plain10", _plain_producer, by10, transactional=False),
        ),
        (
            "B1-plain100",
            lambda: measure_engine("plain100", _plain_producer, by100, transactional=False),
        ),
        ("B1-txn10-8p", lambda: measure_engine("8p", txn_producers, by10, transactional=True)),
    ]
    commits = settings.size(_FSYNC_COMMITS, 200)
    probes: list[tuple[str, Callable[[], float]]] = [
        ("B1-fsync-busy-us", lambda: measure_commit_us(0, commits)),
        ("B1-fsync-idle-us", lambda: measure_commit_us(FSYNC_IDLE_US, commits)),
    ]
    samples = Samples()
    for run in range(settings.runs):
        for figure_id, workload in workloads:
            started = time.perf_counter()
            rate = workload()
            samples.add(figure_id, rate)
            progress(
                f"B1 run {run + 1}/{settings.runs} {figure_id}: {rate:,.0f} msg/s"
                f" ({count:,} msgs, {time.perf_counter() - started:.1f} s)"
            )
        for figure_id, probe in probes:
            cost = probe()
            samples.add(figure_id, cost)
            progress(f"B1 run {run + 1}/{settings.runs} {figure_id}: {cost:,.0f} us a commit")
    ceiling = "B1-ceiling"
    return [
        Figure.of(
            "B1-txn10",
            samples["B1-txn10"],
            "msg/s",
            baseline=ceiling,
            target=Target(">=", 0.6, ceiling),
        ),
        Figure.of(
            "B1-txn100",
            samples["B1-txn100"],
            "msg/s",
            baseline=ceiling,
            target=Target(">=", 0.9, "B1-plain100"),
        ),
        Figure.of("B1-plain10", samples["B1-plain10"], "msg/s", baseline=ceiling),
        Figure.of("B1-plain100", samples["B1-plain100"], "msg/s", baseline=ceiling),
        Figure.of(
            "B1-txn10-8p",
            samples["B1-txn10-8p"],
            "msg/s",
            baseline=ceiling,
            target=Target(">=", 3.5, "B1-txn10"),
        ),
        Figure.of(ceiling, samples[ceiling], "msg/s"),
        Figure.of("B1-fsync-busy-us", samples["B1-fsync-busy-us"], "us"),
        Figure.of(
            "B1-fsync-idle-us",
            samples["B1-fsync-idle-us"],
            "us",
            baseline="B1-fsync-busy-us",
        ),
    ]
