"""WriteBatch's typed operations, on a real SQLite store.

A transaction's row is written once per flush however often it changes in the batch
(``record_txn`` overwrites its queued row: the coordinator's first touch of a topic and
its decision in one flush are one write), and what is stored is the row's final
content, also when the row was queued in another batch merged into this one. Every
operation key has a statement, and the store reports its file sizes without a query.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from txnstream.ledger import DB_FILE, StorageMetrics, Store, WriteBatch
from txnstream.ledger._batch import OPERATIONS, TXN
from txnstream.ledger._sqlite_sql import WRITES

pytestmark = pytest.mark.timeout(20)


def txn_row(seq: int, state: str, topics: bytes = b"\x90") -> list[Any]:
    return [seq, state, 1000, 2000, None, None, 0, topics, b"\x90", 1, None, None, None]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(tmp_path / DB_FILE)
    try:
        yield opened
    finally:
        await opened.close()


def stored_txns(path: Path) -> list[tuple[int, str, bytes]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT seq, state, topics FROM txns ORDER BY seq").fetchall()


def txn_writes(batch: WriteBatch) -> int:
    return sum(len(rows) for op, rows in batch.ops if op == TXN)


async def test_a_txn_row_changed_twice_in_a_batch_is_one_write_of_its_last_content(
    store: Store, tmp_path: Path
) -> None:
    batch = WriteBatch()
    batch.record_txn(txn_row(7, "open"))
    batch.record_txn(txn_row(8, "open"))
    batch.record_txn(txn_row(7, "committed", b"\x91\xa1t"))
    assert txn_writes(batch) == 2
    await store.write(batch)
    assert stored_txns(tmp_path / DB_FILE) == [(7, "committed", b"\x91\xa1t"), (8, "open", b"\x90")]


async def test_a_txn_row_of_a_merged_batch_is_updated_by_the_open_batch(
    store: Store, tmp_path: Path
) -> None:
    begun = WriteBatch()
    begun.record_txn(txn_row(3, "open"))
    store.submit(begun, wait=False)  # merged into the open batch
    store.batch.record_txn(txn_row(3, "aborted"))
    assert txn_writes(store.batch) == 1
    await store.write(store.batch)
    assert stored_txns(tmp_path / DB_FILE) == [(3, "aborted", b"\x90")]
    store.batch.record_txn(txn_row(3, "committed"))  # the next flush writes it again
    assert txn_writes(store.batch) == 1
    await store.flush()
    assert stored_txns(tmp_path / DB_FILE) == [(3, "committed", b"\x90")]


async def test_cursors_and_subscriptions_round_trip(store: Store) -> None:
    batch = WriteBatch()
    batch.create_topic(0, "t", 5)
    batch.create_subscription(0, "s", "exclusive", "read_committed", b"c0", 6)
    batch.create_subscription(0, "gone", "shared", "read_committed", b"c0", 6)
    batch.put_cursor(0, "s", b"c1")
    batch.drop_subscription(0, "gone")
    await store.write(batch)
    assert await store.subscription_rows() == [(0, "s", "exclusive", "read_committed", b"c1", 6)]
    assert [row[1] for row in await store.topic_rows()] == ["t"]
    assert await store.next_topic_id() == 1


def test_every_operation_has_a_sqlite_statement() -> None:
    assert WRITES.keys() == OPERATIONS


async def test_storage_metrics_are_the_database_and_wal_sizes(store: Store, tmp_path: Path) -> None:
    batch = WriteBatch()
    batch.create_topic(0, "t", 5)
    await store.write(batch)
    metrics = store.storage_metrics()
    assert isinstance(metrics, StorageMetrics)
    assert metrics.database_bytes == (tmp_path / DB_FILE).stat().st_size > 0
    assert metrics.wal_bytes == (tmp_path / (DB_FILE + "-wal")).stat().st_size > 0
