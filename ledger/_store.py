"""The SQLite store: one writer that group-commits, separate read connections.

This is the only module that imports aiosqlite. Design:

* One write connection, owned by the writer task. Callers build a :class:`WriteBatch`
  (statements plus callbacks) and :meth:`Store.submit` it; the writer takes every batch
  queued since its last flush and applies them in submission order inside ONE SQLite
  transaction, in ONE hop to the connection's thread (an awaited aiosqlite call costs far
  more than the statements themselves, so we count hops per flush, never per message).
* After the COMMIT returns, the batches' ``on_durable`` callbacks run on the event loop
  in submission order, then their futures complete. Durable state is therefore always a
  prefix of the submitted sequence, and in-memory state is published only after it is
  durable ("persist, then publish").
* Pipelined batches (``wait=False``: sends inside a transaction) do not wake the writer
  by themselves: they ride with the next batch someone waits for (the commit), or go
  after ``linger`` seconds, or as soon as ``flush_entries`` are queued. A transaction of
  N sends and a commit therefore costs one flush, like Kafka's producer with linger.
* A flush that fails is retried with backoff for transient errors; after that the store
  fails: every pending and later submission raises :class:`EngineFailedError` (or
  :class:`InsufficientStorageError` when the disk is full), and the owner reopens
  (recovery redoes the rest). A failed flush cannot be undone in memory — positions
  were assigned when the batches were prepared — so reopening is the only way back.
* Free space: with ``min_free_bytes`` set, :attr:`Store.space_low` says when the file
  system holds less than that. Owners refuse *new data* then (before preparing
  anything), so a full disk shows up as refused appends instead of a failed flush, and
  writes resume by themselves once space is freed.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import aiosqlite

from ._errors import ClosedError, EngineFailedError, InsufficientStorageError
from ._lock import DirectoryLock
from ._schema import migrate
from ._sqlwriter import Params, Statements, apply_flush, writer_pragmas
from ._writer_process import WriterProcess

log = logging.getLogger("txnstream.store")

_TRANSIENT = ("database is locked", "database table is locked", "disk i/o error")
_NO_SPACE = ("database or disk is full", "no space left", "quota exceeded")
_RETRY_DELAYS = (0.01, 0.05, 0.2, 0.5, 1.0)
_SPACE_CHECK_INTERVAL = 0.01  # statvfs costs ~1 us: fresh enough, yet not per batch under load


def is_no_space(exc: BaseException) -> bool:
    """True if ``exc`` says the disk (or a quota) is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(word in str(exc).lower() for word in _NO_SPACE)


