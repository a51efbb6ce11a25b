"""The engine on a PostgreSQL store: the quickstart, transaction (restarts included),
idempotent producer and stable position suites again, with ``data_dir`` (which the
``engine`` fixture opens) a fresh database of a real cluster; and what only a shared
database has: one engine per store, the lease released on close, no split brain after a
takeover, and a PostgreSQL failover (a synchronous replica promoted) that loses nothing
acknowledged."""

from __future__ import annotations

import asyncio
import contextlib

import psycopg
import pytest
from pg_support import Cluster
from support import wait_until
from test_engine_idempotent_producer import *  # noqa: F403 - the same tests, on PostgreSQL
from test_engine_quickstart import *  # noqa: F403
from test_engine_stable_position import *  # noqa: F403
from test_engine_transactions import *  # noqa: F403

from txnstream.api import DataDirLockedError, Engine, EngineError, InvalidArgumentError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def data_dir(pg_url: str) -> str:  # (the tests' annotation says Path: Engine.open takes both)
    return pg_url


async def test_a_second_engine_on_the_store_is_refused_while_the_first_runs(
    data_dir: str,
) -> None:
    async with Engine.open(data_dir) as first:
        await first.create_topic("t")
        await first.send("t", "before")
        with pytest.raises(DataDirLockedError, match="is served by"):
            await Engine.open(data_dir)
    async with Engine.open(data_dir) as second:  # closing released the lease
        sub = await second.subscribe("t", "s")
        assert [m.value for m in await sub.receive(max=10, timeout=0)] == ["before"]


@pytest.mark.parametrize("url", ["mysql://h/db", "s3://bucket/x", "postgresql://h:port/db"])
async def test_a_store_url_the_engine_does_not_know_is_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"store URL scheme|malformed PostgreSQL URL"):
        await Engine.open(url)


async def test_the_suites_here_run_on_postgresql(engine: Engine) -> None:
    assert engine.store_url is not None
    assert type(engine._rt.store).__name__ == "PgStore"
    assert not engine.path.is_absolute()  # no data directory was made


async def test_an_engine_whose_lease_was_taken_over_writes_nothing_more(data_dir: str) -> None:
    """No split brain: an engine paused past its lease (its lease expired, another engine
    took the store over) fails its next write and nothing of it becomes visible; it
    recovers as a standby does, retrying until the lease is free, then serves again."""
    async with Engine.open(data_dir) as a:
        await a.create_topic("t")
        await a.send("t", "a1")
        async with await psycopg.AsyncConnection.connect(data_dir, autocommit=True) as conn:
            await conn.execute("UPDATE leases SET expires_at = clock_timestamp()")  # expired
        async with Engine.open(data_dir) as b:  # takes the store over: epoch 2
            with pytest.raises(EngineError):
                await a.send("t", "a2")
            assert a.health().status == "recovering"
            sub = await b.subscribe("t", "s")
            assert [m.value for m in await sub.receive(max=10, timeout=0)] == ["a1"]
            await b.send("t", "b1")
        # b closed and released the lease: a's recovery takes the store over and loads it
        await wait_until(lambda: _ok(a), 30, "the first engine to serve again")
        sub = await a.subscribe("t", "s")  # b's subscription: a1 unacked, so redelivered
        assert [m.value for m in await sub.receive(max=10, timeout=0)] == ["a1", "b1"]
        await a.send("t", "a3")
        assert [m.value for m in await sub.receive(max=10, timeout=1)] == ["a3"]


async def _ok(engine: Engine) -> bool:
    return engine.health().status == "ok"


async def test_a_postgresql_failover_keeps_every_acknowledged_write(
    pg_own_cluster: Cluster,
) -> None:
    """A synchronous streaming replica; the primary killed while a producer sends, the
    replica promoted: through a multi-host URL the engine finds the new primary, and every
    send that returned is there."""
    primary = pg_own_cluster
    primary.create_database("store", owner="txnstream")
    replica = await asyncio.to_thread(primary.add_replica, "replica1", True)
    url = (
        f"postgresql://txnstream@127.0.0.1:{primary.port},127.0.0.1:{replica.port}/store"
        "?target_session_attrs=read-write&connect_timeout=2"
    )
    acknowledged: list[int] = []
    async with Engine.open(url) as engine:
        await engine.create_topic("t")

        async def produce() -> None:
            n = 0
            while True:
                try:
                    await engine.send("t", n)
                except EngineError:  # during the failover: not acknowledged, sent again
                    await asyncio.sleep(0.05)
                    continue
                acknowledged.append(n)
                n += 1

        producer = asyncio.create_task(produce())
        try:
            await wait_until(lambda: _at_least(acknowledged, 20), 30, "sends before the kill")
            await asyncio.to_thread(primary.kill)
            await asyncio.to_thread(replica.promote)
            before = len(acknowledged)
            await wait_until(
                lambda: _at_least(acknowledged, before + 20), 60, "sends on the new primary"
            )
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer
        sub = await engine.subscribe("t", "check")
        got = [m.value for m in await sub.receive(max=10_000, timeout=0)]
    assert set(acknowledged) <= set(got)  # no acknowledged send lost
    # in order; a send that failed in doubt may be there twice (the producer sent it again)
    assert list(dict.fromkeys(got)) == sorted(set(got))
    assert len(got) - len(set(got)) <= 1


async def _at_least(items: list[int], n: int) -> bool:
    return len(items) >= n
