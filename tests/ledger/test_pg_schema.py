"""The PostgreSQL schema on a real cluster: SQLite's tables and columns one for one,
migrated on open, idempotently, by any number of openers at once."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from txnstream.ledger import LeaseLostError, LedgerError
from txnstream.ledger._pg_lease import STORE_SCOPE, Lease, fence
from txnstream.ledger._pg_schema import SCHEMA_VERSION, migrate
from txnstream.ledger._schema import migrate as migrate_sqlite

pytestmark = pytest.mark.timeout(60)

# PostgreSQL's own: the version row, the lease and the flush marks (SQLite has one writer
# and a file lock)
PG_ONLY = {"schema_version", "leases", "members", "flush_marks"}


async def pg_columns(conn: psycopg.AsyncConnection[Any]) -> dict[str, set[str]]:
    cur = await conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema()"
    )
    tables: dict[str, set[str]] = {}
    for table, column in await cur.fetchall():
        tables.setdefault(table, set()).add(column)
    return tables


def sqlite_columns(path: Path) -> dict[str, set[str]]:
    conn = sqlite3.connect(path)
    try:
        migrate_sqlite(conn)
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")]
        return {n: {r[1] for r in conn.execute(f"PRAGMA table_info({n})")} for n in names}
    finally:
        conn.close()


async def test_a_fresh_database_gets_sqlite_s_tables_and_columns(
    pg_url: str, tmp_path: Path
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        assert await migrate(conn) == 0
        tables = await pg_columns(conn)
        version = await (await conn.execute("SELECT version FROM schema_version")).fetchall()
    assert version == [(SCHEMA_VERSION,)]
    expected = sqlite_columns(tmp_path / "s.db")
    assert {t: c for t, c in tables.items() if t not in PG_ONLY} == expected
    assert tables.keys() >= PG_ONLY


async def test_rows_keep_their_types_and_keys(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await migrate(conn)
        big = 2**62
        row = (7, big, big + 1, 0, big + 2, b"\x00\xffpayload")
        await conn.execute("INSERT INTO entries VALUES (%s, %s, %s, %s, %s, %s)", row)
        cur = await conn.execute("SELECT * FROM entries")
        assert await cur.fetchall() == [row]
        with pytest.raises(psycopg.errors.UniqueViolation):
            await conn.execute("INSERT INTO entries VALUES (%s, %s, %s, %s, %s, %s)", row)
        # a range read walks the primary key
        await conn.execute("SET enable_seqscan = off")  # a tiny table: make the choice visible
        plan = await conn.execute(
            "EXPLAIN SELECT entry_id FROM entries WHERE topic_id = 7 AND ledger_id = %s"
            " AND entry_id >= 0 ORDER BY ledger_id, entry_id",
            (big,),
        )
        assert "entries_pkey" in str(await plan.fetchall())


async def test_migrating_again_changes_nothing_and_keeps_the_rows(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await migrate(conn)
        await conn.execute("INSERT INTO meta VALUES ('next_topic_id', 3)")
        assert await migrate(conn) == SCHEMA_VERSION
        assert await migrate(conn) == SCHEMA_VERSION
        cur = await conn.execute("SELECT key, value FROM meta")
        assert await cur.fetchall() == [("next_topic_id", "3")]


async def test_concurrent_openers_migrate_once(pg_url: str) -> None:
    conns = [await psycopg.AsyncConnection.connect(pg_url, autocommit=True) for _ in range(8)]
    try:
        found = await asyncio.gather(*(migrate(conn) for conn in conns))
    finally:
        for conn in conns:
            await conn.close()
    assert sorted(found) == [0] + [SCHEMA_VERSION] * 7


async def test_the_lease_and_its_fence_come_with_the_schema(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await migrate(conn)
        lease = Lease("a", "http://a", ttl=30)
        assert await lease.try_acquire(conn)
        async with conn.transaction():
            await lease.fence(conn)
        with pytest.raises(LeaseLostError):
            async with conn.transaction():
                await fence(conn, {STORE_SCOPE: 0})


async def test_a_database_of_a_newer_txnstream_is_refused_untouched(pg_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        await migrate(conn)
        await conn.execute("UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
        with pytest.raises(LedgerError, match="newer txnstream"):
            await migrate(conn)
        cur = await conn.execute("SELECT version FROM schema_version")
        assert await cur.fetchall() == [(SCHEMA_VERSION + 1,)]


async def test_a_version_1_database_upgrades_in_place_and_its_lease_names_kafka(
    pg_url: str,
) -> None:
    """A store a version-1 txnstream made (its lease row held, without the Kafka
    column): opening migrates it to the current version, keeping the rows, and the next
    holder's lease names its Kafka address."""
    from txnstream.ledger._pg_lease import read_lease
    from txnstream.ledger._pg_schema import _STEPS, _VERSION_DDL

    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
        async with conn.transaction():  # exactly what a version-1 server made
            await conn.execute(_VERSION_DDL)
            await conn.execute(_STEPS[1])
            await conn.execute("INSERT INTO schema_version (version) VALUES (1)")
        assert not (await pg_columns(conn))["leases"] >= {"kafka"}
        await conn.execute(  # a version-1 server's held lease, expiring soon
            "INSERT INTO leases (scope, epoch, holder, url, acquired_at, expires_at) VALUES"
            " (%s, 1, 'old', 'http://old:8080', now(), clock_timestamp() + interval '0.2 s')",
            (STORE_SCOPE,),
        )
        await conn.execute("INSERT INTO meta VALUES ('next_topic_id', 5)")
        assert await migrate(conn) == 1
        assert "kafka" in (await pg_columns(conn))["leases"]
        cur = await conn.execute("SELECT version FROM schema_version")
        assert await cur.fetchall() == [(SCHEMA_VERSION,)]
        state = await read_lease(conn)
        assert state is not None
        assert (state.url, state.kafka, state.epoch) == (
            "http://old:8080",
            None,
            1,
        )
        cur = await conn.execute("SELECT value FROM meta WHERE key = 'next_topic_id'")
        assert await cur.fetchall() == [("5",)]
        new = Lease("new", "http://new:8080", ttl=30, kafka="new:9092")
        await asyncio.sleep(0.3)  # the old holder's lease expires
        assert await new.try_acquire(conn)
        state = await read_lease(conn)
        assert state is not None
        assert (state.active_url, state.active_kafka, state.epoch) == (
            "http://new:8080",
            "new:9092",
            2,
        )
        await new.release(conn)
        state = await read_lease(conn)
        assert state is not None
        assert (state.active_kafka, state.kafka) == (None, None)
