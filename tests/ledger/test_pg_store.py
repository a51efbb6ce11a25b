"""The PostgreSQL store on a real cluster: every typed write and read gives what the
SQLite store gives, group commit, durability when a write returns, the lease (one
active, fencing), and a writer connection lost between flushes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_support import Cluster
from support import wait_until

from txnstream.ledger import (
    DB_FILE,
    DataDirLockedError,
    EngineFailedError,
    Member,
    Position,
    Store,
    WriteBatch,
    _pg_store,
    _pg_write,
)
from txnstream.ledger._batch import OPERATIONS
from txnstream.ledger._pg_members import LINGER
from txnstream.ledger._pg_sql import RANGE, WRITES
from txnstream.ledger._pg_store import LeaseWatch, PgStore

pytestmark = pytest.mark.timeout(90)

P = Position


def txn_row(
    seq: int, state: str, ended: int | None, label: str | None, fenced: Any, reason: str | None
) -> list[Any]:
    return [seq, state, 1000, 2000 + seq, f"tid{seq}", label, fenced, b"\x91\xa1a", b"\x90",
            10 * seq, ended, reason, "alice" if seq % 2 else None]  # fmt: skip


def script() -> list[WriteBatch]:
    """Batches that use every operation of the interface at least once."""
    first = WriteBatch()
    for topic_id, name in ((0, "a"), (1, "b"), (2, "c")):
        first.create_topic(topic_id, name, 100 + topic_id)
        first.open_ledger(topic_id, 0, 100, 0)
    first.open_ledger(0, 1, 150, 14)
    first.insert_entries((0, 0, i, 0, None, f"m{i}".encode()) for i in range(10))
    first.insert_entries((0, 0, i, 0, 5, f"t{i}".encode()) for i in range(10, 13))
    first.insert_entry(0, 0, 13, 1, 5, b"commit")
    first.seal_ledger(0, 0, 14, 1234)
    first.insert_entries((0, 1, i, 0, 6, b"x" * i) for i in range(4))
    first.insert_entry(0, 1, 4, 2, 6, b"abort")
    first.mark_has_aborts(0, 1)
    first.put_aborted((0, 6, 1, 0, 1, 3, 1, 4, None, None))
    first.put_aborted((0, 7, 1, 0, 1, 1, 1, 4, 1, 2))
    first.put_retention(0, b"retention")
    first.put_offload_policy(0, b"offload")
    first.put_producer(0, "p", 5, b"pos1")
    first.put_producer(0, "q", 1, b"q1")
    first.create_subscription(0, "s", "shared", "read_committed", b"c1", 100)
    first.create_subscription(0, "t", "exclusive", "read_uncommitted", b"t1", 101)
    first.create_subscription(1, "x", "shared", "read_committed", b"x1", 102)
    first.reserve_txn_seqs(100)
    first.put_ttl(0, 60_000)
    first.put_ttl(1, None)
    first.put_delivery_time(0, 0, 3, 5_000)
    first.put_delivery_time(0, 0, 4, 9_000)
    first.create_partitioned("p", 2, 150)
    first.create_partitioned("q", 3, 160)
    first.put_store_meta("store_id", "abc")
    first.put_store_meta("store_home", "here")
    first.record_txn(txn_row(1, "open", None, None, False, None))
    first.record_txn(txn_row(2, "committed", 200, "lbl-a", 0, "client"))
    first.record_txn(txn_row(3, "aborted", 300, "lbl-b", True, "fenced"))
    first.record_txn(txn_row(4, "aborted", 50, "other", 0, "timeout"))
    first.record_txn(txn_row(5, "aborted", 400, "lbl-é", 1, "low_watermark"))
    first.put_finish_key("k1", 100)
    first.put_producer_epoch("w", 0, "s0", 100, None)
    first.put_producer_epoch("\x1falice\x1fw", 3, "s3", 110, 2**40)
    first.put_producer_epoch("gone", 7, "s7", 120, 5)
    first.put_snapshot(0, 0, 0, 5, 100, b"snap0")
    first.put_snapshot(0, 1, 0, 13, 200, b"snap1")
    for segment in range(4):
        first.put_snapshot_segment(0, segment, f"seg{segment}".encode())
    first.put_snapshot(1, 0, -1, -1, 100, b"snapb")
    first.put_snapshot_segment(1, 0, b"segb")
    first.insert_entries((1, 0, i, 0, None, b"b") for i in range(3))
    first.insert_entries((2, 0, i, 0, None, b"c") for i in range(3))
    first.seal_ledger(2, 0, 3, 3)
    first.open_ledger(2, 1, 200, 3)
    first.insert_entries((2, 1, i, 0, None, b"c") for i in range(2))
    second = WriteBatch()
    second.put_producer(0, "p", 9, b"pos2")  # upserts
    second.drop_producer(0, "q")
    second.drop_producer(0, "missing")  # (none such: nothing happens)
    second.put_aborted((0, 6, 1, 0, 1, 3, 1, 4, 1, 4))
    second.put_cursor(0, "s", b"c2")
    second.drop_subscription(1, "x")
    second.record_txn(txn_row(1, "committed", 500, None, 0, "client"))
    second.put_finish_key("k1", 150)
    second.put_finish_key("k2", 160)
    second.put_producer_epoch("w", 1, "s1", 170, 6)  # (an upsert)
    second.drop_producer_epoch("gone")
    second.drop_snapshots_upto(0, 0)
    second.drop_snapshot_segments(0, [1])
    second.drop_snapshot_segments_below(0, 1)
    second.put_snapshot(0, 1, 0, 13, 250, b"snap1b")
    second.prune_txns(60)
    second.trim_ledgers(2, 0)
    second.seal_ledger(1, 0, 3, 3)
    second.move_ledger_remote(1, 0, "file:///o/1-0.parquet", 999, "crc")
    second.drop_partitioned("q")
    second.put_subscription_policy(0, "s", b"policy")
    second.put_redelivery(0, "s", 0, 1, 2, 7_000)
    second.put_redelivery(0, "s", 0, 2, 1, 0)
    second.put_redelivery(0, "s", 0, 1, 3, 8_000)  # upserts
    second.drop_redelivery(0, "s", 0, 2)
    second.prune_delivery_times(5_000)
    second.create_topic(3, "d", 300)
    second.drop_topic(3)
    third = WriteBatch()
    third.drop_topic_snapshots(1)
    third.drop_subscriptions(0)
    third.create_subscription(0, "s", "shared", "read_committed", b"c3", 103)
    third.open_ledger(0, 2, 300, 19)
    third.drop_ledger(0, 2)
    return [first, second, third]


def used_operations() -> set[str]:
    return {op for batch in script() for op, _ in batch.ops}


async def everything(store: Store) -> dict[str, Any]:
    """Every typed read of the interface, on the script's rows."""
    reason_codes = {"client": 1, "timeout": 2, "fenced": 3, "low_watermark": 4}
    reads: dict[str, Any] = {
        "ledgers": [await store.ledger_rows(t) for t in range(4)],
        "store_meta": await store.store_meta(["store_id", "store_home", "missing"]),
        "remote_ledgers": await store.remote_ledger_count(),
        "partitioned": await store.partitioned_rows(),
        "policies": await store.subscription_policy_rows(),
        "redeliveries": await store.redelivery_rows(),
        "delivery_times": await store.delivery_time_rows(0),
        "ttls": await store.topic_ttl_rows(),
        "totals": [await store.ledger_totals(0, 0), await store.ledger_totals(9, 9)],
        "range": await store.read_range(0, P(0, 0), P(1, 100), 100),
        "range_limited": await store.read_range(0, P(0, 11), P(1, 2), 3),
        "positions": await store.read_positions(0, [P(1, 1), P(0, 3), P(0, 99), P(0, 13)]),
        "metas": await store.read_metas(0, P(0, 12), 4),
        "count": await store.count_data(0, P(0, 0), P(9, 0), [], []),
        "count_except": await store.count_data(0, P(0, 2), P(1, 3), [6], [2, (1 << 32) | 1]),
        "ledger_entries": await store.ledger_entries(0, 1),
        "ledger_aborted": await store.ledger_aborted(0, 1),
        "topics": await store.topic_rows(),
        "next_topic_id": await store.next_topic_id(),
        "producers": await store.producer_rows(0),
        "subscriptions": sorted(await store.subscription_rows()),
        "next_txn_seq": await store.next_txn_seq(),
        "nth": [await store.nth_newest_ended_seq(0, n) for n in range(5)],
        "outcomes": await store.outcome_codes(0, 100, 10, reason_codes),
        "outcomes_some": await store.outcome_codes(250, 5, 1, {"client": 1}),
        "txns": await store.txn_rows(0, 0),
        "txns_since": await store.txn_rows(350, 2),
        "finish_keys": sorted(await store.finish_keys()),
        "producer_epochs": sorted(await store.producer_epoch_rows()),
        "ended": [await store.ended_txn_row(seq) for seq in range(7)],
        "ended_pages": [
            await store.ended_txn_rows(
                state=state,
                label_prefix=prefix,
                born_before_ms=born,
                after_seq=after,
                upto_seq=100,
                limit=limit,
            )
            for state, prefix, born, after, limit in [
                (None, None, None, 0, 10),
                ("aborted", None, None, 0, 10),
                (None, "lbl-", None, 0, 10),
                (None, "lbl-é", None, 0, 10),
                (None, None, 30, 0, 10),
                (None, None, None, 2, 1),
            ]
        ],
        "snapshots": [await store.snapshot_rows(t) for t in range(2)],
        "counters": [await store.snapshot_counters(t) for t in range(3)],
        "segments": [
            await store.snapshot_segments(0, [0, 1, 2, 3, 7]),
            await store.snapshot_segments(0, []),
        ],
    }
    return {name: _plain(value) for name, value in reads.items()}


