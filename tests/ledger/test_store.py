"""The group-commit writer (``ledger.Store``) on its own, on a real SQLite file.

Ordering and batching of flushes, pipelined (``wait=False``) batches, durable callbacks,
backpressure, close, and the failure path: a transient "database is locked" (provoked by
a second connection holding the write lock) is retried; a permanent error fails the store.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest
from support import wait_until, write_lock

from txnstream.ledger import DB_FILE, ClosedError, EngineFailedError, Store, WriteBatch

pytestmark = pytest.mark.timeout(20)

_INSERT = "INSERT INTO log (n) VALUES (?)"


def insert(*numbers: int, entries: int = 0) -> WriteBatch:
    """A batch appending ``numbers`` to the test table, counted as ``entries`` log entries."""
    batch = WriteBatch()
    for n in numbers:
        batch.add(_INSERT, (n,))
    batch.entries = entries
    return batch


def on_disk(path: Path) -> list[int]:
    """What another connection sees: only committed rows, in insertion order."""
    with closing(sqlite3.connect(path)) as conn:
        return [n for (n,) in conn.execute("SELECT n FROM log ORDER BY rowid")]


def submit(store: Store, batch: WriteBatch) -> asyncio.Future[None]:
    """``store.submit(batch)`` with its future typed as present."""
    future = store.submit(batch)
    assert future is not None
    return future


class Flushes:
    """Records ``on_flush`` calls (entries and seconds per flush) and ``on_failure`` calls."""

    def __init__(self, store: Store) -> None:
        self.entries: list[int] = []
        self.seconds: list[float] = []
        self.failures: list[BaseException] = []
        store.on_flush = self._flushed
        store.on_failure = self.failures.append

    def _flushed(self, entries: int, seconds: float) -> None:
        self.entries.append(entries)
        self.seconds.append(seconds)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / DB_FILE


@pytest.fixture
async def store(path: Path) -> AsyncIterator[Store]:
    opened = await Store.open(path, max_pending_entries=10)
    try:
        batch = WriteBatch()
        batch.add("CREATE TABLE log (n INTEGER NOT NULL UNIQUE)")
        await opened.write(batch)
        yield opened
    finally:
        await opened.close()


async def lower_busy_timeout(store: Store, ms: int = 50) -> None:
    """Make "database is locked" come after ``ms`` instead of the store's 5 s."""
    batch = WriteBatch()
    batch.add(f"PRAGMA busy_timeout={ms}")  # a connection setting: it outlives the batch
    await store.write(batch)


async def retried(caplog: pytest.LogCaptureFixture) -> None:
    async def seen() -> bool:
        return any("retrying" in r.getMessage() for r in caplog.records)

    await wait_until(seen, 10, "a flush to be retried")


# -- ordering and group commit ---------------------------------------------------------


async def test_batches_are_durable_in_submission_order(store: Store, path: Path) -> None:
    futures = [submit(store, insert(n)) for n in range(20)]
    await asyncio.gather(*futures)
    assert on_disk(path) == list(range(20))
    assert await store.read("SELECT n FROM log ORDER BY rowid") == [(n,) for n in range(20)]


async def test_batches_queued_between_flushes_share_one_flush(store: Store, path: Path) -> None:
    flushes = Flushes(store)
    first = [submit(store, insert(n, entries=1)) for n in range(5)]
    await asyncio.gather(*first)
    second = [submit(store, insert(n, entries=2)) for n in range(5, 8)]
    await asyncio.gather(*second)
    assert flushes.entries == [5, 6]
    assert on_disk(path) == list(range(8))
    assert len(flushes.seconds) == 2
    assert all(0 < seconds < 5 for seconds in flushes.seconds)  # each flush is timed


async def test_pipelined_batches_ride_with_the_next_waited_batch(store: Store, path: Path) -> None:
    flushes = Flushes(store)
    for n in range(3):
        assert store.submit(insert(n, entries=1), wait=False) is None
    await store.write(insert(3, entries=1))
    assert flushes.entries == [4]
    assert on_disk(path) == [0, 1, 2, 3]


