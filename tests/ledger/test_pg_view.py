"""The PostgreSQL store read from another process (``StoreReader.open`` with a
``postgresql://`` URL): every read gives what the SQLite reader gives on the same rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_pg_store import open_pg, script

from txnstream.ledger import (
    DB_FILE,
    InvalidArgumentError,
    LedgerError,
    Position,
    Store,
    StoreReader,
)

pytestmark = pytest.mark.timeout(90)

P = Position


def everything(reader: StoreReader) -> dict[str, Any]:
    """Every read of the interface, on the script's rows, inside one snapshot."""
    with reader.snapshot():
        return {
            "topic_ids": [reader.topic_id(name) for name in ("a", "b", "c", "d", "nope")],
            "first": [reader.first_local(t) for t in range(4)],
            "last": [reader.last_local(t) for t in range(4)],
            "last_before": [reader.last_local(0, P(1, 0)), reader.last_local(0, P(0, 0))],
            "remote": [reader.remote_ledgers(t) for t in range(3)],
            "undecided": sorted(reader.undecided_txns(["committed", "aborted"])),
            "undecided_none": sorted(reader.undecided_txns([])),
            "first_data": [
                reader.first_data_of(0, [6], None),
                reader.first_data_of(0, [5, 6], P(0, 11)),
                reader.first_data_of(0, [], None),
            ],
            "nth": [reader.nth_local(0, P(0, 0), n) for n in (0, 5, 18, 19)],
            "tops": [reader.ledger_tops(t) for t in range(3)],
            "has_aborts": [reader.has_aborts_from(0, ledger) for ledger in range(3)],
            "aborted_in": [reader.aborted_in(0, 1, lo, hi) for lo, hi in ((0, 4), (2, 3), (4, 9))],
            "data": [
                list(reader.data_rows(0, 0, 0, 100, 4)),
                list(reader.data_rows(0, 1, 1, 3, 10)),
                list(reader.data_rows(0, 5, 0, 10, 10)),
            ],
        }


async def test_every_read_gives_what_the_sqlite_reader_gives(pg_url: str, tmp_path: Path) -> None:
    pg, sqlite = await open_pg(pg_url), await Store.open(tmp_path / DB_FILE)
    try:
        for batch_pg, batch_sqlite in zip(script(), script(), strict=True):
            await pg.write(batch_pg)
            await sqlite.write(batch_sqlite)
        with StoreReader.open(pg_url) as reader_pg, StoreReader.open(tmp_path) as reader_sqlite:
            assert type(reader_pg).__name__ == "PgStoreReader"
            got, expected = everything(reader_pg), everything(reader_sqlite)
    finally:
        await pg.close()
        await sqlite.close()
    assert got == expected
    assert sum(len(chunk) for chunk in got["data"][0]) == 13  # the rows are really there
    assert [len(chunk) for chunk in got["data"][0]] == [4, 4, 4, 1]


async def test_a_snapshot_sees_one_state_while_the_server_writes(pg_url: str) -> None:
    from txnstream.ledger import WriteBatch

    store = await open_pg(pg_url)
    try:
        first = WriteBatch()
        first.create_topic(0, "a", 1)
        first.open_ledger(0, 0, 1, 0)
        first.insert_entry(0, 0, 0, 0, None, b"0")
        await store.write(first)
        with StoreReader.open(pg_url) as reader:
            with reader.snapshot():
                assert reader.last_local(0) == P(0, 0)
                more = WriteBatch()
                more.insert_entry(0, 0, 1, 0, None, b"1")
                await store.write(more)
                assert reader.last_local(0) == P(0, 0)  # the snapshot's state
            assert reader.last_local(0) == P(0, 1)  # outside it: the newest
    finally:
        await store.close()


async def test_a_database_that_is_not_a_store_is_refused(pg_url: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not a txnstream store: it lacks"):
        StoreReader.open(pg_url)
    with pytest.raises(LedgerError, match="cannot connect"):
        StoreReader.open(pg_url.rsplit("/", 1)[0] + "/no_such_database")
