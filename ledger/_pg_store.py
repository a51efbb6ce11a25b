"""The PostgreSQL store: one database that several servers may open, one of them active.

* **Leadership.** Opening takes the store's lease (:mod:`._pg_lease`) with the next epoch,
  or raises :class:`~txnstream.ledger.DataDirLockedError` naming the active that holds it
  (standby mode is the next step). A task this store owns renews the lease every third of
  ``lease_timeout``; when a renewal finds the lease taken over, the store fails (the
  owner reopens). Closing releases it, so a standby need not wait out the expiry.
* **Writes.** The group commit of :class:`~txnstream.ledger.Store` is unchanged: one flush
  takes every batch queued since the last, and :func:`._pg_write.apply_flush` applies it
  on the writer's own connection as one PostgreSQL transaction, fence first, pipelined
  (one round trip plus PostgreSQL's COMMIT). Two flushes may be in flight: the next goes
  while the previous commits, and commits only if that one did
  (:attr:`PgStore.pipeline_depth`). A flush completes (its callbacks run, its
  waiters wake) only after COMMIT returned, so durability is PostgreSQL's:
  ``synchronous_commit`` and ``synchronous_standby_names`` decide what a returned COMMIT
  survives. A flush whose COMMIT answer was lost is settled on a new connection, once
  its backend has ended (:func:`._pg_write.flush_committed`): committed, it completes;
  not, it is retried.
* **Reads** go to a pool of autocommit connections (``psycopg_pool``); each sees what
  was committed when it began and never waits for the writer (MVCC).

The statements are :mod:`._pg_sql`'s; the typed reads over them :class:`._sql_reads.SqlStore`'s
(shared with SQLite: this store adds the recovery prefetch); the schema and its migrations
:mod:`._pg_schema`'s.
This is the only module that opens PostgreSQL connections for the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import select
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import psycopg
from psycopg.abc import PQGen
from psycopg.waiting import Ready, Wait
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from . import _pg_sql as sql
from ._batch import Params, WriteBatch
from ._errors import DataDirLockedError, EngineFailedError, LeaseLostError
from ._pg_lease import STORE_SCOPE, Lease, LeaseState, read_lease
from ._pg_members import announce, read_members, withdraw
from ._pg_schema import migrate
from ._pg_url import redact
from ._pg_write import PredecessorNotCommitted, Run, apply_flush, flush_committed
from ._sql_reads import ReadStatements, SqlStore
from ._store import Member, Row, StorageMetrics, process_id

log = logging.getLogger("txnstream.store")
_R = TypeVar("_R")

_APPLICATION = "txnstream"
_SETTLE_MIN_SECONDS = 5.0


def session_name(holder: str) -> str:
    """The ``application_name`` of every session of the server ``holder`` (a standby that
    takes an expired lease over ends that server's sessions by it)."""
    return f"{_APPLICATION} {hashlib.sha256(holder.encode()).hexdigest()[:16]}"


_TOPIC_NAMES = "SELECT name FROM topics ORDER BY name"
_PARTITIONED = "SELECT name, partitions FROM partitioned_topics"
_END_SESSIONS = """
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND application_name = %s AND pid <> pg_backend_pid()
"""


_MY_BACKEND = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
_BACKEND_LIVES = "SELECT 1 FROM pg_stat_activity WHERE pid = %s AND backend_start = %s"

Backend = tuple[int, Any]
"""A server process of PostgreSQL's: its pid and start time (a pid is reused; the pair
is not)."""


async def _connect_writer(
    url: str, holder: str, lease_timeout: float, connect_timeout: int
) -> tuple[psycopg.AsyncConnection[Any], Backend | None]:
    """A writer session of the server ``holder``, and the server process behind it
    (None if PostgreSQL does not show it; see :meth:`PgStore._settle`)."""
    conn = await psycopg.AsyncConnection.connect(
        url,
        autocommit=True,
        application_name=session_name(holder),
        connect_timeout=connect_timeout,
        options=_session_options(lease_timeout),
    )
    try:
        row = await (await conn.execute(_MY_BACKEND)).fetchone()
    except BaseException:
        await conn.close()
        raise
    return conn, None if row is None else (int(row[0]), row[1])


class _StillRunning(Exception):
    """The backend of a flush in doubt still runs: its outcome is not known yet."""


async def _wait_backend_ended(
    conn: psycopg.AsyncConnection[Any], backend: Backend, deadline: float
) -> None:
    """Return once ``backend`` no longer runs (polled on ``conn``); raise
    :class:`_StillRunning` if it still does at ``deadline`` (the loop's clock)."""
    loop = asyncio.get_running_loop()
    delay = 0.005
    while await (await conn.execute(_BACKEND_LIVES, backend)).fetchone() is not None:
        if loop.time() + delay > deadline:
            raise _StillRunning(f"the backend {backend[0]} of the flush in doubt still runs")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)


