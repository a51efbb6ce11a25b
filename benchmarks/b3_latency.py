"""B3: commit-to-delivery latency to a waiting read_committed subscriber.

A consumer task waits in ``receive(max=100, timeout=10)`` (acking each batch
cumulatively) while the producer, one transaction at a time, begins, sends one 100-byte
message and commits. The latency is from just before ``commit()`` is called to the
moment the consumer's ``receive`` returned the message. The producer waits for each
delivery before the next transaction. A few warm-up transactions are not counted.
p50 and p99 per run; the figures are the medians over the runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
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
    percentile,
    progress,
)

TOPIC = "bench"
WARMUP = 10
_INDEX_BYTES = 8


async def measure_latencies(path: Path, iterations: int) -> list[float]:
    """Commit-to-delivery latencies in ms of ``iterations`` one-message transactions."""
    filler = make_values(1, VALUE_SIZE - _INDEX_BYTES)[0]
    async with Engine.open(path, EngineConfig()) as engine:
        await engine.create_topic(TOPIC)
        sub = await engine.subscribe(TOPIC, "latency", isolation="read_committed")
        loop = asyncio.get_running_loop()
        arrivals: dict[int, asyncio.Future[float]] = {}

        async def consume() -> None:
            while True:
                messages = await sub.receive(max=100, timeout=10.0)
                now = time.perf_counter()
                for message in messages:
                    waiting = arrivals.get(int.from_bytes(message.value[:_INDEX_BYTES], "big"))
                    if waiting is not None and not waiting.done():
                        waiting.set_result(now)
                if messages:
                    await sub.ack(messages[-1].position, cumulative=True)

        consumer = asyncio.create_task(consume(), name="b3-consumer")
        latencies: list[float] = []
        collect_garbage()
        try:
            for i in range(WARMUP + iterations):
                arrival = arrivals[i] = loop.create_future()
                txn = await engine.begin()
                await txn.send(TOPIC, i.to_bytes(_INDEX_BYTES, "big") + filler)
                started = time.perf_counter()
                await txn.commit()
                arrived = await asyncio.wait_for(arrival, timeout=10.0)
                del arrivals[i]
                if i >= WARMUP:
                    latencies.append((arrived - started) * 1000)
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
    return latencies


@group("B3", "commit-to-delivery latency", ["B3-p50", "B3-p99"])
def latency(settings: Settings) -> list[Figure]:
    """B3 figures: p50 and p99 commit-to-delivery latency in ms."""
    iterations = settings.size(300, 50)
    samples = Samples()
    for run in range(settings.runs):
        with fresh_dir("b3") as path:
            latencies = asyncio.run(measure_latencies(path, iterations))
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        samples.add("B3-p50", p50)
        samples.add("B3-p99", p99)
        progress(
            f"B3 run {run + 1}/{settings.runs}: p50 {p50:.2f} ms, p99 {p99:.2f} ms,"
            f" max {max(latencies):.2f} ms ({iterations} commits)"
        )
    return [
        Figure.of("B3-p50", samples["B3-p50"], "ms"),
        Figure.of("B3-p99", samples["B3-p99"], "ms", target=Target("<=", 20.0)),
    ]
