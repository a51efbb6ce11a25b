"""P: the PostgreSQL store against a PostgreSQL outbox table on the same cluster (issue 28).

One PostgreSQL cluster per group run, started as the tests start theirs
(``tests/pg_support.py``: initdb into a temporary directory, a free loopback port, as the
``postgres`` user when we are root) but durable as in production: ``fsync=on`` and
``synchronous_commit=on`` for everything on it, so a COMMIT returns, for the engine and
the outbox alike, only once PostgreSQL flushed its WAL. Each workload gets a database of
its own; 100-byte values.

* ``P1-outbox``: the outbox peer of ``make bench-peers`` (:func:`benchmarks.peers.outbox`):
  one psycopg connection, ``executemany`` of 10 rows + ``COMMIT`` per transaction.
* ``P1-txn10``: the engine on the store (``Engine.open("postgresql://...")``), one
  producer, ``begin``, 10 ``txn.send``, ``commit`` (B1-txn10's shape).
* ``P1-txn10-8p``: eight producers (tasks on one engine, one topic) sharing the same
  transactions (B1-txn10-8p's shape).
* ``P2-consume`` / ``P2-outbox``: then, once a run's three workloads have written,
  an engine opened on P1-txn10's database drains its topic from the earliest position
  (``receive(max=1000)`` and a cumulative, durable ack per batch; a new subscription
  each time), and the outbox's rows are read back by id, 1,000 rows a query
  (:func:`benchmarks.peers.outbox_read`, in a worker thread), by turns: :data:`READS`
  reads each, messages read over the time their reads took.

Targets: P1-txn10 >= 0.8 x P1-outbox, P1-txn10-8p >= 3 x P1-txn10, P2-consume >= 0.5 x
P2-outbox. The writing workloads are interleaved run by run (the order reversed every
other run), the reads read by turns (who goes first alternates); without PostgreSQL's
server binaries the group is skipped, saying why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import psycopg

from txnstream.api import Engine, EngineConfig

from .b1_produce import TOPIC, split_batches, txn_producer, txn_producers
from .core import (
    Figure,
    Samples,
    Settings,
    Target,
    collect_garbage,
    group,
    make_values,
    progress,
)
from .peers import drain, outbox_produce, outbox_read, start_bench_cluster

Producer = Callable[[Engine, list[list[bytes]]], Awaitable[None]]

READS = 5
"""Reads of all the messages each side of P2 makes in a run, by turns. One read of 50,000
took 0.05-0.2 s, short enough that a neighbour's burst of work decided a run's figure,
and the machine's speed drifts by a third over minutes: with each side's reads timed in a
workload of its own, seconds apart, single runs' ratios spread over 0.44-0.66x; read by
turns, each pair of reads sees the same machine (30 pairs in one process: the middle
half of their ratios within 0.60-0.70x). Both sides read as often and are timed
alike, in one process with the engine open, so what is compared stays the same."""


async def _engine(url: str, producer: Producer, batches: list[list[bytes]]) -> float:
    """Messages/s of ``producer`` on an engine on the store at ``url`` (open and topic
    creation not timed)."""
    count = sum(map(len, batches))
    async with Engine.open(url, EngineConfig()) as engine:
        await engine.create_topic(TOPIC)
        collect_garbage()
        started = time.perf_counter()
        await producer(engine, batches)
        rate = count / (time.perf_counter() - started)
        stats = await engine.stats(TOPIC)
        if stats["entries"] != count + len(batches) or stats["open_txns"]:
            raise AssertionError(f"expected {count} messages in {len(batches)} txns: {stats}")
    return rate


def _outbox(url: str, batches: list[list[bytes]]) -> float:
    """The outbox peer's produce messages/s on the database at ``url``."""
    with psycopg.connect(url) as conn:
        return outbox_produce(conn, batches)


async def _reads(engine_url: str, outbox_url: str, count: int, run: int) -> tuple[float, float]:
    """P2: messages/s of :data:`READS` drains of the engine's topic at ``engine_url`` and
    of as many reads of the outbox at ``outbox_url``, made by turns (the engine first in
    even pairs of even runs)."""
    took = {"engine": 0.0, "outbox": 0.0}
    async with Engine.open(engine_url, EngineConfig()) as engine:
        with psycopg.connect(outbox_url) as conn:
            for n in range(READS):
                sides = ["engine", "outbox"][:: -1 if (n + run) % 2 else 1]
                for side in sides:
                    collect_garbage()
                    if side == "engine":
                        rate = await drain(engine, TOPIC, count, subscription=f"peers-{n}")
                        took[side] += count / rate
                    else:
                        took[side] += await asyncio.to_thread(outbox_read, conn, count)
    return READS * count / took["engine"], READS * count / took["outbox"]


@group(
    "P",
    "the PostgreSQL store vs a PostgreSQL outbox, same cluster (synchronous_commit=on, fsync=on)",
    ["P1-txn10", "P1-txn10-8p", "P1-outbox", "P2-consume", "P2-outbox"],
)
def postgres(settings: Settings) -> list[Figure]:
    """P figures: messages/s of the engine on PostgreSQL and of the outbox peer."""
    count = settings.size(50_000, 4_000)
    count -= count % 80  # whole transactions of 10 for each of 8 producers
    batches = split_batches(make_values(1000), count, 10)
    samples = Samples()
    with start_bench_cluster() as cluster:
        workloads: list[tuple[str, str, Callable[[str], float]]] = [
            ("outbox", "P1-outbox", lambda url: _outbox(url, batches)),
            ("txn10", "P1-txn10", lambda url: asyncio.run(_engine(url, txn_producer, batches))),
            ("8p", "P1-txn10-8p", lambda url: asyncio.run(_engine(url, txn_producers, batches))),
        ]
        for run in range(settings.runs):
            urls: dict[str, str] = {}
            for tag, figure_id, workload in workloads[:: -1 if run % 2 else 1]:
                url = urls[tag] = cluster.create_database(f"p{run}_{tag}")
                started = time.perf_counter()
                rate = workload(url)
                samples.add(figure_id, rate)
                progress(
                    f"P run {run + 1}/{settings.runs} {figure_id}: {rate:,.0f} msg/s"
                    f" ({time.perf_counter() - started:.1f} s)"
                )
            consume, read = asyncio.run(_reads(urls["txn10"], urls["outbox"], count, run))
            samples.add("P2-consume", consume)
            samples.add("P2-outbox", read)
            progress(
                f"P run {run + 1}/{settings.runs} P2-consume: {consume:,.0f} msg/s,"
                f" P2-outbox: {read:,.0f} msg/s"
            )
    return [
        Figure.of(
            "P1-txn10",
            samples["P1-txn10"],
            "msg/s",
            baseline="P1-outbox",
            target=Target(">=", 0.8, "P1-outbox"),
        ),
        Figure.of(
            "P1-txn10-8p",
            samples["P1-txn10-8p"],
            "msg/s",
            baseline="P1-outbox",
            target=Target(">=", 3.0, "P1-txn10"),
        ),
        Figure.of("P1-outbox", samples["P1-outbox"], "msg/s"),
        Figure.of(
            "P2-consume",
            samples["P2-consume"],
            "msg/s",
            baseline="P2-outbox",
            target=Target(">=", 0.5, "P2-outbox"),
        ),
        Figure.of("P2-outbox", samples["P2-outbox"], "msg/s"),
    ]
