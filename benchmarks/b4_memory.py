"""B4: memory of one huge transaction, in a child process of its own.

Each run starts ``python -m benchmarks.b4_memory`` so the RSS measured is not polluted
by the other workloads. The child opens an engine on a fresh data directory and:

1. ``B4-engine-mb``: sends 1,000,000 messages (quick: 100,000) of 100 bytes in ONE
   transaction (``txn.send_many`` calls of 1,000, pipelined) and commits. The figure is
   the peak RSS during sending and committing minus the RSS just before ``begin``.
2. ``B4-subscriber-mb``: a read_committed subscription drains them (``receive(max=1000)``
   + one cumulative ack per batch). The figure is the peak RSS while draining minus the
   RSS just before the first ``receive``.

RSS is ``VmRSS`` from ``/proc/self/status``; the peak is ``VmHWM`` after resetting it
through ``/proc/self/clear_refs``, combined with RSS samples taken every 10 batches
(the only source where ``clear_refs`` is unavailable). Each phase's starting RSS is
taken after ``gc.collect()`` and glibc's ``malloc_trim(0)``, so memory the previous
phase freed but kept resident does not hide the next phase's growth. Memory invariant 7
of DESIGN.md: neither side may hold O(messages in a transaction). The growth includes
SQLite's page caches, which are bounded by the store's ``cache_size`` pragmas.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from txnstream.api import Engine, EngineConfig

from .core import (
    REPO_ROOT,
    Figure,
    Samples,
    Settings,
    Target,
    fresh_dir,
    group,
    make_values,
    peak_rss_mb,
    progress,
    release_free_memory,
    reset_peak_rss,
    rss_mb,
)

TOPIC = "bench"
SEND_BATCH = 1000
RECEIVE_MAX = 1000
_SAMPLE_EVERY = 10


class _Peak:
    """The peak RSS of one phase: VmHWM since a reset, plus explicit samples."""

    def __init__(self) -> None:
        release_free_memory()
        self.start = rss_mb()
        self.hwm_available = reset_peak_rss()
        self.sampled = self.start

    def sample(self) -> None:
        self.sampled = max(self.sampled, rss_mb())

    def growth(self) -> float:
        self.sample()
        hwm = peak_rss_mb() if self.hwm_available else None
        return max(self.sampled, hwm or 0.0) - self.start


async def measure(messages: int) -> dict[str, Any]:
    """Run both phases on a fresh engine; the growths in MiB and some context."""
    values = make_values(SEND_BATCH)
    with fresh_dir("b4") as path:
        async with Engine.open(path, EngineConfig()) as engine:
            await engine.create_topic(TOPIC)
            peak = _Peak()
            engine_start = peak.start
            started = time.perf_counter()
            txn = await engine.begin(timeout=engine.config.max_txn_timeout)
            for n, _ in enumerate(range(0, messages, SEND_BATCH)):
                await txn.send_many(TOPIC, values)
                if n % _SAMPLE_EVERY == 0:
                    peak.sample()
            await txn.commit()
            engine_growth = peak.growth()
            send_seconds = time.perf_counter() - started

            sub = await engine.subscribe(TOPIC, "drain", isolation="read_committed")
            peak = _Peak()
            started = time.perf_counter()
            received = batches = 0
            while received < messages:
                batch = await sub.receive(max=RECEIVE_MAX, timeout=5.0)
                if not batch:
                    break
                received += len(batch)
                await sub.ack(batch[-1].position, cumulative=True)
                batches += 1
                if batches % _SAMPLE_EVERY == 0:
                    peak.sample()
            subscriber_growth = peak.growth()
            drain_seconds = time.perf_counter() - started
    if received != messages:
        raise AssertionError(f"subscriber received {received} of {messages} messages")
    return {
        "engine_mb": engine_growth,
        "subscriber_mb": subscriber_growth,
        "rss_before_send_mb": engine_start,
        "rss_before_drain_mb": peak.start,
        "send_msg_per_s": messages / send_seconds,
        "drain_msg_per_s": messages / drain_seconds,
        "hwm": peak.hwm_available,
    }


def run_child(messages: int) -> dict[str, Any]:
    """One measurement in a fresh interpreter; its JSON result."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.b4_memory", "--messages", str(messages)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@group("B4", "memory of a 1M-message transaction", ["B4-engine-mb", "B4-subscriber-mb"])
def memory(settings: Settings) -> list[Figure]:
    """B4 figures: RSS growth of the engine (send + commit) and of the subscriber (drain)."""
    messages = settings.size(1_000_000, 100_000)
    samples = Samples()
    for run in range(settings.runs):
        result = run_child(messages)
        samples.add("B4-engine-mb", result["engine_mb"])
        samples.add("B4-subscriber-mb", result["subscriber_mb"])
        progress(
            f"B4 run {run + 1}/{settings.runs}: engine +{result['engine_mb']:.1f} MB"
            f" (sent {result['send_msg_per_s']:,.0f} msg/s), subscriber"
            f" +{result['subscriber_mb']:.1f} MB (drained {result['drain_msg_per_s']:,.0f} msg/s)"
            f" ({messages:,} msgs)"
        )
    return [
        Figure.of("B4-engine-mb", samples["B4-engine-mb"], "MB", target=Target("<=", 50.0)),
        Figure.of("B4-subscriber-mb", samples["B4-subscriber-mb"], "MB", target=Target("<=", 50.0)),
    ]


def main() -> None:
    """Child entry point: measure and print one JSON line."""
    parser = argparse.ArgumentParser(description="B4 memory measurement (child process)")
    parser.add_argument("--messages", type=int, required=True)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.messages))), flush=True)


if __name__ == "__main__":
    main()
