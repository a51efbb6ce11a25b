"""X1: does the per-message cost stay flat as the engine's state grows?

Each figure is the per-message cost of a workload with a lot of state, divided by the
same workload's cost in the smallest case (1.0 = no growth; the issue's target is at
most 1.5). The workloads run on the default, durable configuration; the large state is
set up beforehand (not timed) and each run uses a fresh data directory.

* ``X1-topics``: one producer, transactions of 10 messages, each transaction on the next
  of T topics in turn (T = 10,000; quick: 1,000), vs all on one topic. The T topics are
  created with ``durability="normal"`` (setup only), then the engine is reopened with
  the default configuration, which recovers all T topics.
* ``X1-open-txns``: the same transactions on one topic while O other transactions stay
  open on that topic, each with one message (O = 10,000; quick: 1,000), vs none.
* ``X1-subs``: S subscriptions on one topic (S = 100; quick: 10) holding the same
  messages (written before, in transactions of 10), one consumer task each
  (``receive(max=1000)`` + cumulative ack) draining them all at once; the cost is the
  drain time per delivery (message x subscription), vs one subscription.

The ``X1-*-us`` figures are the per-message costs in microseconds behind the ratios.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from txnstream.api import Engine, EngineConfig, SubscriptionHandle

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

TXN_SIZE = 10
_VALUES = make_values(1000)


async def _produce(engine: Engine, topics: list[str], count: int) -> None:
    """``count`` messages in transactions of 10, topic by topic in turn."""
    for n, start in enumerate(range(0, count, TXN_SIZE)):
        topic = topics[n % len(topics)]
        txn = await engine.begin()
        for i in range(TXN_SIZE):
            await txn.send(topic, _VALUES[(start + i) % len(_VALUES)])
        await txn.commit()


async def _topics_cost(path: Path, topics: int, count: int) -> float:
    names = [f"x1-{i}" for i in range(topics)]
    async with Engine.open(path, EngineConfig(durability="normal")) as engine:
        for name in names:
            await engine.create_topic(name)
    async with Engine.open(path, EngineConfig()) as engine:  # recovers every topic
        collect_garbage()
        started = time.perf_counter()
        await _produce(engine, names, count)
        return (time.perf_counter() - started) / count


async def _open_txns_cost(path: Path, open_txns: int, count: int) -> float:
    async with Engine.open(path, EngineConfig()) as engine:
        await engine.create_topic("x1")
        held = []
        for n in range(open_txns):
            txn = await engine.begin(timeout=engine.config.max_txn_timeout)
            await txn.send("x1", _VALUES[n % len(_VALUES)])
            held.append(txn)
            if n % 100 == 99:
                # begin and a pipelined send never suspend: this setup loop would hold the
                # loop for thousands of them at once (L1 would time this harness, not the
                # engine); a server's requests each take their own loop steps
                await asyncio.sleep(0)
        await engine._rt.store.flush()
        collect_garbage()
        started = time.perf_counter()
        await _produce(engine, ["x1"], count)
        cost = (time.perf_counter() - started) / count
        stats = await engine.stats("x1")
        if stats["open_txns"] != open_txns:
            raise AssertionError(f"X1: {stats['open_txns']} open, expected {open_txns}")
        await engine.finish(abort=[t.id for t in held])
        return cost


async def _subs_cost(path: Path, subscriptions: int, count: int) -> float:
    async with Engine.open(path, EngineConfig()) as engine:
        await engine.create_topic("x1")
        handles = [
            await engine.subscribe("x1", f"sub-{i}", initial_position="earliest")
            for i in range(subscriptions)
        ]
        await _produce(engine, ["x1"], count)

        async def consume(sub: SubscriptionHandle) -> None:
            received = 0
            while received < count:
                messages = await sub.receive(max=1000, timeout=30.0)
                if not messages:
                    raise AssertionError("X1-subs: a consumer waited 30 s for nothing")
                received += len(messages)
                await sub.ack(messages[-1].position, cumulative=True)

        collect_garbage()
        started = time.perf_counter()
        async with asyncio.TaskGroup() as tasks:
            for sub in handles:
                tasks.create_task(consume(sub))
        return (time.perf_counter() - started) / (count * subscriptions)


@group(
    "X1",
    "per-message cost as topics, open transactions and subscriptions grow",
    [
        "X1-topics",
        "X1-open-txns",
        "X1-subs",
        "X1-topics-us",
        "X1-open-txns-us",
        "X1-subs-us",
        "X1-base-us",
        "X1-subs-base-us",
    ],
)
def scale(settings: Settings) -> list[Figure]:
    """X1 figures: cost ratios at scale, and the per-message costs behind them."""
    topics = settings.size(10_000, 1_000)
    open_txns = settings.size(10_000, 1_000)
    subs = settings.size(100, 10)
    count = settings.size(20_000, 5_000)
    sub_count = settings.size(5_000, 2_000)
    samples = Samples()
    for run in range(settings.runs):
        for figure_id, make in (
            ("X1-base-us", lambda p: _topics_cost(p, 1, count)),
            ("X1-topics-us", lambda p: _topics_cost(p, topics, count)),
            ("X1-open-txns-us", lambda p: _open_txns_cost(p, open_txns, count)),
            ("X1-subs-base-us", lambda p: _subs_cost(p, 1, sub_count)),
            ("X1-subs-us", lambda p: _subs_cost(p, subs, sub_count)),
        ):
            with fresh_dir("x1") as path:
                cost = asyncio.run(make(path)) * 1e6
            samples.add(figure_id, cost)
            progress(f"X1 run {run + 1}/{settings.runs} {figure_id}: {cost:.1f} us/msg")
        base, sub_base = samples["X1-base-us"][-1], samples["X1-subs-base-us"][-1]
        samples.add("X1-topics", samples["X1-topics-us"][-1] / base)
        samples.add("X1-open-txns", samples["X1-open-txns-us"][-1] / base)
        samples.add("X1-subs", samples["X1-subs-us"][-1] / sub_base)
    target = Target("<=", 1.5)
    return [
        Figure.of("X1-topics", samples["X1-topics"], "x", target=target),
        Figure.of("X1-open-txns", samples["X1-open-txns"], "x", target=target),
        Figure.of("X1-subs", samples["X1-subs"], "x", target=target),
        Figure.of("X1-topics-us", samples["X1-topics-us"], "us", baseline="X1-base-us"),
        Figure.of("X1-open-txns-us", samples["X1-open-txns-us"], "us", baseline="X1-base-us"),
        Figure.of("X1-subs-us", samples["X1-subs-us"], "us", baseline="X1-subs-base-us"),
        Figure.of("X1-base-us", samples["X1-base-us"], "us"),
        Figure.of("X1-subs-base-us", samples["X1-subs-base-us"], "us"),
    ]
