"""F: failover between two servers on one PostgreSQL store (issue 28).

``F1-failover-s``: two ``txnstream serve --store URL`` processes on a fresh database of a
PostgreSQL cluster started as the tests start theirs (``tests/pg_support.py``), with
1,000 topics (10 committed messages each) and 1,000 open transactions (one message
each, begun before the servers start, so the active loaded them). Then ``kill -9`` of
the active, and the seconds until the first successful commit on the standby: the
commit of one of those open transactions, sent straight to the standby every 20 ms
(a standby answers 503 or 307 until it is the active). The servers are the crash
drill's (``ServerFleet``), so the figure measures what ``drill crash --store URL
--servers 2`` exercises.

Target: at most the lease timeout + 2 s (the lease timeout is the servers' default,
5 s: a standby cannot take over before the dead active's lease expires, which is
between 2/3 and all of the lease timeout after its last renewal).
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from txnstream.api import Engine, EngineConfig
from txnstream.api.cli.drills._server import ServerFleet

from .core import Figure, Settings, Target, group, progress, stall_phase

LEASE_TIMEOUT = 5.0
"""The servers' ``--lease-timeout`` (s): the default of ``serve``."""
MESSAGES_PER_TOPIC = 10
PROBE_INTERVAL = 0.02


@contextlib.contextmanager
def _databases() -> Iterator[Callable[[], str]]:
    """A PostgreSQL cluster of its own, durable as the P group's (stopped by pid after;
    :class:`~benchmarks.core.Skipped` without PostgreSQL); yields a maker of fresh
    databases on it (their URLs)."""
    from benchmarks.peers import start_bench_cluster

    with start_bench_cluster() as cluster:
        yield lambda: cluster.create_database(f"f{uuid.uuid4().hex[:12]}", owner="txnstream")


async def _populate(url: str, topics: int, txns: int) -> list[str]:
    """``topics`` topics with committed messages and ``txns`` open transactions, written
    by an embedded engine (which then releases the store's lease); their ids."""
    config = EngineConfig(lease_timeout=LEASE_TIMEOUT)
    async with Engine.open(url, config) as engine:
        names = [f"t{i:04d}" for i in range(topics)]
        for name in names:
            await engine.create_topic(name)
            await engine.send_many(name, [f"m{j}" for j in range(MESSAGES_PER_TOPIC)])
        opened = []
        for i in range(txns):
            txn = await engine.begin(timeout=600, label=f"f1-{i}")
            await txn.send(names[i % topics], f"open-{i}")
            opened.append(str(txn.txn_id))
    return opened


async def _failover(url: str, logs: Path, txns: list[str]) -> tuple[float, float]:
    """Start an active and a standby, kill -9 the active; (seconds until the standby's
    health says ok, seconds until its first successful commit)."""
    fleet = ServerFleet(
        url, 2, logs, lease_timeout=LEASE_TIMEOUT, failover_timeout=LEASE_TIMEOUT + 120
    )
    try:
        await fleet.start()
        active = await fleet.active()
        standby = next(m for m in fleet.members if m is not active)
        async with httpx.AsyncClient(timeout=30.0, trust_env=False) as http:
            commit = f"{standby.url}/v1/transactions/{txns[0]}/commit"
            answer = await http.post(commit)
            if answer.status_code not in (307, 503):
                raise AssertionError(f"the standby answered {answer.status_code}: {answer.text}")
            killed = time.perf_counter()
            active.kill()
            healthy: float | None = None
            while True:
                if healthy is None and await standby.status() == "ok":
                    healthy = time.perf_counter() - killed
                answer = await http.post(commit)
                if answer.status_code == 200:
                    committed = time.perf_counter() - killed
                    break
                if answer.status_code not in (307, 503):
                    raise AssertionError(f"commit on the new active: {answer.text}")
                if time.perf_counter() - killed > LEASE_TIMEOUT + 120:
                    raise AssertionError(f"no commit on the standby; see {fleet.log_path}")
                await asyncio.sleep(PROBE_INTERVAL)
            state = (await http.get(f"{standby.url}/v1/transactions/{txns[-1]}")).json()
            if state.get("state") != "open":
                raise AssertionError(f"an open transaction did not survive: {state}")
        return healthy or committed, committed
    finally:
        await fleet.stop()
        await fleet.close_clients()


@group(
    "F",
    f"failover on a PostgreSQL store: kill -9 of the active, lease timeout {LEASE_TIMEOUT:g} s"
    " (target: lease timeout + 2 s)",
    ["F1-failover-s"],
)
def failover(settings: Settings) -> list[Figure]:
    """F1: seconds from kill -9 of the active to the first commit on the standby."""
    topics = settings.size(1_000, 50)
    txns = settings.size(1_000, 50)
    samples: list[float] = []
    # The servers under test are child processes: this loop only sets up and probes.
    with stall_phase("F harness", watched=False), _databases() as fresh_database:
        for run in range(settings.runs):
            url = fresh_database()
            started = time.perf_counter()
            opened = asyncio.run(_populate(url, topics, txns))
            progress(
                f"F run {run + 1}/{settings.runs}: {topics} topics, {txns} open transactions"
                f" written in {time.perf_counter() - started:.1f} s"
            )
            with tempfile.TemporaryDirectory(prefix="txnstream-bench-f-") as logs:
                healthy, committed = asyncio.run(_failover(url, Path(logs), opened))
            samples.append(committed)
            progress(
                f"F run {run + 1}/{settings.runs} F1-failover-s: {committed:.2f} s"
                f" (standby serving after {healthy:.2f} s)"
            )
    target = Target("<=", LEASE_TIMEOUT + 2.0)
    return [Figure.of("F1-failover-s", samples, "s", target=target)]