def _session_options(lease_timeout: float) -> str:
    """libpq ``options`` of this store's sessions.

    PostgreSQL ends a transaction left idle for the lease timeout. A server paused
    (SIGSTOP, a VM freeze) inside a write or a renewal would otherwise hold the lease
    row's lock, and so block the standby's takeover, until it woke; ended, its
    transaction rolls back and it writes nothing.

    No bitmap scans: every read of the log is a keyset page (``(ledger_id, entry_id) >=
    ... ORDER BY ... LIMIT n``) of the newest rows, which the statistics of an
    append-only table never describe (fresh topics, the tail beyond the histogram). The
    planner then estimates a handful of rows, picks a bitmap scan of the whole range from
    the cursor to the end, sorts it and keeps ``n``: each page costs the whole backlog
    (70 ms instead of 0.4 ms for a page of 1,000 of 22,000 rows), and draining a topic
    is quadratic. An index scan reads the page in order and stops."""
    milliseconds = max(1, round(lease_timeout * 1000))
    return f"-c idle_in_transaction_session_timeout={milliseconds} -c enable_bitmapscan=off"


_EAGER_READS = 64
"""Socket reads a read connection makes in one event-loop step (libpq reads at most its
input buffer, 16 kB, at a time: ~1 MB), so a long result still lets the loop poll."""


def _read_what_arrived(gen: PQGen[_R], fileno: int) -> PQGen[_R]:
    """``gen`` (a psycopg generator on the connection with socket ``fileno``), except
    that when it asks to wait for the socket to be readable and the socket already is,
    it reads at once instead of going back to the event loop first."""
    if not hasattr(select, "poll"):  # (Windows) wait as psycopg does
        return (yield from gen)
    poller = select.poll()
    poller.register(fileno, select.POLLIN)
    try:
        state = next(gen)
        while True:
            for _ in range(_EAGER_READS):
                if state != Wait.R or not poller.poll(0):
                    break
                state = gen.send(Ready.R)
            state = gen.send((yield state))
    except StopIteration as done:
        result: _R = done.value
        return result


class _ReadConnection(psycopg.AsyncConnection[Any]):
    """A connection of the read pool: reads what the socket holds before waiting again.

    psycopg takes a result in libpq's 16 kB reads and goes back to the event loop after
    each one, though more has arrived meanwhile: a page of 1,000 log rows (~190 kB) made
    ~11 loop round trips of ~40 us of Python each, about as much as making its rows. A
    prefetched page usually lies in the socket whole by the time its read resumes; it
    now takes a round trip or two. (Only the waiting changes: psycopg's generators do
    the reading, and cancellation and timeouts are its own.)"""

    async def wait(self, gen: PQGen[_R], *args: Any, **kwargs: Any) -> _R:
        """psycopg's :meth:`~psycopg.AsyncConnection.wait` on :func:`_read_what_arrived`."""
        return await super().wait(_read_what_arrived(gen, self.pgconn.socket), *args, **kwargs)


class _NotCommitted(Exception):
    """A flush failed on its connection and settled as not committed: safe to retry."""


_RECOVERY_READERS = 4
"""Read connections while every topic loads (measured on 1,000 topics, a loaded 2-core
machine: 4.9 s with 2, 3.5 s with 4); the pool shrinks back after (its idle extras close
within psycopg_pool's max_idle)."""