def _plain(value: Any) -> Any:
    """Rows as tuples of plain values, whichever driver made them."""
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    return value


async def open_pg(url: str, **options: Any) -> PgStore:
    return await PgStore.open(url, lease_timeout=options.pop("lease_timeout", 30), **options)


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PgStore]:
    opened = await open_pg(pg_url)
    try:
        yield opened
    finally:
        await opened.close()


def test_every_operation_has_a_postgresql_statement_and_the_script_uses_each() -> None:
    assert WRITES.keys() == OPERATIONS
    assert used_operations() == OPERATIONS


async def test_every_read_gives_what_the_sqlite_store_gives(store: PgStore, tmp_path: Path) -> None:
    sqlite = await Store.open(tmp_path / DB_FILE)
    try:
        for batch_pg, batch_sqlite in zip(script(), script(), strict=True):
            await store.write(batch_pg)
            await sqlite.write(batch_sqlite)
        expected = await everything(sqlite)
    finally:
        await sqlite.close()
    got = await everything(store)
    assert got == expected
    # and the script's rows are really there (the comparison is not of two empty stores)
    assert len(got["range"]) == 19
    assert got["count_except"] == 10
    assert got["segments"][0] == {2: b"seg2", 3: b"seg3"}


async def test_a_write_returns_committed_and_many_writers_share_flushes(
    store: PgStore, pg_url: str
) -> None:
    flushes: list[int] = []
    store.on_flush = lambda entries, seconds: flushes.append(entries)
    setup = WriteBatch()
    setup.create_topic(0, "a", 1)
    setup.open_ledger(0, 0, 1, 0)
    await store.write(setup)

    async def produce(i: int) -> None:
        batch = WriteBatch()
        batch.insert_entry(0, 0, i, 0, None, b"v%d" % i)
        batch.entries = 1
        await store.write(batch)

    await asyncio.gather(*(produce(i) for i in range(200)))
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
        row = await (await other.execute("SELECT count(*) FROM entries")).fetchone()
    assert row == (200,)
    assert sum(flushes) == 200
    assert len(flushes) < 50  # group commit: many callers' batches per transaction


