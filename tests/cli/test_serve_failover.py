"""Several ``serve --store postgresql://...`` processes on one database (issue 28, "several
servers, one active, failover"): real servers, a real PostgreSQL cluster, processes
killed and paused by pid, under a transactional load from the HTTP client given both
URLs and checked by the crash drill's history checker."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console
from serve_support import StoreServer
from support import free_port, run_serve, wait_for

from txnstream.api.cli.drills._history import History, Sent, TxnRun, check_history
from txnstream.api.cli.drills._workload import Workload
from txnstream.api.client import AsyncClient, Client

pytestmark = pytest.mark.timeout(120)

LEASE = 1.0
"""The servers' --lease-timeout (s): short, so each test is."""
MARGIN = 6.0
"""Seconds past the lease timeout a takeover may take (a loaded 2-core machine)."""

CHECKS = (
    "committed messages in final read_committed fetch",
    "no aborted/abandoned message in final fetch",
    "in-doubt commits all-or-nothing, as the server decided",
    "per-producer commit order in the log",
    "each message once in the log, where it was delivered",
    "transaction ids never reused",
    "every transaction decided at the end",
)
"""The history checks that apply without consumers (this load only produces)."""


def _server(store: str, log: Path) -> StoreServer:
    return StoreServer(store, log, "--host", "127.0.0.1", "--log-level", "info", lease=LEASE)


@pytest.fixture
def pair(pg_url: str, tmp_path: Path) -> Any:
    """An active (first) and a standby (second) on one fresh database."""
    servers: list[StoreServer] = []
    try:
        a = _server(pg_url, tmp_path / "a.log")
        servers.append(a)
        a.wait_status("ok")
        b = _server(pg_url, tmp_path / "b.log")
        servers.append(b)
        b.wait_status("standby")
        yield a, b
    finally:
        for server in servers:
            server.stop()


def test_data_and_store_are_exclusive_and_a_store_must_be_postgresql(tmp_path: Path) -> None:
    both = run_serve("--data", str(tmp_path / "d"), "--store", "postgresql://u@127.0.0.1:1/db")
    assert both.returncode == 2
    assert "--data and --store are exclusive" in both.stderr
    other = run_serve("--store", "mysql://u@127.0.0.1/db")
    assert (other.returncode, "not a postgresql:// URL" in other.stderr) == (2, True)
    assert not (tmp_path / "d").exists()


def test_txnstream_store_names_the_store(tmp_path: Path) -> None:
    url = f"postgresql://nobody:secret@127.0.0.1:{free_port()}/db?connect_timeout=2"
    r = run_serve("--lease-timeout", "1", env={"TXNSTREAM_STORE": url})
    assert r.returncode == 3, r.stderr  # it tried the store (nobody listens there)
    assert "cannot open postgresql://nobody:***@127.0.0.1" in r.stderr
    assert "secret" not in r.stderr


def test_a_standby_redirects_to_the_active_and_takes_over_when_it_is_killed(pair: Any) -> None:
    a, b = pair
    status, body, headers = b.health()
    assert (status, body) == (503, {"status": "standby", "active": a.url})
    assert headers["txnstream-role"] == "standby"
    # every other route: 307 to the same path and query on the active's advertised URL,
    # whatever Host the request named
    r = httpx.get(
        f"{b.url}/v1/topics/t/messages?position=earliest&max=5",
        headers={"Host": "evil.example"},
        trust_env=False,
    )
    assert r.status_code == 307, r.text
    assert r.headers["location"] == f"{a.url}/v1/topics/t/messages?position=earliest&max=5"
    assert r.headers["txnstream-role"] == "standby"
    assert (a.metric("txnstream_active"), b.metric("txnstream_active")) == (1, 0)
    assert b.metric("txnstream_failovers_total") == 0
    # the client given both URLs, the standby's first, reaches the active
    with Client(f"{b.url},{a.url}", trust_env=False) as client:
        assert client.create_topic("t") is True
    a.signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    took = b.wait_status("ok", LEASE + MARGIN)
    assert took <= LEASE + MARGIN
    assert b.metric("txnstream_active") == 1
    assert b.metric("txnstream_failovers_total") == 1
    assert httpx.get(f"{b.url}/v1/topics", trust_env=False).json()["topics"] == ["t"]


