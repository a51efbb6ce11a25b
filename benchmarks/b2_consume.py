"""B2: consume throughput, read_committed vs read_uncommitted, over the same topic.

Each run builds, in a fresh data directory, a topic of transactions of 10 messages of
which every tenth transaction is aborted (10%). Then, for each isolation level, the
engine is reopened (both passes start with the same cold SQLite caches) and a new
subscription drains the topic from the earliest position: ``receive(max=1000)`` and one
cumulative ack per batch, until it has every message it may deliver (90% of them for
read_committed, all for read_uncommitted). The figure is delivered messages/s. The order
of the two passes alternates from run to run.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

from txnstream.api import Engine, EngineConfig

from .core import (
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
TXN_SIZE = 10
ABORT_EVERY = 10  # every 10th transaction aborts: 10%
RECEIVE_MAX = 1000


async def build_topic(path: Path, count: int) -> int:
    """Write ``count`` messages in transactions of 10, 10% aborted; the committed count."""
    values = make_values(1000)
    committed = 0
    async with Engine.open(path, EngineConfig()) as engine:
        await engine.create_topic(TOPIC)
        for n, start in enumerate(range(0, count, TXN_SIZE)):
            txn = await engine.begin()
            offset = start % len(values)
            await txn.send_many(TOPIC, values[offset : offset + TXN_SIZE])
            if n % ABORT_EVERY == ABORT_EVERY - 1:
                await txn.abort()
            else:
                await txn.commit()
                committed += TXN_SIZE
    return committed


async def drain(path: Path, isolation: str, expected: int) -> float:
    """Delivered messages/s of a new subscription draining the topic (engine reopened)."""
    async with Engine.open(path, EngineConfig()) as engine:
        sub = await engine.subscribe(
            TOPIC, f"drain-{isolation}", isolation=isolation, initial_position="earliest"
        )
        collect_garbage()
        received = 0
        started = time.perf_counter()
        while received < expected:
            messages = await sub.receive(max=RECEIVE_MAX, timeout=5.0)
            if not messages:
                break
            received += len(messages)
            await sub.ack(messages[-1].position, cumulative=True)
        elapsed = time.perf_counter() - started
        leftover = await sub.receive(max=RECEIVE_MAX, timeout=0.0)
    if received != expected or leftover:
        raise AssertionError(
            f"{isolation}: received {received} (+{len(leftover)} more), expected {expected}"
        )
    return received / elapsed


_RAW_PAGE = 1000
_RAW_SELECT = (
    "SELECT ledger_id, entry_id, kind, txn, data FROM entries WHERE topic_id = ?"
    " AND (ledger_id, entry_id) > (?, ?) ORDER BY ledger_id, entry_id LIMIT ?"
)


def raw_read(path: Path, committed: int, total_rows: int) -> float:
    """Committed messages/s of a raw keyset read of every row of the topic."""
    conn = sqlite3.connect(path / "txnstream.db", isolation_level=None)
    try:
        (topic_id,) = conn.execute(
            "SELECT topic_id FROM topics WHERE name = ?", (TOPIC,)
        ).fetchone()
        collect_garbage()
        rows = 0
        ledger, entry = -1, -1
        started = time.perf_counter()
        while True:
            page = conn.execute(_RAW_SELECT, (topic_id, ledger, entry, _RAW_PAGE)).fetchall()
            if not page:
                break
            rows += len(page)
            ledger, entry = page[-1][0], page[-1][1]
        elapsed = time.perf_counter() - started
    finally:
        conn.close()
    if rows != total_rows:
        raise AssertionError(f"raw read: {rows} rows, expected {total_rows}")
    return committed / elapsed


@group(
    "B2",
    "consume throughput by isolation level, and the raw read ceiling",
    ["B2-committed", "B2-uncommitted", "B2-raw", "B2-ceiling"],
)
def consume(settings: Settings) -> list[Figure]:
    """B2 figures: delivered messages/s, read_committed and read_uncommitted."""
    count = settings.size(200_000, 10_000)
    count -= count % (TXN_SIZE * ABORT_EVERY)
    samples = Samples()
    for run in range(settings.runs):
        with fresh_dir("b2") as path:
            committed = asyncio.run(build_topic(path, count))
            passes = [
                ("B2-committed", "read_committed", committed),
                ("B2-uncommitted", "read_uncommitted", count),
            ]
            if run % 2:
                passes.reverse()
            total_rows = count + count // TXN_SIZE  # a marker per transaction
            raw = raw_read(path, committed, total_rows)
            samples.add("B2-raw", raw)
            progress(f"B2 run {run + 1}/{settings.runs} B2-raw: {raw:,.0f} msg/s")
            for figure_id, isolation, expected in passes:
                rate = asyncio.run(drain(path, isolation, expected))
                samples.add(figure_id, rate)
                progress(
                    f"B2 run {run + 1}/{settings.runs} {figure_id}: {rate:,.0f} msg/s"
                    f" ({expected:,} msgs of {count:,})"
                )
            samples.add("B2-ceiling", samples["B2-committed"][-1] / raw)
    return [
        Figure.of(
            "B2-committed",
            samples["B2-committed"],
            "msg/s",
            baseline="B2-uncommitted",
            target=Target(">=", 0.95, "B2-uncommitted"),
        ),
        Figure.of("B2-uncommitted", samples["B2-uncommitted"], "msg/s"),
        Figure.of("B2-raw", samples["B2-raw"], "msg/s"),
        Figure.of(
            "B2-ceiling", samples["B2-ceiling"], "x", baseline=None, target=Target(">=", 0.25)
        ),
    ]