async def test_a_second_server_is_refused_until_the_first_closes(pg_url: str) -> None:
    first = await open_pg(pg_url, advertise_url="http://first:8080")
    try:
        with pytest.raises(DataDirLockedError, match="http://first:8080"):
            await open_pg(pg_url)
    finally:
        await first.close()  # releases the lease
    second = await open_pg(pg_url)
    try:
        assert second.lease.epoch == 2
    finally:
        await second.close()


async def test_every_server_sharing_the_store_knows_the_others(pg_url: str) -> None:
    """The active (its store) and a standby (its lease watch) each keep a row in
    ``members`` and read everyone's: each knows both; a standby that stops is dropped
    at the active's next renewal, and a dead server lingers a while, then is dropped."""
    active = await open_pg(
        pg_url, lease_timeout=0.3, member="a", advertise_url="http://a", advertise_kafka="a:9092"
    )
    watch = LeaseWatch(pg_url, member=Member("b", "http://b", "b:9092"), ttl=0.3)
    try:
        lease = await watch.read()
        assert lease is not None
        assert lease.active_kafka == "a:9092"
        assert watch.members == (
            Member("a", "http://a", "a:9092"),
            Member("b", "http://b", "b:9092"),
        )

        async def the_active_knows(names: set[str]) -> bool:
            return {m.member for m in active.members} == names

        await wait_until(lambda: the_active_knows({"a", "b"}), 10, "the active to see b")
        await watch.close()  # b stops: its row goes
        await wait_until(lambda: the_active_knows({"a"}), 10, "the active to drop b")
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
            # c died (its row expired) a little while ago: listed; d long ago: not
            for member, ago in (("c", 1.0), ("d", LINGER + 5)):
                await other.execute(
                    "INSERT INTO members VALUES (%s, NULL, %s, clock_timestamp()"
                    " - make_interval(secs => %s))",
                    (member, f"{member}:9092", ago),
                )
        await wait_until(lambda: the_active_knows({"a", "c"}), 10, "the active to see c, not d")
    finally:
        await watch.close()
        await active.close()
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
        rows = await (await other.execute("SELECT member FROM members ORDER BY 1")).fetchall()
    assert rows == [("c",), ("d",)]  # a closed cleanly: its row went with it