async def test_pipelined_batches_alone_go_after_the_linger(store: Store, path: Path) -> None:
    flushed_at: list[float] = []
    store.on_flush = lambda entries, seconds: flushed_at.append(time.monotonic())
    submitted = time.monotonic()
    store.submit(insert(0, entries=1), wait=False)
    store.submit(insert(1, entries=1), wait=False)

    async def flushed() -> bool:
        return bool(flushed_at)

    await wait_until(flushed, 5, "the linger to flush the pipelined batches")
    assert flushed_at[0] - submitted >= 0.004  # they did not wake the writer themselves
    assert len(flushed_at) == 1
    assert on_disk(path) == [0, 1]


async def test_on_durable_runs_in_submission_order_after_commit(store: Store, path: Path) -> None:
    seen: list[tuple[int, list[int], bool]] = []
    futures: list[asyncio.Future[None] | None] = []
    for n in range(6):
        batch = insert(n)

        def durable(n: int = n) -> None:
            future = futures[n]
            seen.append((n, on_disk(path), future is not None and future.done()))

        batch.on_durable(durable)
        futures.append(store.submit(batch, wait=n % 2 == 0))
    await store.flush()
    # Each callback already sees its own rows committed, and runs before its future is done.
    assert [n for n, _, _ in seen] == list(range(6))
    assert all(n in rows for n, rows, _ in seen)
    assert not any(done for _, _, done in seen)


async def test_reads_see_committed_data_only(store: Store, path: Path) -> None:
    with write_lock(path) as other:
        other.execute(_INSERT, (99,))
        assert await store.read("SELECT count(*) FROM log") == [(0,)]
    await store.write(insert(1))
    assert await store.read("SELECT n FROM log") == [(1,)]


async def test_flush_waits_for_everything_submitted(store: Store, path: Path) -> None:
    store.submit(insert(0), wait=False)
    store.submit(insert(1), wait=False)
    await store.flush()
    assert on_disk(path) == [0, 1]


# -- backpressure ----------------------------------------------------------------------


async def test_over_limit_and_wait_writable(store: Store, path: Path) -> None:
    store.submit(insert(0, entries=10), wait=False)
    assert not store.over_limit  # the limit itself is allowed
    store.submit(insert(1, entries=1), wait=False)
    assert store.over_limit
    await store.wait_writable()  # wakes the writer rather than waiting for the linger
    assert not store.over_limit
    assert on_disk(path) == [0, 1]
    await store.wait_writable()  # returns at once below the limit


# -- close -----------------------------------------------------------------------------


async def test_close_writes_what_is_queued_then_refuses(path: Path) -> None:
    store = await Store.open(path, max_pending_entries=10)
    batch = WriteBatch()
    batch.add("CREATE TABLE log (n INTEGER NOT NULL UNIQUE)")
    store.submit(batch, wait=False)
    store.submit(insert(0), wait=False)
    waited = submit(store, insert(1))
    await store.close()
    assert waited.done()
    assert waited.exception() is None
    assert on_disk(path) == [0, 1]
    with pytest.raises(ClosedError):
        store.submit(insert(2))
    with pytest.raises(ClosedError):
        await store.flush()
    with pytest.raises(ClosedError):
        await store.read("SELECT n FROM log")
    await store.close()  # idempotent

    reopened = await Store.open(path, max_pending_entries=10)
    try:
        assert await reopened.read("SELECT n FROM log ORDER BY rowid") == [(0,), (1,)]
    finally:
        await reopened.close()


# -- failures --------------------------------------------------------------------------


