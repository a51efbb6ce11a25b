"""M1: memory of a real server under a steady transactional load (issue 10's soak).

64 HTTP clients each loop begin -> produce 2 -> commit (every fourth aborts), while one
consumer long-polls and acks, for ``duration`` seconds against ``txnstream serve``. The
server's RSS (``/proc/<pid>/status`` VmRSS) is sampled every second; the figure is its
growth from the end of the warm-up (the first third) to the end: a server that keeps
state per ended transaction grows the whole time, a bounded one stays flat.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

from benchmarks.core import Figure, Settings, Target, group, progress
from benchmarks.http_support import Client, server_process, txnstream_argv

CLIENTS = 64


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def _producer(client: Client, topic: str, deadline: float, done: list[int]) -> None:
    n = 0
    while time.monotonic() < deadline:
        txn = (await client.json("POST", "/v1/transactions", {"timeout_ms": 60000}, expect=201))[
            "txn"
        ]
        body = {"txn": txn, "messages": [{"value": n}, {"value": "x" * 100}]}
        await client.json("POST", f"/v1/topics/{topic}/messages", body)
        action = "abort" if n % 4 == 3 else "commit"
        await client.json("POST", f"/v1/transactions/{txn}/{action}")
        n += 1
    done.append(n)


async def _consumer(client: Client, topic: str, deadline: float) -> None:
    base = f"/v1/topics/{topic}/subscriptions/soak"
    await client.json("PUT", base, {"type": "shared"}, expect=201)
    while time.monotonic() < deadline:
        got = await client.json("GET", f"{base}/messages?consumer=c&max=1000&wait_ms=200")
        if got["messages"]:
            last = got["messages"][-1]["position"]
            await client.json("POST", f"{base}/ack", {"positions": [last], "cumulative": True})


async def _soak(url: str, pid: int, duration: float) -> tuple[float, float, float]:
    """(RSS after warm-up MB, RSS at the end MB, transactions per second)."""
    topic = "soak"
    deadline = time.monotonic() + duration
    async with Client(url, size=CLIENTS + 1) as client:
        await client.json("PUT", f"/v1/topics/{topic}", expect=201)
        done: list[int] = []
        tasks = [
            asyncio.create_task(_producer(client, topic, deadline, done)) for _ in range(CLIENTS)
        ]
        tasks.append(asyncio.create_task(_consumer(client, topic, deadline)))
        samples: list[tuple[float, float]] = []
        started = time.monotonic()
        try:
            while time.monotonic() < deadline:
                await asyncio.sleep(1.0)
                samples.append((time.monotonic() - started, _rss_mb(pid)))
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    warm = [rss for at, rss in samples if at <= duration / 3]
    end = [rss for _, rss in samples[-3:]]
    return warm[-1], max(end), sum(done) / duration


@group(
    "M1",
    "server RSS growth under a 64-client transactional soak",
    ["M1-rss-growth-mb", "M1-txn-rate"],
)
def m1(settings: Settings) -> list[Figure]:
    duration = 20.0 if settings.quick else 180.0
    growth: list[float] = []
    rates: list[float] = []
    for run in range(1 if settings.quick else settings.runs):
        with tempfile.TemporaryDirectory() as tmp:
            log = Path(tmp) / "server.log"
            with server_process(
                "txnstream", txnstream_argv(Path(tmp) / "data"), "/v1/health", log
            ) as server:
                warm, end, rate = asyncio.run(_soak(server.url, server.proc.pid, duration))
        growth.append(end - warm)
        rates.append(rate)
        progress(
            f"M1 run {run + 1}: RSS {warm:.1f} MB after warm-up, {end:.1f} MB at the end"
            f" ({end - warm:+.1f} MB) over {duration:.0f} s, {rate:,.0f} txn/s"
        )
    return [
        Figure.of("M1-rss-growth-mb", growth, "MB", target=Target("<=", 20.0)),
        Figure.of("M1-txn-rate", rates, "txn/s"),
    ]


if __name__ == "__main__":  # a quick look: python -m benchmarks.m_soak
    print(json.dumps([f.id for f in m1(Settings(quick=True))]))