async def test_a_store_whose_lease_was_taken_over_writes_nothing_and_fails(
    store: PgStore, pg_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
        await other.execute("UPDATE leases SET epoch = epoch + 1, holder = 'usurper'")
        batch = WriteBatch()
        batch.create_topic(0, "a", 1)
        with pytest.raises(EngineFailedError, match="epoch"):
            await store.write(batch)
        row = await (await other.execute("SELECT count(*) FROM topics")).fetchone()
        assert row == (0,)
    assert store.failure is not None
    with pytest.raises(EngineFailedError):
        store.submit(WriteBatch())


async def test_the_renewal_notices_a_takeover(pg_url: str) -> None:
    store = await open_pg(pg_url, lease_timeout=0.3)
    failed = asyncio.Event()
    store.on_failure = lambda exc: failed.set()
    try:
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
            await other.execute("UPDATE leases SET epoch = epoch + 1, holder = 'usurper'")
        await asyncio.wait_for(failed.wait(), 5)
        assert store.lease.epoch is None
    finally:
        await store.close()


async def test_a_writer_connection_lost_between_flushes_is_replaced(
    store: PgStore, pg_url: str
) -> None:
    batch = WriteBatch()
    batch.create_topic(0, "a", 1)
    await store.write(batch)
    writer = store._writer
    assert writer is not None
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
        await other.execute("SELECT pg_terminate_backend(%s)", (writer.info.backend_pid,))
        batch = WriteBatch()
        batch.create_topic(1, "b", 2)
        await store.write(batch)  # fails on the dead connection, settles, retries
        row = await (await other.execute("SELECT count(*) FROM topics")).fetchone()
    assert row == (2,)
    assert store.failure is None


async def test_pipelined_flushes_whose_connection_dies_are_stored_once_in_order(
    store: PgStore, pg_url: str
) -> None:
    """Eight writers keep two flushes in flight while the writer's backend is ended again
    and again: each flush then fails with another behind it, is settled, and both go
    again in order. Every acknowledged write is stored, none twice (a row written twice
    would fail the store: the log's key is unique), and in submission order."""
    batch = WriteBatch()
    batch.create_topic(0, "a", 1)
    await store.write(batch)
    assert store.pipeline_depth == 2
    acked: list[int] = []
    submitted = 0
    most_in_flight = 0
    stop = asyncio.Event()

    async def writer() -> None:
        nonlocal submitted, most_in_flight
        while not stop.is_set():
            entry = submitted
            submitted += 1
            batch = WriteBatch()
            batch.insert_entries([(0, 0, entry, 0, None, b"x" * 100)])
            future = store.submit(batch)
            most_in_flight = max(most_in_flight, len(store._inflight))
            assert future is not None
            await future
            acked.append(entry)

    writers = [asyncio.create_task(writer()) for _ in range(8)]
    ended = 0
    async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as other:
        for _ in range(5):
            await wait_until(_more(acked, 200), 30, "writes to go on")
            writer_conn = store._writer
            assert writer_conn is not None
            row = await (
                await other.execute(
                    "SELECT pg_terminate_backend(%s)", (writer_conn.info.backend_pid,)
                )
            ).fetchone()
            ended += row == (True,)
        await wait_until(_more(acked, 200), 30, "writes to go on after the last")
        stop.set()
        await asyncio.gather(*writers)
        rows = await (
            await other.execute("SELECT entry_id FROM entries ORDER BY ledger_id, entry_id")
        ).fetchall()
    stored = [entry for (entry,) in rows]
    assert store.failure is None
    assert ended >= 3
    assert most_in_flight == 2
    assert set(acked) <= set(stored)
    assert stored == sorted(set(stored))
    # everything submitted, in submission order (every writer's last write was awaited)
    assert stored == list(range(submitted))


async def test_a_flush_in_doubt_is_read_only_once_its_backend_ended(
    store: PgStore, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's backend is stopped with a flush unread in its socket, and the
    connection then fails on our side (as a network cut or a timeout would): the flush
    is in doubt, yet not started, so it holds no lock. Its outcome is read only once
    that backend has ended (here: woken, it commits the flush and exits), so the flush
    completes as committed, once; read while the backend lived, "not committed" would
    have sent it again, onto the rows the backend went on to commit, failing the store."""
    batch = WriteBatch()
    batch.create_topic(0, "a", 1)
    await store.write(batch)
    writer = store._writer
    assert writer is not None
    backend = writer.info.backend_pid
    read_outcome = asyncio.Event()
    real_flush_committed = _pg_store.flush_committed

    async def flush_committed(*args: Any, **kwargs: Any) -> bool:
        committed = await real_flush_committed(*args, **kwargs)
        read_outcome.set()
        # a backend that was still alive goes on now, after the reading
        _signal(backend, signal.SIGCONT)
        await wait_until(_stored(pg_url, 1), 10, "the woken backend to commit")
        return committed

    monkeypatch.setattr(_pg_store, "flush_committed", flush_committed)
    try:
        os.kill(backend, signal.SIGSTOP)
    except PermissionError:
        pytest.skip("cannot signal PostgreSQL's processes (run as root or postgres)")
    try:
        batch = WriteBatch()
        batch.insert_entries([(0, 0, 0, 0, None, b"in doubt")])
        future = store.submit(batch)
        assert future is not None
        await wait_until(_sent(writer), 10, "the flush to be sent")
        with socket.socket(fileno=os.dup(writer.pgconn.socket)) as sock:
            sock.shutdown(socket.SHUT_RDWR)  # our side of the connection fails
        # The settle must wait for the backend: give a reading before then the time to
        # happen (it would at once), then wake the backend ourselves.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(read_outcome.wait(), 2.0)
        _signal(backend, signal.SIGCONT)
        await asyncio.wait_for(future, 30)
    finally:
        _signal(backend, signal.SIGCONT)
    assert store.failure is None
    assert await _stored(pg_url, 1)()
    batch = WriteBatch()
    batch.insert_entries([(0, 0, 1, 0, None, b"after")])
    await store.write(batch)  # and the store goes on
    assert await _stored(pg_url, 2)()


def _sent(conn: psycopg.AsyncConnection[Any]) -> Callable[[], Awaitable[bool]]:
    """A condition for :func:`wait_until`: a flush was sent on ``conn`` and awaits its
    answer."""

    async def check() -> bool:
        state = _pg_write._WRITERS.get(conn)
        return state is not None and state.last is not None

    return check


def _stored(url: str, n: int) -> Callable[[], Awaitable[bool]]:
    """A condition: exactly ``n`` log entries are committed."""

    async def check() -> bool:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            row = await (await conn.execute("SELECT count(*) FROM entries")).fetchone()
        return row == (n,)

    return check


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _more(acked: list[int], n: int) -> Callable[[], Awaitable[bool]]:
    """A condition for :func:`wait_until`: ``n`` more acknowledgements than now."""
    target = len(acked) + n

    async def check() -> bool:
        return len(acked) >= target

    return check


async def test_writes_go_on_after_a_postgresql_restart(pg_cluster: Cluster, store: PgStore) -> None:
    batch = WriteBatch()
    batch.create_topic(0, "a", 1)
    await store.write(batch)
    await asyncio.to_thread(pg_cluster.kill)
    await asyncio.to_thread(pg_cluster.start)
    batch = WriteBatch()
    batch.create_topic(1, "b", 2)
    await store.write(batch)
    assert [row[1] for row in await store.topic_rows()] == ["a", "b"]
    assert store.failure is None


async def test_the_lease_is_renewed_again_after_postgresql_was_down(
    pg_cluster: Cluster, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A lease long enough to outlast the restart even on a loaded machine (past it, the
    # store rightly steps down instead: a standby may have taken over).
    store = await open_pg(pg_url, lease_timeout=12)
    try:
        await asyncio.to_thread(pg_cluster.kill)

        async def renewal_failed() -> bool:
            return "lease renewal failed" in caplog.text

        await wait_until(renewal_failed, 20, "a renewal to fail")  # the store keeps trying
        await asyncio.to_thread(pg_cluster.start)
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:

            async def renewed() -> bool:
                cur = await conn.execute("SELECT expires_at > clock_timestamp() FROM leases")
                return await cur.fetchone() == (True,)

            await wait_until(renewed, 20, "a renewal after the restart")
        batch = WriteBatch()
        batch.create_topic(0, "a", 1)
        await store.write(batch)
        assert store.failure is None
        assert store.lease.epoch == 1
    finally:
        await store.close()


async def test_a_page_of_a_long_unanalyzed_log_is_read_in_index_order(store: PgStore) -> None:
    # A fresh table has no statistics: the planner's default estimate for the keyset
    # condition is a few rows, and with bitmap scans allowed it reads the whole range to
    # the end, then sorts it, for every page (draining a topic became quadratic).
    setup = WriteBatch()
    setup.create_topic(0, "a", 1)
    setup.open_ledger(0, 0, 1, 0)
    setup.insert_entries((0, 0, i, 0, None, b"v" * 100) for i in range(20_000))
    await store.write(setup)
    plan = "\n".join(
        line
        for (line,) in await store.read(
            "EXPLAIN (ANALYZE, COSTS OFF) " + RANGE, (0, 0, 100, 0, 1 << 40, 1000)
        )
    )
    assert "Index Scan using entries_pkey" in plan, plan
    assert "Bitmap" not in plan, plan
    assert "Sort" not in plan, plan
    rows = await store.read_range(0, P(0, 100), P(0, 1 << 40), 1000)
    assert [row[1] for row in rows] == list(range(100, 1100))


async def test_a_page_many_times_libpqs_input_buffer_is_read_whole(store: PgStore) -> None:
    # The read connections read what the socket holds before waiting again, at most
    # _EAGER_READS reads of libpq's 16 kB buffer per event-loop step: a 2 MB page takes
    # several steps, and comes back whole and in order.
    setup = WriteBatch()
    setup.create_topic(0, "a", 1)
    setup.open_ledger(0, 0, 1, 0)
    setup.insert_entries((0, 0, i, i % 2, i, i.to_bytes(4, "big") * 256) for i in range(2000))
    await store.write(setup)
    rows = await store.read_range(0, P(0, 0), P(0, 1 << 40), 5000)
    assert rows == [(0, i, i % 2, i, i.to_bytes(4, "big") * 256) for i in range(2000)]