async def test_transient_lock_is_retried_then_succeeds(
    store: Store, path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flushes = Flushes(store)
    await lower_busy_timeout(store)
    with write_lock(path):
        future = submit(store, insert(0))
        await retried(caplog)
        assert not future.done()
    await future
    assert on_disk(path) == [0]
    assert store.failure is None
    assert flushes.failures == []
    await store.write(insert(1))  # the store keeps working
    assert on_disk(path) == [0, 1]


async def test_lock_held_past_every_retry_fails_the_store(
    store: Store, path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flushes = Flushes(store)
    await lower_busy_timeout(store)

    async def failed() -> bool:
        return store.failure is not None

    with write_lock(path):
        future = submit(store, insert(0))
        await wait_until(failed, 10, "the retries to run out")
    with pytest.raises(EngineFailedError):
        await future
    assert isinstance(store.failure, sqlite3.OperationalError)
    assert "locked" in str(store.failure)
    assert sum("retrying" in r.getMessage() for r in caplog.records) >= 1
    assert flushes.failures == [store.failure]
    assert on_disk(path) == []


@pytest.mark.parametrize(
    "bad_sql",
    [
        pytest.param("INSERT INTO log (n) VALUES (NULL)", id="constraint"),
        pytest.param("INSERT INTO missing (n) VALUES (1)", id="no-such-table"),
    ],
)
async def test_permanent_error_fails_the_store_without_retry(
    store: Store, path: Path, caplog: pytest.LogCaptureFixture, bad_sql: str
) -> None:
    flushes = Flushes(store)
    await store.write(insert(0))
    bad = insert(1)
    bad.add(bad_sql)
    with pytest.raises(EngineFailedError):
        await store.write(bad)
    assert not any("retrying" in r.getMessage() for r in caplog.records)
    assert isinstance(store.failure, sqlite3.IntegrityError | sqlite3.OperationalError)
    assert flushes.failures == [store.failure]
    assert on_disk(path) == [0]  # the failed batch left nothing behind

    with pytest.raises(EngineFailedError) as raised:
        store.submit(insert(3))
    assert raised.value.__cause__ is store.failure
    with pytest.raises(EngineFailedError):
        store.submit(insert(3), wait=False)
    with pytest.raises(EngineFailedError):
        await store.flush()
    with pytest.raises(EngineFailedError):
        await store.wait_writable()
    assert flushes.failures == [store.failure]  # reported once
    assert await store.read("SELECT n FROM log") == [(0,)]  # reads still work until close


async def test_failure_fails_every_batch_of_the_flush_and_the_queue(
    store: Store, path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flushes = Flushes(store)
    durable: list[str] = []
    await lower_busy_timeout(store)
    good = insert(1)
    good.on_durable(lambda: durable.append("good"))
    bad = insert(2)
    bad.add("INSERT INTO log (n) VALUES (NULL)")
    with write_lock(path):
        # Hold the writer inside its first attempt, so that one more batch is still
        # queued (not yet taken) when the flush fails.
        taken = [submit(store, good), submit(store, bad)]
        await retried(caplog)
        queued = submit(store, insert(3))
    for future in [*taken, queued]:
        with pytest.raises(EngineFailedError):
            await future
    assert isinstance(store.failure, sqlite3.IntegrityError)
    assert flushes.failures == [store.failure]
    assert durable == []  # the flush rolled back as a whole: no callback ran
    assert on_disk(path) == []  # durable state stays a prefix of the submissions


async def test_failing_on_durable_callback_fails_the_store(store: Store, path: Path) -> None:
    flushes = Flushes(store)
    batch = insert(0)

    def broken() -> None:
        raise RuntimeError("callback bug")

    batch.on_durable(broken)
    await store.write(batch)  # the batch itself is durable
    assert on_disk(path) == [0]
    assert isinstance(store.failure, RuntimeError)
    assert flushes.failures == [store.failure]
    with pytest.raises(EngineFailedError):
        store.submit(insert(1))


async def test_close_after_failure(path: Path) -> None:
    store = await Store.open(path, max_pending_entries=10)
    bad = WriteBatch()
    bad.add("INSERT INTO missing (n) VALUES (1)")
    with pytest.raises(EngineFailedError):
        await store.write(bad)
    await store.close()
    with pytest.raises(EngineFailedError):
        store.submit(WriteBatch())
    with pytest.raises(ClosedError):
        await store.read("SELECT 1")