class WriteBatch:
    """Statements that become durable together, plus what to do once they are.

    Build it and submit it without awaiting in between: positions assigned while
    building must reach the writer in the order they were assigned. Hot paths skip the
    separate batch: they add straight to :attr:`Store.batch` (the one the next flush
    takes) and then call :meth:`Store.submit` on it.
    """

    __slots__ = ("_callbacks", "_statements", "bytes", "entries")

    def __init__(self) -> None:
        self._statements: Statements = []
        self._callbacks: list[Callable[[], None]] = []
        self.entries = 0
        """Log entries this batch appends (for metrics and backpressure)."""
        self.bytes = 0
        """Payload bytes of those entries (for the free-space estimate)."""

    def add(self, sql: str, params: Params = ()) -> None:
        """Queue one statement."""
        statements = self._statements
        if statements and statements[-1][0] == sql:
            statements[-1][1].append(params)
        else:
            statements.append((sql, [params]))

    def add_many(self, sql: str, rows: Iterable[Params]) -> None:
        """Queue one statement for each row."""
        rows = list(rows)
        if not rows:
            return
        statements = self._statements
        if statements and statements[-1][0] == sql:
            statements[-1][1].extend(rows)
        else:
            statements.append((sql, rows))

    def on_durable(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the event loop once the batch is durable (in order)."""
        self._callbacks.append(callback)

    @property
    def callback_count(self) -> int:
        """How many callbacks are registered so far (lets a caller tell whether its
        callback is still the last one, and so may take more work in order)."""
        return len(self._callbacks)

    def extend(self, other: WriteBatch) -> None:
        """Append ``other``'s statements after this batch's own and move its callbacks
        here (``other`` keeps no callback, so none runs twice and none keeps ``other`` in
        a reference cycle)."""
        statements = self._statements
        for sql, rows in other._statements:
            if statements and statements[-1][0] == sql:
                statements[-1][1].extend(rows)
            else:
                statements.append((sql, list(rows)))
        self._callbacks.extend(other._callbacks)
        other._callbacks.clear()
        self.entries += other.entries
        self.bytes += other.bytes

    def __bool__(self) -> bool:
        return bool(self._statements or self._callbacks)


class Store:
    """Owner of the SQLite file: the writer task and the read connections."""

    def __init__(
        self,
        path: Path,
        writer: aiosqlite.Connection | None,
        readers: list[aiosqlite.Connection],
        *,
        max_pending_entries: int,
        linger: float = 0.005,
        flush_entries: int = 1000,
        min_free_bytes: int = 0,
    ) -> None:
        self.path = path
        self.min_free_bytes = min_free_bytes
        self._free_checked = -1.0
        self._free_bytes = 0
        self._written_since_check = 0
        self._linger = linger
        self._flush_entries = flush_entries
        self._linger_handle: asyncio.TimerHandle | None = None
        self._writer = writer
        self._process: WriterProcess | None = None
        self._readers = readers
        self._reader_cycle = itertools.cycle(readers)
        # Everything submitted and not yet taken by a flush, merged in submission order;
        # its future (made when someone waits) completes when it is durable.
        self._open = WriteBatch()
        self._open_future: asyncio.Future[None] | None = None
        self.generation = 0
        """Counts flushes taken: :attr:`batch` is the same object while it stays equal."""
        self._inflight_entries = 0
        self._max_pending_entries = max_pending_entries
        self._urgent = False  # someone waits for the open batch, or it is full
        self._kick_soon = False  # a _kick is scheduled
        self._flushed = asyncio.Event()
        self._closing = False
        self._closed = False
        self.failure: BaseException | None = None
        self.on_failure: Callable[[BaseException], None] | None = None
        self.on_flush: Callable[[int, float], None] | None = None
        """Called after each flush with its entry count and its duration in seconds
        (the SQLite transaction, fsync included)."""
        self._inflight: tuple[WriteBatch, asyncio.Future[None] | None] | None = None
        self._attempt = 0
        self._started = 0.0  # when the flush in flight went to the thread
        self._idle = asyncio.Event()  # set while nothing is in flight
        self._idle.set()
        self._lock: DirectoryLock | None = None

    @classmethod
    async def open(
        cls,
        path: str | Path,
        *,
        synchronous: str = "FULL",
        readers: int = 2,
        max_pending_entries: int = 20_000,
        min_free_bytes: int = 0,
        writer_process: bool = False,
    ) -> Store:
        """Open (creating if needed) the database at ``path`` and start the writer: a
        thread of this process, or with ``writer_process`` a child process (see
        :mod:`txnstream.ledger._writer_process`).

        Takes the directory's owner lock first (:class:`DirectoryLock`): a second opener
        gets :class:`DataDirLockedError` before anything is read or written.
        """
        path = Path(path)
        lock = await DirectoryLock.acquire_when_free(path.parent)
        try:
            writer = await aiosqlite.connect(path, isolation_level=None)
        except BaseException:
            lock.release()
            raise
        reader_conns: list[aiosqlite.Connection] = []
        store: Store | None = None
        try:
            for pragma in writer_pragmas(synchronous):
                await writer.execute(pragma)
            await writer._execute(migrate, writer._conn)  # type: ignore[no-untyped-call]
            for _ in range(readers):
                reader = await aiosqlite.connect(path, isolation_level=None)
                reader_conns.append(reader)
                await reader.execute("PRAGMA query_only=1")
                await reader.execute("PRAGMA cache_size=-8192")
                await reader.execute("PRAGMA busy_timeout=5000")
            if writer_process:
                await writer.close()  # (migrated: the child writes from now on)
            store = cls(
                path,
                None if writer_process else writer,
                reader_conns,
                max_pending_entries=max_pending_entries,
                min_free_bytes=min_free_bytes,
            )
            if writer_process:
                store._process = await WriterProcess.start(
                    path, synchronous, lock.fileno(), store._hopped, store._writer_lost
                )
        except BaseException:
            for conn in [writer, *reader_conns]:
                await conn.close()
            lock.release()
            raise
        store._lock = lock
        return store

    # -- writing -------------------------------------------------------------------

    @property
    def batch(self) -> WriteBatch:
        """The batch the next flush takes: hot paths add to it directly, then
        :meth:`submit` it. Add nothing that may still fail: it cannot be taken back."""
        return self._open

    def submit(self, batch: WriteBatch, *, wait: bool = True) -> asyncio.Future[None] | None:
        """Queue ``batch``; return a future that completes once it is durable.

        ``batch`` is merged into :attr:`batch` (unless it is that batch already), so
        everything submitted between two flushes is applied by the next one, in order.
        With ``wait=False`` no future is made (pipelined writes whose durability a later
        batch will establish). Every waiter of one flush shares one future. Raises
        :class:`EngineFailedError` / :class:`ClosedError`.
        """
        self._check_writable()
        open_ = self._open
        if batch is not open_:
            open_.extend(batch)
        if wait:
            future = self._open_future
            if future is None:
                future = self._open_future = asyncio.get_running_loop().create_future()
            self._urgent = True
            if self._inflight is None:
                if self._process is not None:
                    # The writer process runs beside the loop: it starts on this flush
                    # while the pass goes on, and what the pass submits meanwhile takes
                    # the next one (8 producers of transactions: +36% against a kick at
                    # the pass's end). A writer thread would contend for the GIL instead
                    # (measured no faster), so it waits for the end of the pass and takes
                    # whatever was submitted during it.
                    self._kick()
                elif not self._kick_soon:
                    self._kick_soon = True
                    asyncio.get_running_loop().call_soon(self._kick)
            return future
        if open_.entries >= self._flush_entries:
            self._urgent = True
            if self._inflight is None and not self._kick_soon:
                self._kick_soon = True
                asyncio.get_running_loop().call_soon(self._kick)
        elif self._linger_handle is None and not self._urgent:
            self._linger_handle = asyncio.get_running_loop().call_later(
                self._linger, self._lingered
            )
        return None

    async def write(self, batch: WriteBatch) -> None:
        """Submit and wait until durable."""
        future = self.submit(batch)
        assert future is not None
        await future

    @property
    def _queued_entries(self) -> int:
        """Entries submitted and not yet durable (the open batch and the flush in flight)."""
        return self._open.entries + self._inflight_entries

    @property
    def over_limit(self) -> bool:
        """True while appends should wait (see :meth:`wait_writable`)."""
        return self._open.entries + self._inflight_entries > self._max_pending_entries

    async def wait_writable(self) -> None:
        """Backpressure: wait while more than the allowed entries are queued."""
        while self.over_limit and self.failure is None:
            self._urgent = True
            self._kick()
            self._flushed.clear()
            await self._flushed.wait()
        self._check_writable()

    @property
    def free_bytes(self) -> int:
        """Bytes available to this process on the file system of the database.

        Read with ``statvfs`` at most every 10 ms, minus what was written
        since (twice: the WAL, then the checkpoint into the database), and read again
        at once when that estimate comes near the reserve.
        """
        now = time.monotonic()
        estimate = self._free_bytes - 2 * (self._written_since_check + self._open.bytes)
        if estimate < 2 * self.min_free_bytes or now - self._free_checked >= _SPACE_CHECK_INTERVAL:
            stat = os.statvfs(self.path.parent)
            self._free_bytes = estimate = stat.f_bavail * stat.f_frsize
            self._free_checked = now
            self._written_since_check = 0
        return estimate

    @property
    def space_low(self) -> bool:
        """True while less than ``min_free_bytes`` are free: new data should be refused."""
        return self.min_free_bytes > 0 and self.free_bytes < self.min_free_bytes

    def check_space(self) -> None:
        """Raise :class:`InsufficientStorageError` while :attr:`space_low`."""
        if self._space_plenty():
            return
        if self.space_low:
            self._free_checked = -1.0  # the next request looks again
            raise InsufficientStorageError(
                f"not enough disk space: {self.free_bytes} bytes free on the data"
                f" directory's file system, {self.min_free_bytes} required for new data;"
                " writes resume once space is freed"
            )

    def takes_pipelined(self, batch: WriteBatch) -> bool:
        """True if ``batch`` is still :attr:`batch` and one more pipelined entry may go
        into it now: no wait (:attr:`over_limit`) and nothing that :meth:`check_space` or
        :meth:`check_writable` would raise, judged without a system call (a send lane's check;
        False means "take the full path", which says why)."""
        open_ = self._open
        if open_ is not batch or self.failure is not None or self._closing:
            return False
        if open_.entries + self._inflight_entries > self._max_pending_entries:
            return False  # (over_limit, inline: this runs once per pipelined send)
        return self._space_plenty()

    def _space_plenty(self) -> bool:
        """True without a system call when no reserve is set, or when free space was
        looked at lately and lies far above the reserve (the common case)."""
        minimum = self.min_free_bytes
        return not minimum or (
            time.monotonic() - self._free_checked < _SPACE_CHECK_INTERVAL
            and self._free_bytes - 2 * (self._written_since_check + self._open.bytes) >= 2 * minimum
        )

    def check_writable(self) -> None:
        """Raise what :meth:`submit` would raise now (failed or closing store); call it
        before adding to :attr:`batch`."""
        if self.failure is not None or self._closing:
            self._check_writable()

    def pipelined(self) -> None:
        """``submit(self.batch, wait=False)`` after :meth:`check_writable` passed and
        nothing awaited since: the open batch goes with the next flush, or after the
        linger, or at once when it holds ``flush_entries``."""
        if self._open.entries >= self._flush_entries:
            self._urgent = True
            if self._inflight is None and not self._kick_soon:
                self._kick_soon = True
                asyncio.get_running_loop().call_soon(self._kick)
        elif self._linger_handle is None and not self._urgent:
            self._linger_handle = asyncio.get_running_loop().call_later(
                self._linger, self._lingered
            )

    def _check_writable(self) -> None:
        if self.failure is not None:
            raise EngineFailedError(f"storage failed: {self.failure}") from self.failure
        if self._closing:
            raise ClosedError("the store is closed")

    # The writer is a small state machine driven by callbacks on the loop, not a task:
    # a submission that someone waits for hands the open batch to the connection's
    # thread at once when nothing is in flight (no task wake-up in between), and the
    # hop's completion starts the next due flush before it runs the finished flush's
    # callbacks, so the next flush is on disk while the loop publishes the previous one.

    def _lingered(self) -> None:
        self._linger_handle = None
        self._urgent = True
        if self._inflight is None:
            self._kick()

    def _kick(self) -> None:
        """Start a flush of the open batch if one is due and none is in flight."""
        self._kick_soon = False
        if self._inflight is not None or self.failure is not None:
            return
        if not (self._open or self._open_future is not None):
            self._urgent = False
            if self._closing:
                self._idle.set()
            return
        if not (self._urgent or self._closing):
            return
        self._urgent = False
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        batch, future = self._open, self._open_future
        self._open, self._open_future = WriteBatch(), None
        self.generation += 1
        self._inflight_entries = batch.entries
        self._written_since_check += batch.bytes
        self._inflight = (batch, future)
        self._idle.clear()
        self._attempt = 0
        self._started = time.perf_counter()
        self._hop(batch)

    def _hop(self, batch: WriteBatch) -> None:
        """Hand ``batch`` to the writer (one hop for the flush); :meth:`_hopped` follows."""
        loop = asyncio.get_running_loop()
        statements = batch._statements
        if not statements:
            loop.call_soon(self._hopped, None)  # only callbacks or waiters: nothing to write
            return
        if self._process is not None:
            self._process.apply(statements, batch.bytes)
            return
        writer = self._writer
        assert writer is not None
        done = self._hopped

        def run() -> None:  # on the connection's thread
            try:
                apply_flush(writer._conn, statements)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                loop.call_soon_threadsafe(done, exc)
            else:
                loop.call_soon_threadsafe(done, None)

        # aiosqlite's thread runs (future, function) pairs from this queue in order;
        # with no future it only runs the function, which reports back itself: one
        # wake-up of the loop per flush, no future, coroutine or task in between.
        writer._tx.put_nowait((None, run))

    def _writer_lost(self, exc: BaseException) -> None:
        """The writer process ended with no flush in flight: the store fails."""
        self._fail(exc, [])

    def _hopped(self, exc: BaseException | None) -> None:
        assert self._inflight is not None
        batch, future = self._inflight
        if exc is None and self.failure is not None:
            exc = self.failure  # a callback failed meanwhile: this flush is not published
        if exc is not None:
            delay = _RETRY_DELAYS[self._attempt] if self._attempt < len(_RETRY_DELAYS) else None
            transient = isinstance(exc, sqlite3.OperationalError) and any(
                word in str(exc).lower() for word in _TRANSIENT
            )
            if transient and delay is not None and self.failure is None:
                self._attempt += 1
                log.warning("flush failed (attempt %d), retrying: %s", self._attempt, exc)
                asyncio.get_running_loop().call_later(delay, self._hop, batch)
                return
            self._inflight = None
            self._fail(exc, [future])
            self._idle.set()
            return
        self._inflight = None
        self._inflight_entries = 0
        seconds = time.perf_counter() - self._started
        self._kick()  # the next due flush goes to disk before this one's callbacks run
        self._complete(batch, future, seconds)
        if self._inflight is None:
            self._kick()  # a callback may have submitted more
            if self._inflight is None:
                self._idle.set()

    def _complete(
        self, batch: WriteBatch, future: asyncio.Future[None] | None, seconds: float
    ) -> None:
        """A flush is durable: its callbacks in submission order, then its waiters."""
        callbacks = batch._callbacks
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:
                log.exception("on_durable callback failed")
                self._fail(exc, [])
        # A callback usually closes over its batch (to tell whether it is still the
        # batch's last one): dropping them breaks that cycle, so a flush's objects are
        # freed by reference counting here instead of by a later full collection.
        callbacks.clear()
        # Its rows are on disk: whoever still holds the batch (a send lane of an idle
        # transaction, say) holds an empty shell, not the flush's payloads.
        batch._statements.clear()
        if future is not None and not future.done():
            future.set_result(None)
        if self.on_flush is not None:
            self.on_flush(batch.entries, seconds)
        self._flushed.set()  # wakes wait_writable to look again

    def _fail(self, exc: BaseException, futures: list[asyncio.Future[None] | None]) -> None:
        if self.failure is None:
            log.error("storage failed; the engine must be reopened", exc_info=exc)
            self.failure = exc
        pending = [*futures, self._open_future]
        self._open, self._open_future = WriteBatch(), None
        self.generation += 1
        self._inflight_entries = 0
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        error: Exception
        if is_no_space(exc):
            error = InsufficientStorageError(f"the disk is full: {exc}; nothing was written")
        else:
            error = EngineFailedError(f"storage failed: {exc}")
        for future in pending:
            if future is not None and not future.done():
                future.set_exception(error)
        self._flushed.set()
        if self._inflight is None:
            self._idle.set()
        if self.on_failure is not None:
            self.on_failure(exc)

    # -- reading -------------------------------------------------------------------

    async def read(self, sql: str, params: Params = ()) -> list[Any]:
        """Run a query on a read connection; sees only committed (durable) data."""
        if self._closed:
            raise ClosedError("the store is closed")
        reader = next(self._reader_cycle)
        rows = await reader.execute_fetchall(sql, params)
        return list(rows)

    # -- lifecycle -----------------------------------------------------------------

    async def flush(self) -> None:
        """Wait until everything submitted so far is durable."""
        await self.write(WriteBatch())

    async def close(self) -> None:
        """Write everything queued, then close the connections. Idempotent."""
        if self._closed:
            return
        self._closing = True
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        self._kick()
        while self._inflight is not None or (
            self.failure is None and (self._open or self._open_future is not None)
        ):
            self._idle.clear()
            self._kick()
            await self._idle.wait()
        self._closed = True
        try:
            for reader in self._readers:
                await reader.close()
            if self._process is not None:
                await self._process.close()
            if self._writer is not None:
                await self._writer.close()
        finally:
            if self._lock is not None:
                self._lock.release()
