"""A flush on PostgreSQL, on a real cluster: all of it or nothing, fenced, durable when it
returns, and a flush whose COMMIT answer was lost found committed or not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from pg_support import Cluster, waiting_on_a_lock
from support import wait_until

from txnstream.ledger import LeaseLostError
from txnstream.ledger._pg_lease import FENCE_SQL, STORE_SCOPE, Lease
from txnstream.ledger._pg_schema import migrate
from txnstream.ledger._pg_write import (
    PredecessorNotCommitted,
    Run,
    apply_flush,
    flush_committed,
    merge_inserts,
)

pytestmark = pytest.mark.timeout(90)

Conn = psycopg.AsyncConnection[Any]
ENTRY = "INSERT INTO entries (topic_id, ledger_id, entry_id, kind, txn, data) VALUES (%s, %s, %s, %s, %s, %s)"  # noqa: E501
CURSOR = "INSERT INTO subscriptions VALUES (%s, %s, 'shared', 'read_committed', %s, 0)"


def entries(topic: int, ledger: int, n: int, start: int = 0) -> Run:
    return (
        ENTRY,
        [(topic, ledger, start + i, 0, None, f"m{start + i}".encode()) for i in range(n)],
    )


async def connect(url: str) -> Conn:
    return await psycopg.AsyncConnection.connect(url, autocommit=True)


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[tuple[Conn, Lease]]:
    """A migrated database, a connection, and the store's lease held on it."""
    conn = await connect(pg_url)
    await migrate(conn)
    lease = Lease("writer", None, ttl=60)
    assert await lease.try_acquire(conn)
    yield conn, lease
    await conn.close()


async def count(conn: Conn, table: str = "entries") -> int:
    row = await (await conn.execute(f"SELECT count(*) FROM {table}")).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_flush_stores_every_run_at_once(store: tuple[Conn, Lease], pg_url: str) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    runs = [entries(1, 0, 500), (CURSOR, [(1, "s", b"c1")]), entries(2, 0, 1)]
    await apply_flush(conn, claims, runs, seq=1)
    other = await connect(pg_url)  # visible to others as soon as it returned
    try:
        assert await count(other) == 501
        assert await count(other, "subscriptions") == 1
        assert await flush_committed(other, claims, 1)
        assert not await flush_committed(other, claims, 2)
    finally:
        await other.close()


async def test_a_failing_statement_stores_nothing_of_its_flush(store: tuple[Conn, Lease]) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    await apply_flush(conn, claims, [entries(1, 0, 10)], seq=1)
    with pytest.raises(psycopg.errors.UniqueViolation):  # entry 9 again, after 100 new ones
        await apply_flush(conn, claims, [entries(1, 1, 100), entries(1, 0, 1, start=9)], seq=2)
    assert await count(conn) == 10
    assert await flush_committed(conn, claims, 1)
    await apply_flush(conn, claims, [entries(1, 1, 100)], seq=3)  # the connection goes on
    assert await count(conn) == 110


async def test_a_flush_of_a_lost_lease_stores_nothing(store: tuple[Conn, Lease]) -> None:
    conn, lease = store
    await conn.execute("UPDATE leases SET epoch = epoch + 1")  # taken over
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    with pytest.raises(LeaseLostError):
        await apply_flush(conn, claims, [entries(1, 0, 100)], seq=1)
    assert await count(conn) == 0
    with pytest.raises(LeaseLostError, match="in doubt"):
        await flush_committed(conn, claims, 1)


async def test_a_flush_pipelined_behind_another_commits_after_it(
    store: tuple[Conn, Lease], pg_url: str
) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    order: list[int] = []

    async def flush(seq: int, runs: list[Run], after: int | None) -> None:
        await apply_flush(conn, claims, runs, seq, after=after)
        order.append(seq)

    first = asyncio.create_task(flush(1, [entries(1, 0, 2000)], None))
    await asyncio.sleep(0)  # the first is on its way ...
    second = asyncio.create_task(flush(2, [entries(1, 1, 10)], 1))  # ... the second behind it
    await asyncio.gather(first, second)
    assert order == [1, 2]  # answered in the order sent
    other = await connect(pg_url)
    try:
        assert await count(other) == 2010
        # the second's mark says the first committed too (it could not commit otherwise)
        assert await flush_committed(other, claims, 1)
        assert await flush_committed(other, claims, 2)
        assert not await flush_committed(other, claims, 3)
    finally:
        await other.close()
    await apply_flush(conn, claims, [entries(1, 2, 1)], seq=3)  # out of pipeline mode again
    assert await count(conn) == 2011