async def _load(urls: str, stop: asyncio.Event, history: History, run: str) -> Workload:
    """Transactional producers (commit, abort, abandon) through a client given every
    server's URL, recorded in ``history`` until ``stop``; returns the workload."""
    client = AsyncClient(urls, timeout=15.0, failover_timeout=15.0, trust_env=False)

    class _Servers:  # what the drill's workload asks of its server
        up = asyncio.Event()

    servers = _Servers()
    servers.client = client  # type: ignore[attr-defined]
    servers.up.set()
    topics = ["f1", "f2"]
    workload = Workload(
        servers,  # type: ignore[arg-type]
        history,
        run=run,
        topics=topics,
        seed=7,
        duration=0,
        kills=0,
        producers=3,
        err=Console(stderr=True, quiet=True),
    )
    for topic in topics:
        await client.create_topic(topic)

    async def worker(n: int) -> None:
        ordinal = 0
        while not stop.is_set():
            ordinal += 1
            plan = ("commit", "commit", "abort", "abandon")[ordinal % 4]
            key = f"{run}.w{n}.{ordinal}"
            txn = TxnRun(key, n, ordinal, plan)
            groups: dict[str, list[Sent]] = {}
            for i in range(3):
                topic = topics[i % 2]
                groups.setdefault(topic, []).append(
                    Sent(f"{key}.{i}", topic, f"w{n}", (ordinal, i), txn)
                )
            await workload._one_txn(client, txn, groups)
            await asyncio.sleep(0.01)

    workload.tasks = [asyncio.create_task(worker(n)) for n in range(3)]  # type: ignore[attr-defined]
    return workload


async def _settle(workload: Workload) -> list[str]:
    """Stop the load, wait for every transaction to end, read back; the failed checks."""
    await asyncio.gather(*workload.tasks)  # type: ignore[attr-defined]
    await workload._wait_decided()
    await workload._final_fetch()
    await workload.child.client.close()
    checks = {c.name: c for c in check_history(workload.history, [])}
    committed = [t for t in workload.history.txns if t.outcome == "committed"]
    assert len(committed) >= 10, "too little load to show anything"
    return [f"{name}: {checks[name].detail}" for name in CHECKS if not checks[name].ok]


async def test_kill_9_of_the_active_under_load_loses_nothing(pair: Any) -> None:
    a, b = pair
    stop = asyncio.Event()
    history = History()
    workload = await _load(f"{a.url},{b.url}", stop, history, f"k{uuid.uuid4().hex[:6]}")
    await _committed_at_least(history, 10)
    a.signal(signal.SIGKILL)
    killed = time.monotonic()
    await asyncio.to_thread(a.proc.wait, 10)
    await asyncio.to_thread(b.wait_status, "ok", LEASE + MARGIN)
    assert time.monotonic() - killed <= LEASE + MARGIN
    before = len(history.txns)
    await _committed_at_least(history, sum(t.outcome == "committed" for t in history.txns) + 10)
    assert len(history.txns) > before
    stop.set()
    assert await _settle(workload) == []


async def test_a_paused_active_writes_nothing_after_the_standby_took_over(pair: Any) -> None:
    a, b = pair
    stop = asyncio.Event()
    history = History()
    workload = await _load(f"{a.url},{b.url}", stop, history, f"p{uuid.uuid4().hex[:6]}")
    await _committed_at_least(history, 10)
    a.signal(signal.SIGSTOP)
    paused = time.monotonic()
    # a request that reaches the paused active: it is served only after SIGCONT
    late = asyncio.create_task(
        asyncio.to_thread(
            httpx.post,
            f"{a.url}/v1/topics/f1/messages",
            json={"messages": [{"value": {"id": "from-the-old-active"}}]},
            timeout=30.0,
            trust_env=False,
        )
    )
    await asyncio.to_thread(b.wait_status, "ok", LEASE + MARGIN)
    await asyncio.sleep(max(0.0, paused + 2 * LEASE - time.monotonic()))
    a.signal(signal.SIGCONT)
    answer = await late
    assert answer.status_code in (307, 503), answer.text  # never 200: it was fenced
    await asyncio.to_thread(a.wait_status, "standby", 10)

    def names_the_active() -> bool:  # (once its first lease read as a standby is in)
        health = a.health()
        return health is not None and health[1].get("active") is not None

    await asyncio.to_thread(wait_for, names_the_active, 10, "the new active named")
    status, body, headers = a.health()
    assert (status, body["active"], headers["txnstream-role"]) == (503, b.url, "standby")
    assert a.metric("txnstream_active") == 0
    await _committed_at_least(history, sum(t.outcome == "committed" for t in history.txns) + 10)
    stop.set()
    assert await _settle(workload) == []
    log = [entry.id for entries in history.log_entries.values() for entry in entries]
    assert "from-the-old-active" not in log


async def _committed_at_least(history: History, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(t.outcome == "committed" for t in history.txns) < count:
        assert time.monotonic() < deadline, f"fewer than {count} commits in {timeout} s"
        await asyncio.sleep(0.05)
