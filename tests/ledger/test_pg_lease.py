"""The PostgreSQL lease and its fencing, on a real cluster: one winner, takeover after the
expiry with the next epoch, and no write of an old epoch ever visible after a takeover."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
from pg_support import waiting_on_a_lock
from support import wait_until

from txnstream.ledger import LeaseLostError
from txnstream.ledger._pg_lease import (
    FENCE_SQL,
    STORE_SCOPE,
    Lease,
    as_lease_lost,
    create_lease_schema,
    fence,
    read_lease,
)

pytestmark = pytest.mark.timeout(60)

Conn = psycopg.AsyncConnection[Any]
Connect = Callable[[], Awaitable[Conn]]


@pytest.fixture
async def connect(pg_url: str) -> AsyncIterator[Connect]:
    """Opens autocommit connections to a fresh database with the lease schema."""
    opened: list[Conn] = []

    async def open_one() -> Conn:
        conn = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
        opened.append(conn)
        return conn

    setup = await open_one()
    await create_lease_schema(setup)
    await setup.execute("CREATE TABLE writes (n int PRIMARY KEY, epoch bigint NOT NULL)")
    yield open_one
    for conn in opened:
        await conn.close()


async def written(conn: Conn) -> list[tuple[int, int]]:
    cur = await conn.execute("SELECT n, epoch FROM writes ORDER BY n")
    return [(int(n), int(epoch)) for n, epoch in await cur.fetchall()]


async def write(conn: Conn, epoch: int, n: int) -> None:
    """A write transaction as the store makes them: the fence first, then the writes."""
    async with conn.transaction():
        await fence(conn, {STORE_SCOPE: epoch})
        await conn.execute("INSERT INTO writes VALUES (%s, %s)", (n, epoch))


async def pipelined_write(conn: Conn, epoch: int, ns: list[int]) -> None:
    """The same sent as the group commit sends it: fence, writes and COMMIT pipelined."""
    async with conn.pipeline(), conn.transaction():
        await conn.execute(FENCE_SQL, (STORE_SCOPE, epoch))
        for n in ns:
            await conn.execute("INSERT INTO writes VALUES (%s, %s)", (n, epoch))


async def expired(conn: Conn) -> None:
    """Wait (bounded) until the store's lease has expired on the database's clock."""

    async def is_free() -> bool:
        state = await read_lease(conn)
        return state is not None and state.free

    await wait_until(is_free, 10, "the lease to expire")


async def test_of_many_contenders_exactly_one_wins(connect: Connect) -> None:
    conns = [await connect() for _ in range(6)]
    leases = [Lease(f"server-{i}", f"http://127.0.0.1:{8000 + i}", ttl=30) for i in range(6)]
    won = await asyncio.gather(
        *(lease.try_acquire(c) for lease, c in zip(leases, conns, strict=True))
    )
    assert sum(won) == 1
    winner = leases[won.index(True)]
    assert winner.epoch == 1
    assert winner.held
    state = await read_lease(conns[0])
    assert state is not None
    assert (state.scope, state.epoch, state.holder) == (STORE_SCOPE, 1, winner.holder)
    assert state.active_url == winner.url
    assert not state.free
    assert (state.expires_at - state.acquired_at).total_seconds() == pytest.approx(30)
    # the losers hold nothing and stay out while the lease runs
    assert [lease.epoch for lease in leases if lease is not winner] == [None] * 5
    assert not await leases[0 if winner is not leases[0] else 1].try_acquire(conns[0])


async def test_after_the_expiry_another_takes_over_with_the_next_epoch(connect: Connect) -> None:
    a_conn, b_conn = await connect(), await connect()
    a = Lease("a", "http://a", ttl=0.3)
    b = Lease("b", "http://b", ttl=30)
    assert await a.try_acquire(a_conn)
    assert not await b.try_acquire(b_conn)
    await write(a_conn, 1, 1)
    await expired(b_conn)
    assert await b.try_acquire(b_conn)
    assert (a.epoch, b.epoch) == (1, 2)
    state = await read_lease(a_conn)
    assert state is not None
    assert (state.holder, state.active_url) == ("b", "http://b")
    # the old active learns it lost the lease; its writes fail and write nothing
    assert not await a.renew(a_conn)
    assert a.epoch is None
    assert not a.held
    assert not await a.renew(a_conn)
    with pytest.raises(LeaseLostError):
        await write(a_conn, 1, 2)
    with pytest.raises(LeaseLostError, match="does not hold"):
        await a.fence(a_conn)
    await write(b_conn, 2, 3)
    assert await written(b_conn) == [(1, 1), (3, 2)]
    assert await b.renew(b_conn)


async def test_a_write_of_the_old_epoch_after_a_takeover_fails_and_writes_nothing(
    connect: Connect,
) -> None:
    a_conn, b_conn = await connect(), await connect()
    a, b = Lease("a", None, ttl=0.2), Lease("b", None, ttl=30)
    assert await a.try_acquire(a_conn)
    await expired(b_conn)
    assert await b.try_acquire(b_conn)
    await pipelined_write(b_conn, 2, [10])  # the same, of the current epoch, goes through
    # a (paused past its lease, say) still believes it holds epoch 1
    with pytest.raises(LeaseLostError) as lost:
        await write(a_conn, 1, 1)
    assert (lost.value.scope, lost.value.epoch) == (STORE_SCOPE, 1)
    assert "epoch 2" in str(lost.value)
    assert lost.value.retriable
    # pipelined as the group commit sends it (fence, writes, COMMIT in one round trip):
    # the fence fails on the server, the writes after it are skipped, nothing commits
    with pytest.raises(psycopg.Error) as failed:
        await pipelined_write(a_conn, 1, [2, 3])
    assert isinstance(as_lease_lost(failed.value, {STORE_SCOPE: 1}), LeaseLostError)
    assert await written(b_conn) == [(10, 2)]


async def test_a_writer_that_locked_the_lease_first_commits_before_the_takeover(
    connect: Connect,
) -> None:
    a_conn, b_conn, observer = await connect(), await connect(), await connect()
    a, b = Lease("a", None, ttl=0.2), Lease("b", None, ttl=30)
    assert await a.try_acquire(a_conn)
    async with a_conn.transaction():
        await a.fence(a_conn)  # holds the lease row FOR SHARE until this transaction ends
        await a_conn.execute("INSERT INTO writes VALUES (1, 1)")
        await expired(observer)
        takeover = asyncio.create_task(b.try_acquire(b_conn))
        try:
            await wait_until(
                lambda: waiting_on_a_lock(observer, b_conn.info.backend_pid),
                10,
                "the takeover to wait",
            )
            assert not takeover.done()
        except BaseException:
            takeover.cancel()
            raise
    # a committed: only now does the takeover go through, after a's write
    assert await asyncio.wait_for(takeover, 10)
    assert b.epoch == 2
    assert await written(b_conn) == [(1, 1)]


async def test_a_writer_behind_a_takeover_waits_for_it_then_fails(connect: Connect) -> None:
    a_conn, b_conn, observer = await connect(), await connect(), await connect()
    a, b = Lease("a", None, ttl=0.2), Lease("b", None, ttl=30)
    assert await a.try_acquire(a_conn)
    await expired(observer)
    async with b_conn.transaction():
        assert await b.try_acquire(b_conn)  # the takeover, not committed yet
        writer = asyncio.create_task(write(a_conn, 1, 1))
        try:
            await wait_until(
                lambda: waiting_on_a_lock(observer, a_conn.info.backend_pid),
                10,
                "the writer's fence to wait",
            )
            assert not writer.done()
        except BaseException:
            writer.cancel()
            raise
    with pytest.raises(LeaseLostError):
        await asyncio.wait_for(writer, 10)
    assert await written(observer) == []


async def test_a_released_lease_is_taken_at_once_and_renewal_keeps_it(connect: Connect) -> None:
    a_conn, b_conn = await connect(), await connect()
    a, b = Lease("a", "http://a", ttl=30), Lease("b", "http://b", ttl=30)
    assert await read_lease(a_conn) is None
    assert await a.try_acquire(a_conn)
    before = await read_lease(a_conn)
    assert await a.renew(a_conn)
    after = await read_lease(a_conn)
    assert before is not None
    assert after is not None
    assert after.expires_at > before.expires_at
    assert after.epoch == before.epoch == 1
    assert not await b.try_acquire(b_conn)
    await a.release(a_conn)
    assert a.epoch is None
    state = await read_lease(b_conn)
    assert state is not None
    assert state.free
    assert state.active_url is None
    assert await b.try_acquire(b_conn)
    assert b.epoch == 2


def test_a_lease_needs_a_positive_timeout_and_a_holder() -> None:
    from txnstream.ledger import InvalidArgumentError

    for ttl in (0, -1, float("nan"), float("inf")):
        with pytest.raises(InvalidArgumentError, match="lease timeout"):
            Lease("a", None, ttl=ttl)
    with pytest.raises(InvalidArgumentError, match="holder"):
        Lease("", None, ttl=5)
