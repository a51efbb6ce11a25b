"""P: the PostgreSQL store against a PostgreSQL outbox table on the same cluster (issue 28).

One PostgreSQL cluster per group run, started as the tests start theirs
(``tests/pg_support.py``: initdb into a temporary directory, a free loopback port, as the
``postgres`` user when we are root) but durable as in production: ``fsync=on`` and
``synchronous_commit=on`` for everything on it, so a COMMIT returns, for the engine and
the outbox alike, only once PostgreSQL flushed its WAL. Each workload gets a database of
its own; 100-byte values.

* ``P1-outbox`` / ``P2-outbox``: the outbox peer of ``make bench-peers``
  (:func:`benchmarks.peers.outbox`): one psycopg connection, ``executemany`` of 10 rows +
  ``COMMIT`` per transaction, then every row read back by id, 1,000 rows a query
  (:data:`READS` times over, timed together).
* ``P1-txn10``: the engine on the store (``Engine.open("postgresql://...")``), one
  producer, ``begin``, 10 ``txn.send``, ``commit`` (B1-txn10's shape).
* ``P2-consume``: then one consumer drains that topic from the earliest position:
  ``receive(max=1000)`` and a cumulative (durable) ack per batch; :data:`READS` times
  over, a new subscription each, timed together.
* ``P1-txn10-8p``: eight producers (tasks on one engine, one topic) sharing the same
  transactions (B1-txn10-8p's shape).

Targets: P1-txn10 >= 0.8 x P1-outbox, P1-txn10-8p >= 3 x P1-txn10, P2-consume >= 0.5 x
P2-outbox. The workloads are interleaved run by run (the order reversed every other run);
without PostgreSQL's server binaries the group is skipped, saying why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

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
from .peers import drain, outbox, start_bench_cluster

Producer = Callable[[Engine, list[list[bytes]]], Awaitable[None]]

READS = 5
"""Times each side of P2 reads all the messages in a run, timed together (messages read
over the time their reads took): one read of 50,000 took 0.05-0.2 s, short enough that a
neighbour's burst of work decided a run's figure (the outbox's went from 364k to 662k
msg/s between runs on an idle machine). Both sides read as often and are timed alike, so
what is compared stays the same. (Not the fastest of the reads: on a busy machine that
favours the shorter read, which more often runs undisturbed.)"""


async def _engine(
    url: str, producer: Producer, batches: list[list[bytes]], consume: bool
) -> list[float]:
    """Messages/s of ``producer`` on an engine on the store at ``url`` (open and topic
    creation not timed), then, with ``consume``, of one consumer draining the topic."""
    count = sum(map(len, batches))
    async with Engine.open(url, EngineConfig()) as engine:
        await engine.create_topic(TOPIC)
        collect_garbage()
        started = time.perf_counter()
        await producer(engine, batches)
        rates = [count / (time.perf_counter() - started)]
        stats = await engine.stats(TOPIC)
        if stats["entries"] != count + len(batches) or stats["open_txns"]:
            raise AssertionError(f"expected {count} messages in {len(batches)} txns: {stats}")
        if consume:
            took = 0.0
            for n in range(READS):
                collect_garbage()
                took += count / await drain(engine, TOPIC, count, subscription=f"peers-{n}")
            rates.append(READS * count / took)
    return rates


def _outbox(url: str, batches: list[list[bytes]]) -> list[float]:
    """The outbox peer's produce and read-by-id messages/s on the database at ``url``."""
    result = outbox(url, batches, reads=READS)
    return [result.produce, result.consume]


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
        workloads: list[tuple[str, tuple[str, ...], Callable[[str], list[float]]]] = [
            ("outbox", ("P1-outbox", "P2-outbox"), lambda url: _outbox(url, batches)),
            (
                "txn10",
                ("P1-txn10", "P2-consume"),
                lambda url: asyncio.run(_engine(url, txn_producer, batches, True)),
            ),
            (
                "8p",
                ("P1-txn10-8p",),
                lambda url: asyncio.run(_engine(url, txn_producers, batches, False)),
            ),
        ]
        for run in range(settings.runs):
            for tag, ids, workload in workloads[:: -1 if run % 2 else 1]:
                url = cluster.create_database(f"p{run}_{tag}")
                started = time.perf_counter()
                rates = workload(url)
                for figure_id, rate in zip(ids, rates, strict=True):
                    samples.add(figure_id, rate)
                    progress(f"P run {run + 1}/{settings.runs} {figure_id}: {rate:,.0f} msg/s")
                progress(
                    f"P run {run + 1}/{settings.runs} {tag}: {time.perf_counter() - started:.1f} s"
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