@dataclass(slots=True)
class _Prefetched:
    """Every topic's recovery rows, read at once (:meth:`PgStore.prefetch_recovery`); each
    answer is handed out once, later reads of the same rows go to the database."""

    topics: set[int]
    ledgers: dict[int, list[Row]] = field(default_factory=dict)
    ledgers_taken: set[int] = field(default_factory=set)
    totals: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    snapshots: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    snapshots_taken: set[int] = field(default_factory=set)
    snapshot_ids: dict[int, int] = field(default_factory=dict)
    segments: dict[int, int] = field(default_factory=dict)
    counters_taken: set[int] = field(default_factory=set)
    producers: dict[int, list[Row]] = field(default_factory=dict)
    producers_taken: set[int] = field(default_factory=set)


def _take_once(rows: dict[int, list[_R]], taken: set[int], topic_id: int) -> list[_R] | None:
    """A topic's prefetched rows the first time they are asked for; None after (read)."""
    found = rows.pop(topic_id, None)
    if found is None and topic_id in taken:
        return None
    taken.add(topic_id)
    return found or []


class PgStore(SqlStore):
    """The store on a PostgreSQL database: see the module docstring."""

    _sql: ClassVar[ReadStatements] = sql

    kick_at_once = True  # the writer is a server beside the loop, not a thread in it
    read_ahead = True  # and so are the readers

    def __init__(
        self,
        url: str,
        writer: psycopg.AsyncConnection[Any],
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]],
        lease: Lease,
        *,
        max_pending_entries: int,
        member: Member | None = None,
    ) -> None:
        super().__init__(None, max_pending_entries=max_pending_entries)
        self.url = url
        self._writer: psycopg.AsyncConnection[Any] | None = writer
        self._writer_backend: Backend | None = None
        """The server process of ``_writer`` (see :meth:`_settle`)."""
        self._pool = pool
        self.lease = lease
        """This server's claim on the store (its epoch fences every flush)."""
        self.member = member
        """This server's row in ``members`` (None: it keeps none)."""
        self._flush_seq = 0
        self._flush_task: asyncio.Task[None] | None = None
        """The last flush sent (those before it are done or awaited by it)."""
        self._connecting = asyncio.Lock()  # one writer connection at a time is made
        self._renew_task: asyncio.Task[None] | None = None
        self._database_bytes = 0
        self._connect_timeout = 10
        self._prefetched: _Prefetched | None = None
        self._readers = pool.max_size

    @classmethod
    async def open(  # type: ignore[override]
        cls,
        url: str,
        *,
        readers: int = 2,
        max_pending_entries: int = 20_000,
        lease_timeout: float = 5.0,
        holder: str | None = None,
        advertise_url: str | None = None,
        advertise_kafka: str | None = None,
        member: str | None = None,
        connect_timeout: float = 10.0,
    ) -> PgStore:
        """Connect to the database at ``url`` (a libpq URL), migrate its schema, take the
        store's lease and start renewing it. With a ``member`` id, the server also keeps
        its row in ``members`` (:mod:`._pg_members`) while it serves.

        Raises :class:`~txnstream.ledger.DataDirLockedError` when another server holds
        the lease, :class:`~txnstream.ledger.EngineFailedError` when the database cannot
        be reached.
        """
        holder = holder or process_id()
        lease = Lease(holder, advertise_url, lease_timeout, kafka=advertise_kafka)
        me = None if member is None else Member(member, advertise_url, advertise_kafka)
        try:
            writer, backend = await _connect_writer(
                url, holder, lease_timeout, max(1, round(connect_timeout))
            )
        except psycopg.OperationalError as exc:  # the engine's errors, not the driver's
            raise EngineFailedError(f"cannot connect to the store at {redact(url)}: {exc}") from exc
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None
        try:
            await migrate(writer)
            if not await lease.try_acquire(writer):
                state = await read_lease(writer)
                active = "another server" if state is None else f"{state.holder} ({state.url})"
                raise DataDirLockedError(
                    f"the store at {redact(url)} is served by {active}: its lease runs"
                    " until it expires or is released"
                )
            pool = AsyncConnectionPool(
                url,
                connection_class=_ReadConnection,
                min_size=readers,
                max_size=readers,
                kwargs={
                    "autocommit": True,
                    "application_name": session_name(holder),
                    "options": _session_options(lease_timeout),
                },
                open=False,
                name="txnstream-readers",
            )
            await pool.open(wait=True, timeout=connect_timeout)
            if me is not None:
                await announce(writer, me, lease_timeout)
            members = await read_members(writer)
        except BaseException:
            if pool is not None:
                await pool.close()
            with contextlib.suppress(psycopg.Error):
                await lease.release(writer)
            await writer.close()
            raise
        store = cls(
            url,
            writer,
            pool,
            lease,
            max_pending_entries=max_pending_entries,
            member=me,
        )
        store.members = members
        store._writer_backend = backend
        store._connect_timeout = max(1, round(connect_timeout))
        store._renew_task = asyncio.create_task(store._renew(), name="txnstream-lease")
        return store

    # -- the lease -----------------------------------------------------------------

    async def _renew(self) -> None:
        """Renew the lease every third of its timeout until it is lost or we close."""
        lease = self.lease
        while True:
            await asyncio.sleep(lease.ttl / 3)
            try:
                async with self._pool.connection(timeout=lease.ttl / 3) as conn:
                    held = await lease.renew(conn)
                    if held and self.member is not None:
                        await announce(conn, self.member, lease.ttl)
                    self.members = await read_members(conn)
                    row = await (
                        await conn.execute("SELECT pg_database_size(current_database())")
                    ).fetchone()
                    if row is not None:
                        self._database_bytes = int(row[0])
            except (psycopg.Error, PoolTimeout) as exc:
                # The database is unreachable: keep trying while the lease is surely still
                # ours (writes stay safe meanwhile: each flush checks the epoch itself).
                # Past that a standby may have taken over: step down.
                if not lease.held:
                    self._fail(
                        LeaseLostError(
                            f"the store's lease could not be renewed in time: {exc}",
                            STORE_SCOPE,
                            -1,
                        ),
                        [],
                    )
                    return
                log.warning("lease renewal failed, retrying: %s", exc)
                continue
            except Exception as exc:  # noqa: BLE001 - anything else: the store fails
                self._fail(exc, [])
                return
            if not held:
                log.error("the store's lease was taken over: this server steps down")
                self._fail(
                    LeaseLostError(
                        f"the store's lease (epoch {lease.epoch}) was taken over",
                        STORE_SCOPE,
                        -1,
                    ),
                    [],
                )
                return

    # -- the writer ----------------------------------------------------------------

    pipeline_depth = 2
    """A second flush travels while the first commits (see :mod:`._pg_write`), so the
    writer's round trip and the loop's turn no longer lie between two flushes (once
    it is as large as the first: see :meth:`Store._room`). A third in flight gained
    nothing more."""

    def _hop(self, batch: WriteBatch) -> None:
        # An operation the table does not name is PostgreSQL SQL already (this store's
        # own tests queue raw statements); the layers above only queue typed operations.
        writes = sql.WRITES
        runs: list[Run] = [(writes.get(op, op), rows) for op, rows in batch.ops]
        before = self._flush_task
        if before is not None and before.done():
            before = None
        after = self._flush_seq if before is not None else None
        self._flush_seq += 1
        self._flush_task = asyncio.create_task(self._apply(runs, self._flush_seq, after, before))

    async def _apply(
        self, runs: list[Run], seq: int, after: int | None, before: asyncio.Task[None] | None
    ) -> None:
        """Apply one flush, pipelined behind ``before`` (flush ``after``) when that one
        has not answered yet, and answer in order: after ``before`` did."""
        error: BaseException | None = None
        epoch = self.lease.epoch
        if epoch is None:
            error = LeaseLostError("this server lost the store's lease", STORE_SCOPE, -1)
        else:
            claims = {STORE_SCOPE: epoch}
            try:
                backend = None
                conn = await self._writer_connection(before)
                backend = self._writer_backend
                await apply_flush(conn, claims, runs, seq, after=after)
            except psycopg.OperationalError as exc:
                if before is not None:  # its doubt first: this one commits only after it
                    await asyncio.wait([before])
                error = await self._settle(claims, seq, exc, backend)
            except PredecessorNotCommitted as exc:
                error = _NotCommitted(str(exc))
            except Exception as exc:  # noqa: BLE001 - a failed flush is handed to _hopped
                error = exc
        if before is not None:
            await asyncio.wait([before])  # (a task that failed or was cancelled counts)
        self._hopped(error)

    async def _writer_connection(
        self, before: asyncio.Task[None] | None = None
    ) -> psycopg.AsyncConnection[Any]:
        """The writer connection, a new one if it broke. A flush behind ``before`` takes
        the one ``before`` went on as it is (broken, it fails there too, and is settled
        after ``before``); it connects itself only if ``before`` could not (its check
        that ``before`` committed still orders it)."""
        async with self._connecting:  # (in order: a flush behind gets its predecessor's)
            writer = self._writer
            if before is not None and writer is not None:
                return writer
            if writer is None or writer.closed or writer.broken:
                if writer is not None:
                    await writer.close()
                self._writer = self._writer_backend = None
                writer, self._writer_backend = await _connect_writer(
                    self.url, self.lease.holder, self.lease.ttl, self._connect_timeout
                )
                self._writer = writer
            return writer

    async def _settle(
        self,
        claims: Mapping[str, int],
        seq: int,
        exc: BaseException,
        backend: Backend | None,
    ) -> BaseException | None:
        """The flush failed on its connection: None if it committed anyway, else the
        error to hand on (:class:`_NotCommitted`, retried, when it surely did not).

        The outcome is read once the flush's server process (``backend``) has ended: a
        connection that failed on our side (a network cut, a timeout) may leave its
        backend alive with the flush still unread in its socket, to commit it later,
        after a reading that said "not committed" (and a retry of it would then find
        its rows taken and fail the store). Waiting for the lease row's lock alone does
        not cover that: the flush takes it only once it runs. (Never ended by us: a
        backend waiting for a synchronous standby would leave a commit that is local
        only, which the reading would then call committed.)

        While the database is unreachable (restarting, failing over) the outcome is
        asked again with backoff, for up to the lease timeout (at least 5 s)."""
        log.warning("flush %d failed on its connection (%s): settling its outcome", seq, exc)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self.lease.ttl, _SETTLE_MIN_SECONDS)
        delay = 0.05
        while True:
            try:
                left = max(0.1, deadline - loop.time())
                async with self._pool.connection(timeout=left) as conn:
                    if backend is not None:
                        await _wait_backend_ended(conn, backend, deadline)
                        left = max(0.1, deadline - loop.time())
                    committed = await flush_committed(conn, claims, seq, lock_timeout=left)
                break
            except LeaseLostError as lost:
                return lost
            except _StillRunning as running:
                return running  # the outcome stays unknown
            except (psycopg.Error, PoolTimeout) as settle_error:
                if loop.time() + delay > deadline:
                    return settle_error  # still unreachable: the outcome stays unknown
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        if committed:
            log.warning("flush %d had committed: it completes", seq)
            return None
        error = _NotCommitted(f"flush {seq} did not commit: {exc}")
        error.__cause__ = exc
        return error

    def _transient(self, exc: BaseException) -> bool:
        return isinstance(exc, _NotCommitted)

    async def _close_connections(self) -> None:
        for task in (self._renew_task, self._flush_task):
            if task is not None and not task.done():
                task.cancel()
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            writer = self._writer
            if writer is not None and not writer.broken:
                if self.failure is None:
                    with contextlib.suppress(psycopg.Error):
                        await self.lease.release(writer)
                        if self.member is not None:
                            await withdraw(writer, self.member.member)
                await writer.close()
        finally:
            self._writer = None
            await self._pool.close()

    def storage_metrics(self) -> StorageMetrics:
        """The database's size (``pg_database_size``, refreshed with each lease renewal);
        PostgreSQL's WAL is the server's, not this database's: 0."""
        return StorageMetrics(database_bytes=self._database_bytes, wal_bytes=0)

    # -- reading -------------------------------------------------------------------

    async def read(
        self, query: str, params: Params | Mapping[str, Any] = (), *, binary: bool = False
    ) -> list[Row]:
        """Run PostgreSQL SQL on a pooled read connection; sees only committed data.
        (The typed reads use it, and this store's tests and tools.)

        ``binary``: results in PostgreSQL's binary format, for rows of integers and
        ``bytea`` (the log's): a payload travels as its bytes, not as hex text twice its
        size that the server encodes and psycopg decodes on the event loop."""
        self._check_readable()
        attempts = self._pool.max_size + 1
        for attempt in range(1, attempts + 1):
            async with self._pool.connection() as conn:
                try:
                    cur = await conn.execute(query, params, binary=binary)
                    return await cur.fetchall()
                except psycopg.OperationalError:
                    # A connection a database restart broke fails its first use (the
                    # pool replaces it): a read is safe to run again, on the next one.
                    if not conn.broken or attempt == attempts:
                        raise
        raise AssertionError("unreachable")

    # -- recovery: every topic's rows in a few queries --------------------------------

    async def prefetch_recovery(self) -> None:
        """Six queries instead of five per topic: a standby taking over loads every topic,
        and each read is a round trip (on a loaded machine, milliseconds). The reads left
        (each topic's tail) get more connections until :meth:`end_recovery`."""
        self._check_readable()
        if self._pool.max_size < _RECOVERY_READERS:
            await self._pool.resize(self._pool.min_size, _RECOVERY_READERS)
        prefetched = _Prefetched(
            {int(topic_id) for (topic_id,) in await self.read(sql.ALL_TOPIC_IDS)}
        )
        for topic_id, *row in await self.read(sql.ALL_LEDGERS):
            prefetched.ledgers.setdefault(int(topic_id), []).append(tuple(row))
        for topic_id, ledger_id, entries, size in await self.read(sql.ALL_OPEN_LEDGER_TOTALS):
            prefetched.totals[int(topic_id), int(ledger_id)] = (int(entries), int(size))
        for topic_id, snapshot_id, data in await self.read(sql.ALL_SNAPSHOTS):
            prefetched.snapshots.setdefault(int(topic_id), []).append((snapshot_id, data))
            newest = prefetched.snapshot_ids.get(int(topic_id), -1)
            prefetched.snapshot_ids[int(topic_id)] = max(newest, int(snapshot_id))
        for topic_id, segment_id in await self.read(sql.ALL_SEGMENT_COUNTERS):
            prefetched.segments[int(topic_id)] = int(segment_id)
        for topic_id, *row in await self.read(sql.ALL_PRODUCERS):
            prefetched.producers.setdefault(int(topic_id), []).append(tuple(row))
        self._prefetched = prefetched

    async def end_recovery(self) -> None:
        self._prefetched = None
        if self._pool.max_size != self._readers:
            await self._pool.resize(self._readers, self._readers)

    def _prefetched_for(self, topic_id: int) -> _Prefetched | None:
        """The prefetched rows, if they cover ``topic_id`` (else: read it now)."""
        prefetched = self._prefetched
        return prefetched if prefetched is not None and topic_id in prefetched.topics else None

    async def ledger_rows(self, topic_id: int) -> list[Row]:
        if (prefetched := self._prefetched_for(topic_id)) is not None:
            rows = _take_once(prefetched.ledgers, prefetched.ledgers_taken, topic_id)
            if rows is not None:
                return rows
        return await super().ledger_rows(topic_id)

    async def ledger_totals(self, topic_id: int, ledger_id: int) -> tuple[int, int]:
        if (prefetched := self._prefetched_for(topic_id)) is not None:
            totals = prefetched.totals.pop((topic_id, ledger_id), None)
            if totals is not None:
                return totals
        return await super().ledger_totals(topic_id, ledger_id)

    async def read_log(self, query: str, params: Params) -> list[Row]:
        return await self.read(query, params, binary=True)

    async def producer_rows(self, topic_id: int) -> list[Row]:
        if (prefetched := self._prefetched_for(topic_id)) is not None:
            rows = _take_once(prefetched.producers, prefetched.producers_taken, topic_id)
            if rows is not None:
                return rows
        return await super().producer_rows(topic_id)

    async def snapshot_rows(self, topic_id: int) -> list[tuple[int, bytes]]:
        if (prefetched := self._prefetched_for(topic_id)) is not None:
            rows = _take_once(prefetched.snapshots, prefetched.snapshots_taken, topic_id)
            if rows is not None:
                return rows
        return await super().snapshot_rows(topic_id)

    async def snapshot_counters(self, topic_id: int) -> tuple[int, int]:
        prefetched = self._prefetched_for(topic_id)
        if prefetched is not None and topic_id not in prefetched.counters_taken:
            prefetched.counters_taken.add(topic_id)
            snapshots = prefetched.snapshot_ids.get(topic_id, -1)
            return snapshots, prefetched.segments.get(topic_id, -1)
        return await super().snapshot_counters(topic_id)