async def test_a_flush_pipelined_behind_one_that_failed_stores_nothing(
    store: tuple[Conn, Lease],
) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    await apply_flush(conn, claims, [entries(1, 0, 10)], seq=1)
    # entry 9 again: the second flush fails on the server ...
    failing = asyncio.create_task(
        apply_flush(conn, claims, [entries(1, 1, 100), entries(1, 0, 1, start=9)], seq=2, after=1)
    )
    await asyncio.sleep(0)
    # ... and the third, sent behind it before its answer came, must not commit without it
    behind = asyncio.create_task(apply_flush(conn, claims, [entries(1, 2, 5)], seq=3, after=2))
    results = await asyncio.gather(failing, behind, return_exceptions=True)
    assert isinstance(results[0], psycopg.errors.UniqueViolation)
    assert isinstance(results[1], PredecessorNotCommitted), results[1]
    assert await count(conn) == 10
    assert not await flush_committed(conn, claims, 2)
    assert not await flush_committed(conn, claims, 3)
    # the connection goes on: both again, in order (new numbers), the first fixed
    again = asyncio.create_task(apply_flush(conn, claims, [entries(1, 1, 100)], seq=4))
    await asyncio.sleep(0)
    await apply_flush(conn, claims, [entries(1, 2, 5)], seq=5, after=4)
    await again
    assert await count(conn) == 115


async def test_what_a_flush_returned_for_survives_a_kill_9(
    pg_cluster: Cluster, store: tuple[Conn, Lease], pg_url: str
) -> None:
    conn, lease = store
    assert lease.epoch is not None
    for seq in range(20):
        await apply_flush(conn, {STORE_SCOPE: lease.epoch}, [entries(1, seq, 50)], seq=seq)
    await asyncio.to_thread(pg_cluster.kill)
    await asyncio.to_thread(pg_cluster.start)
    after = await connect(pg_url)
    try:
        assert await count(after) == 1000
    finally:
        await after.close()


async def test_an_open_flush_in_doubt_is_waited_for(store: tuple[Conn, Lease], pg_url: str) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    settler, observer = await connect(pg_url), await connect(pg_url)
    try:
        for outcome in (True, False):
            seq = 7 if outcome else 8
            # the flush's statements, its transaction still open (COMMIT not yet run)
            await conn.execute("BEGIN")
            await conn.execute(FENCE_SQL, (STORE_SCOPE, lease.epoch))
            await conn.execute(
                "INSERT INTO flush_marks VALUES (%s, %s, %s) ON CONFLICT (scope)"
                " DO UPDATE SET epoch = EXCLUDED.epoch, seq = EXCLUDED.seq",
                (STORE_SCOPE, lease.epoch, seq),
            )
            settle = asyncio.create_task(flush_committed(settler, claims, seq))
            try:
                await wait_until(
                    lambda: waiting_on_a_lock(observer, settler.info.backend_pid),
                    10,
                    "the settler to wait",
                )
            finally:
                await conn.execute("COMMIT" if outcome else "ROLLBACK")
            assert await asyncio.wait_for(settle, 10) is outcome
    finally:
        await settler.close()
        await observer.close()