class LeaseWatch:
    """A standby's view of the store's lease: who is active and where, read on one
    connection of its own (reconnected when it breaks)."""

    def __init__(
        self,
        url: str,
        *,
        member: Member | None = None,
        ttl: float = 5.0,
        connect_timeout: float = 5.0,
    ) -> None:
        self.url = url
        self.member = member
        """This standby's row in ``members``, announced (and everyone's read) every
        third of ``ttl`` (None: it keeps none)."""
        self.members: tuple[Member, ...] = ()
        """The servers sharing the store, as last read."""
        self._ttl = ttl
        self._announced = -math.inf
        self._connect_timeout = max(1, round(connect_timeout))
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def read(self) -> LeaseState | None:
        """The store's lease row, or None when nobody ever held it, the schema is not
        made yet, or the database cannot be reached now (logged)."""
        try:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                if conn is not None:
                    await conn.close()
                self._conn = None
                conn = self._conn = await psycopg.AsyncConnection.connect(
                    self.url,
                    autocommit=True,
                    application_name=_APPLICATION,
                    connect_timeout=self._connect_timeout,
                )
            lease = await read_lease(conn)
            now = time.monotonic()
            if now - self._announced >= self._ttl / 3:  # (the lease itself every poll)
                if self.member is not None:
                    await announce(conn, self.member, self._ttl)
                self.members = await read_members(conn)
                self._announced = now
            return lease
        except psycopg.errors.UndefinedTable:
            return None
        except psycopg.Error as exc:
            log.warning("cannot read the store's lease: %s", exc)
            return None

    async def end_sessions(self, lease: LeaseState) -> int:
        """End the sessions of the server that held ``lease`` (expired: it is dead, paused
        or cut off), so that a transaction it left open, holding the lease row's lock,
        rolls back instead of blocking the takeover until it wakes; returns how many.
        PostgreSQL lets a role end its own sessions."""
        if lease.holder is None or self._conn is None:
            return 0
        try:
            row = await (
                await self._conn.execute(_END_SESSIONS, (session_name(lease.holder),))
            ).fetchone()
        except psycopg.Error as exc:
            log.warning("cannot end the sessions of the expired active: %s", exc)
            return 0
        return 0 if row is None else int(row[0])

    async def catalog(self) -> tuple[list[str], dict[str, int]] | None:
        """The store's topic names and its partitioned topics (name -> partitions), as the
        active last committed them (a standby's Kafka listener answers Metadata with
        them); None when the database cannot be read now (logged)."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return None  # (the next lease read reconnects)
        try:
            topics = await (await conn.execute(_TOPIC_NAMES)).fetchall()
            partitioned = await (await conn.execute(_PARTITIONED)).fetchall()
        except psycopg.errors.UndefinedTable:
            return [], {}  # (no schema yet: no topics)
        except psycopg.Error as exc:
            log.warning("cannot read the store's topics: %s", exc)
            return None
        return [str(name) for (name,) in topics], {str(n): int(p) for n, p in partitioned}

    async def close(self, *, withdraw_member: bool = True) -> None:
        """Close the connection, removing this standby's row from ``members`` unless
        ``withdraw_member`` is False (it took over: the active's store keeps the row)."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if withdraw_member and self.member is not None and not conn.broken:
            with contextlib.suppress(psycopg.Error):
                await withdraw(conn, self.member.member)
        await conn.close()