async def test_a_commit_whose_answer_was_lost_is_found_committed(pg_own_cluster: Cluster) -> None:
    """The COMMIT is durable locally but waits for a synchronous standby that never comes;
    the connection dies (terminated) before COMMIT answers. The flush raised, yet it is
    committed, and the settle says so: a writer must not report such a flush failed."""
    url = pg_own_cluster.create_database("w", owner="txnstream")
    setup = await connect(url)
    await migrate(setup)
    lease = Lease("writer", None, ttl=60)
    assert await lease.try_acquire(setup)
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    pg_own_cluster.execute("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
    pg_own_cluster.execute("SELECT pg_reload_conf()")
    await setup.execute("SET synchronous_commit = local")  # the checks' own commits
    writer = await connect(url)
    try:
        flush = asyncio.create_task(apply_flush(writer, claims, [entries(1, 0, 3)], seq=1))

        async def waits_for_the_standby() -> bool:
            cur = await setup.execute(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = %s",
                (writer.info.backend_pid,),
            )
            row = await cur.fetchone()
            return row is not None and row[0] == "SyncRep"

        await wait_until(waits_for_the_standby, 10, "the COMMIT to wait for the standby")
        await setup.execute("SELECT pg_terminate_backend(%s)", (writer.info.backend_pid,))
        with pytest.raises(psycopg.OperationalError):
            await asyncio.wait_for(flush, 10)
        settler = await connect(url)
        try:
            # (its lock takes a transaction id, whose commit would wait for the standby too)
            await settler.execute("SET synchronous_commit = local")
            assert await flush_committed(settler, claims, 1)
            assert await count(settler) == 3
        finally:
            await settler.close()
    finally:
        await writer.close()
        await setup.close()


async def test_a_flush_still_in_doubt_past_the_lock_timeout_says_so(
    store: tuple[Conn, Lease], pg_url: str
) -> None:
    conn, lease = store
    assert lease.epoch is not None
    settler = await connect(pg_url)
    try:
        await conn.execute("BEGIN")
        await conn.execute(FENCE_SQL, (STORE_SCOPE, lease.epoch))  # holds the row FOR SHARE
        with pytest.raises(psycopg.errors.LockNotAvailable):
            await flush_committed(settler, {STORE_SCOPE: lease.epoch}, 1, lock_timeout=0.2)
        await conn.execute("ROLLBACK")
        assert not await flush_committed(settler, {STORE_SCOPE: lease.epoch}, 1, lock_timeout=0.2)
    finally:
        await settler.close()


async def test_a_statement_skipped_by_a_failed_flush_is_prepared_again(
    store: tuple[Conn, Lease], pg_url: str
) -> None:
    # Statements are prepared once per connection, in the flush that first uses them; one
    # that a failure before it skipped was never prepared, and the next flush must know.
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    with pytest.raises(psycopg.errors.UndefinedTable):
        await apply_flush(conn, claims, [("DELETE FROM nowhere WHERE x = %s", [(1,)]),
                                         (CURSOR, [(1, "s", b"c1")])], seq=1)  # fmt: skip
    await apply_flush(conn, claims, [(CURSOR, [(1, "s", b"c1")]), entries(1, 0, 2)], seq=2)
    await apply_flush(conn, claims, [(CURSOR, [(1, "t", b"c2")]), entries(1, 0, 2, 2)], seq=3)
    assert await count(conn, "subscriptions") == 2
    assert await count(conn) == 4


async def test_a_value_of_another_type_is_adapted_by_psycopg(store: tuple[Conn, Lease]) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    meta = "INSERT INTO meta (key, value) VALUES (%s, %s)"
    await apply_flush(conn, claims, [(meta, [("plain", 7), ("other", Decimal("1.50"))])], seq=1)
    rows = await (await conn.execute("SELECT key, value FROM meta ORDER BY key")).fetchall()
    assert rows == [("other", "1.50"), ("plain", "7")]
    assert await flush_committed(conn, claims, 1)


async def test_values_travel_as_their_columns_read_them(store: tuple[Conn, Lease]) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    data = bytes(range(256)) * 3  # every byte value, binary
    runs: list[Run] = [
        (ENTRY, [(1, 0, 0, 1, 2**40, data), (1, 0, 1, 0, None, bytearray(b"\x00\\x"))]),
        ("INSERT INTO ledgers (topic_id, ledger_id, created_ms, has_aborts) VALUES"
         " (%s, %s, %s, %s)", [(1, 0, -5, True), (1, 1, 0, False)]),
        ("INSERT INTO meta (key, value) VALUES (%s, %s)", [("é\u2603", "100%s %% ü")]),
    ]  # fmt: skip
    await apply_flush(conn, claims, runs, seq=1)
    cur = await conn.execute("SELECT entry_id, kind, txn, data FROM entries ORDER BY entry_id")
    assert await cur.fetchall() == [(0, 1, 2**40, data), (1, 0, None, b"\x00\\x")]
    cur = await conn.execute("SELECT ledger_id, created_ms, has_aborts FROM ledgers ORDER BY 1")
    assert await cur.fetchall() == [(0, -5, True), (1, 0, False)]
    cur = await conn.execute("SELECT key, value FROM meta")
    assert await cur.fetchall() == [("é\u2603", "100%s %% ü")]


META = "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"  # noqa: E501


def test_inserts_into_other_tables_merge_and_nothing_passes_another_statement() -> None:
    # A flush of 8 producers' transactions is a transaction row, its entries, the next
    # transaction's row, its entries...: one statement per table, in first-seen order.
    txn_rows = [(META, [(f"t{i}", "committed")]) for i in range(3)]
    logs = [entries(1, 0, 2, start=2 * i) for i in range(3)]
    interleaved = [run for pair in zip(txn_rows, logs, strict=True) for run in pair]
    assert merge_inserts(interleaved) == [
        (META, [("t0", "committed"), ("t1", "committed"), ("t2", "committed")]),
        (ENTRY, [row for _, rows in logs for row in rows]),
    ]
    # A statement that is not an INSERT, or another INSERT into the same table, ends the
    # stretch: what came before it stays before it.
    delete = ("DELETE FROM entries WHERE topic_id = %s", [(1,)])
    other = ("INSERT INTO entries (topic_id, ledger_id, entry_id, kind, data) VALUES"
             " (%s, %s, %s, 0, %s)", [(1, 0, 9, b"x")])  # fmt: skip
    runs = [logs[0], txn_rows[0], delete, logs[1], other, logs[2], txn_rows[1]]
    assert merge_inserts(runs) == [
        logs[0],
        txn_rows[0],
        delete,
        logs[1],
        other,
        (ENTRY, logs[2][1]),
        txn_rows[1],
    ]


async def test_merged_and_multi_row_statements_store_what_row_by_row_stored(
    store: tuple[Conn, Lease],
) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    runs: list[Run] = [
        (META, [("a", "1"), ("b", "1")]),  # distinct keys: one statement
        entries(1, 0, 300),  # 256 + 32 + 8 + 4 rows
        (META, [("a", "2"), ("c", "1"), ("a", "3")]),  # "a" twice: the later row wins
        ("DELETE FROM entries WHERE topic_id = %s AND entry_id < %s", [(1, 100)]),
        entries(1, 0, 5, start=300),
    ]
    await apply_flush(conn, claims, runs, seq=1)
    cur = await conn.execute("SELECT key, value FROM meta ORDER BY key")
    assert await cur.fetchall() == [("a", "3"), ("b", "1"), ("c", "1")]
    # A key column made of two parameters: its rows' keys are not the parameters'
    # (both rows are key "ab"), so they go row by row and the second updates the first.
    joined = ("INSERT INTO meta (key, value) VALUES (%s::text || %s::text, 'x')"
              " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value || '!'")  # fmt: skip
    await apply_flush(conn, claims, [(joined, [("a", "b"), ("ab", "")])], seq=2)
    cur = await conn.execute("SELECT value FROM meta WHERE key = 'ab'")
    assert await cur.fetchall() == [("x!",)]
    cur = await conn.execute("SELECT entry_id, data FROM entries ORDER BY entry_id")
    assert await cur.fetchall() == [(i, f"m{i}".encode()) for i in range(100, 305)]


async def test_a_duplicate_row_in_a_multi_row_insert_stores_nothing(
    store: tuple[Conn, Lease],
) -> None:
    conn, lease = store
    assert lease.epoch is not None
    claims = {STORE_SCOPE: lease.epoch}
    twice = (ENTRY, [*entries(1, 0, 6)[1], *entries(1, 0, 1, start=3)[1]])
    with pytest.raises(psycopg.errors.UniqueViolation):
        await apply_flush(conn, claims, [(META, [("a", "1")]), twice], seq=1)
    assert await count(conn) == 0
    assert await count(conn, "meta") == 0
