"""The storage seam: :class:`Store`, the one interface between the engine and its database.

The layers above say *what* they store, never how, and no SQL and no database driver
exists above ``ledger/`` (``tests/test_storage_seam.py`` checks it):

* **Writes** are typed operations queued on a :class:`~txnstream.ledger.WriteBatch`, by
  domain: the log (``insert_entry``, ``insert_entries``, ``open_ledger``,
  ``seal_ledger``, ``trim_ledgers``, ``move_ledger_remote``, ``put_aborted``), the
  catalog (``create_topic``, ``put_retention``, ``put_offload_policy``, ``put_ttl``,
  ``drop_topic``, ``put_producer``), subscriptions (``create_subscription``,
  ``put_cursor``, ``put_subscription_policy``, ``put_redelivery``, ``drop_subscription``),
  the coordinator (``reserve_txn_seqs``, ``record_txn``, ``put_finish_key``,
  ``prune_txns``, ``put_producer_epoch``, ``drop_producer_epoch``) and snapshots
  (``put_snapshot``, ``put_snapshot_segment``, ``drop_snapshot_segments``, ...).
* **Reads** are typed coroutines of the store, by the same domains (``ledger_rows``,
  ``read_range``, ``topic_rows``, ``subscription_rows``, ``txn_rows``,
  ``snapshot_rows``, ...), each documented below with the shape of its rows.
* **What the store reports**: :meth:`Store.storage_metrics` (database and WAL sizes).
* **Other processes** read through :class:`StoreReader` (read-only, synchronous).

:class:`~txnstream.ledger.SqliteStore` is the implementation on one SQLite file. Another
store (PostgreSQL) is a sibling subclass: a statement for every operation key of
:data:`txnstream.ledger._batch.OPERATIONS` (the SQLite table is
:mod:`txnstream.ledger._sqlite_sql`), the transport (:meth:`Store._hop`,
:meth:`Store._transient`, :meth:`Store._close_connections`), the reads, and a
:class:`StoreReader`; the group commit machinery below is shared, and so are the reads
of a store on SQL (:mod:`txnstream.ledger._sql_reads`: a statement module and a way to
run a query is all such a store supplies).

Contracts every implementation keeps:

* **Group commit, in order.** Callers build a batch and :meth:`Store.submit` it (or add
  to :attr:`Store.batch`, the open batch, directly). The writer takes every batch queued
  since its last flush and applies their operations in submission order inside ONE
  store transaction, in ONE hop off the event loop (an awaited round trip costs far more
  than the statements, so hops are counted per flush, never per message). Everything
  of one flush becomes durable together or not at all: a decision, its markers and the
  acks it applies are atomic. A later write of a row wins over an earlier one
  (``record_txn`` even overwrites its transaction's row queued earlier in the batch).
* **Persist, then publish.** After the COMMIT returns, the batches' ``on_durable``
  callbacks run on the event loop in submission order, then their futures complete.
  Durable state is therefore always a prefix of the submitted sequence, and in-memory
  state is published only after it is durable.
* **Pipelining.** Batches submitted with ``wait=False`` (sends inside a transaction) do
  not wake the writer by themselves: they ride with the next batch someone waits for
  (the commit), or go after ``linger`` seconds, or as soon as ``flush_entries`` are
  queued. A transaction of N sends and a commit therefore costs one flush, like Kafka's
  producer with linger.
* **Failure is final.** A flush that fails is retried with backoff for transient errors
  (:meth:`Store._transient`); after that the store fails: every pending and later
  submission raises :class:`EngineFailedError` (or :class:`InsufficientStorageError`
  when the disk is full), and the owner reopens (recovery redoes the rest). A failed
  flush cannot be undone in memory — positions were assigned when the batches were
  prepared — so reopening is the only way back.
* **Reads see committed data only**: what a read returns was durable when it began;
  reads never wait for the writer. Row shapes are those documented on each method.
* **Free space**: with ``min_free_bytes`` set, :attr:`Store.space_low` says when the
  file system holds less than that. Owners refuse *new data* then (before preparing
  anything), so a full disk shows up as refused appends instead of a failed flush, and
  writes resume by themselves once space is freed.
* **A full disk is a wait, not a failure.** A flush that meets a full disk anyway (no
  reserve, or another program took the space) was rolled back whole, so it stays in
  flight and is applied again, with backoff, until it fits: later flushes queue behind
  it, in order, and nothing is lost or reordered. Meanwhile :attr:`Store.disk_full`
  names the disk, :meth:`Store.check_space` refuses new data whatever the reserve, and
  reads go on. Only :meth:`Store.close` gives up on it (its waiters get
  :class:`InsufficientStorageError`: nothing of it was written).
* **The home is checked before every acknowledgement.** After each flush and before
  its callbacks run, the database file must still be the one opened (same device and
  inode at its path): a deleted or replaced data directory fails the store with
  :class:`DataDirectoryLostError` instead of acknowledging writes that went into an
  unlinked file (one ``stat`` per flush, not per message). The window: a deletion
  that lands after that check loses the flush it had just passed, as it loses every
  acknowledged write before it; nothing is acknowledged after the check sees it.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import errno
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._batch import WriteBatch
from ._errors import (
    ClosedError,
    DataDirectoryLostError,
    EngineFailedError,
    InsufficientStorageError,
)
from ._position import Position

log = logging.getLogger("txnstream.store")

_NO_SPACE = ("database or disk is full", "no space left", "quota exceeded")
_RETRY_DELAYS = (0.01, 0.05, 0.2, 0.5, 1.0)
_FULL_RETRY_FIRST = 0.05  # a flush held by a full disk is tried again after this ...
_FULL_RETRY_MAX = 1.0  # ... doubling up to this: writes resume within a second of space
_SPACE_CHECK_INTERVAL = 0.01  # statvfs costs ~1 us: fresh enough, yet not per batch under load

Row = tuple[Any, ...]


@dataclass(slots=True, eq=False)
class _Flight:
    """A flush taken from the open batch and not yet durable."""

    batch: WriteBatch
    future: asyncio.Future[None] | None
    """Its waiters' future (None: nobody waits)."""
    started: float = 0.0
    """When it went to the writer (``perf_counter``), for ``on_flush``."""
    failed: BaseException | None = None
    """Its transient error while it waits to be sent again (with those behind it)."""


def is_no_space(exc: BaseException) -> bool:
    """True if ``exc`` says the disk (or a quota) is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return any(word in str(exc).lower() for word in _NO_SPACE)


def process_id() -> str:
    """A new id for this server process among those sharing a store: host, pid and a
    random part (a restarted process, even with the same pid, gets another)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True, slots=True)
class Member:
    """A server sharing a store (PostgreSQL), and where clients reach it."""

    member: str
    """Unique per server process (a restarted server is a new member)."""
    url: str | None
    """Its advertised URL (None: not advertised)."""
    kafka: str | None
    """Its advertised Kafka address (``HOST:PORT``), None without a Kafka listener."""


@dataclass(frozen=True, slots=True)
class StorageMetrics:
    """What a store reports about its own storage (for ``/metrics``)."""

    database_bytes: int
    """Bytes of the database (its main file)."""
    wal_bytes: int
    """Bytes of its write-ahead log not yet checkpointed into it (0 when none)."""


class Store(abc.ABC):
    """The storage seam: group-committed writes and typed reads (see the module docstring).

    Subclasses supply the transport (:meth:`_hop`, :meth:`_transient`,
    :meth:`_close_connections`) and the reads; the writer state machine is this class's.
    """

    kick_at_once = False
    """Whether a waited-for submission starts its flush at once (a writer beside the
    loop: a process or a server) rather than at the end of the loop's pass (a writer
    thread, which would contend for the GIL with the pass)."""

    read_ahead = False
    """Whether an ordered subscription reads its next range as soon as a delivery ends
    (reads are a server's work beside the loop) rather than only while an ack waits for
    its commit (a reader thread would contend for the GIL with the consumer's pass)."""

    members: tuple[Member, ...] = ()
    """The servers sharing this store, as last read (a PostgreSQL store's, refreshed with
    each lease renewal; none for a store only one server opens)."""

    def __init__(
        self,
        path: Path | None,
        *,
        max_pending_entries: int,
        linger: float = 0.005,
        flush_entries: int = 1000,
        min_free_bytes: int = 0,
    ) -> None:
        self.path = path
        """The database file (None for a store without one): free space is looked at
        on its file system."""
        self.min_free_bytes = min_free_bytes
        self._free_checked = -1.0
        self._free_bytes = 0
        self._written_since_check = 0
        self._linger = linger
        self._flush_entries = flush_entries
        self._linger_handle: asyncio.TimerHandle | None = None
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
        (the store transaction, fsync included)."""
        # The flushes taken and not yet durable, oldest first: at most
        # ``pipeline_depth``. Answers come in this order (see _hop).
        self._inflight: collections.deque[_Flight] = collections.deque()
        self._unanswered = 0  # flushes handed to _hop whose _hopped has not come yet
        self._attempt = 0
        self._idle = asyncio.Event()  # set while nothing is in flight
        self._idle.set()
        self.disk_full: str | None = None
        """Set while a flush is held by a full disk (what the disk said): see the
        module docstring."""
        self._full_retry: asyncio.TimerHandle | None = None
        self._full_delay = _FULL_RETRY_FIRST
        self._home = _identity(path)
        self.disk_bytes = 0
        """Size of the database's file system (0: none, or unknown)."""
        if path is not None:
            with contextlib.suppress(OSError):
                stat = os.statvfs(path.parent)
                self.disk_bytes = stat.f_blocks * stat.f_frsize

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
            if self._room():
                if self.kick_at_once:
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
            if self._room() and not self._kick_soon:
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
        if self.path is None:
            return 1 << 62  # no file system of ours to fill
        now = time.monotonic()
        estimate = self._free_bytes - 2 * (self._written_since_check + self._open.bytes)
        if estimate < 2 * self.min_free_bytes or now - self._free_checked >= _SPACE_CHECK_INTERVAL:
            try:
                stat = os.statvfs(self.path.parent)
            except OSError:
                return 0  # the directory is gone: check_space says so
            self._free_bytes = estimate = stat.f_bavail * stat.f_frsize
            self._free_checked = now
            self._written_since_check = 0
        return estimate

    @property
    def space_low(self) -> bool:
        """True while new data should be refused: less than ``min_free_bytes`` are free,
        or a flush is held by a full disk (:attr:`disk_full`)."""
        if self.disk_full is not None:
            return True
        return self.min_free_bytes > 0 and self.free_bytes < self.min_free_bytes

    @property
    def reserve_unreachable(self) -> bool:
        """True if ``min_free_bytes`` exceeds the whole file system: new data is always
        refused (a 64 MiB reserve on a 16 MiB disk)."""
        return 0 < self.disk_bytes < self.min_free_bytes

    def check_space(self) -> None:
        """Raise :class:`InsufficientStorageError` while :attr:`space_low`
        (:class:`DataDirectoryLostError` if the data directory has gone)."""
        if self._space_plenty():
            return
        if self.disk_full is not None:
            raise InsufficientStorageError(
                f"the disk is full: {self.disk_full} ({self._where()}); nothing new is"
                " written until space is freed, then writes resume by themselves"
            )
        if self.space_low:
            self.check_home()  # (no free space to be read: perhaps no directory at all)
            self._free_checked = -1.0  # the next request looks again
            raise InsufficientStorageError(
                f"not enough disk space: {self.free_bytes} bytes free on the data"
                f" directory's file system, {self.min_free_bytes} required for new data;"
                " writes resume once space is freed"
            )

    def takes_pipelined(self, batch: WriteBatch) -> bool:
        """True if ``batch`` is still :attr:`batch` and one more pipelined entry may go
        into it now: no wait (:attr:`over_limit`) and nothing that :meth:`check_space` or
        :meth:`check_writable` would raise, judged without a system call (the fast send's check;
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
        if self.disk_full is not None:
            return False
        return not minimum or (
            time.monotonic() - self._free_checked < _SPACE_CHECK_INTERVAL
            and self._free_bytes - 2 * (self._written_since_check + self._open.bytes) >= 2 * minimum
        )

    def _where(self) -> str:
        return "the data directory's file system" if self.path is None else str(self.path.parent)

    def check_home(self) -> None:
        """Raise :class:`DataDirectoryLostError` (and fail the store) if the database
        file at :attr:`path` is no longer the one opened: deleted, moved or replaced.

        One ``stat``: the writer calls it once per flush, before acknowledging.
        """
        error = self._lost()
        if error is not None:
            self._fail(error, [])
            raise error

    def _lost(self) -> DataDirectoryLostError | None:
        if self._home is None or self.failure is not None:
            return None
        now = _identity(self.path)
        if now == self._home:
            return None
        seen = "is gone" if now is None else "was replaced by another file"
        return DataDirectoryLostError(
            f"the data directory was deleted or moved while in use: {self.path} {seen};"
            " nothing is acknowledged from now on (restore it and restart)"
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
            if self._room() and not self._kick_soon:
                self._kick_soon = True
                asyncio.get_running_loop().call_soon(self._kick)
        elif self._linger_handle is None and not self._urgent:
            self._linger_handle = asyncio.get_running_loop().call_later(
                self._linger, self._lingered
            )

    def _check_writable(self) -> None:
        if isinstance(self.failure, DataDirectoryLostError):
            raise DataDirectoryLostError(str(self.failure)) from self.failure
        if self.failure is not None:
            raise EngineFailedError(f"storage failed: {self.failure}") from self.failure
        if self._closing:
            raise ClosedError("the store is closed")

    # The writer is a small state machine driven by callbacks on the loop, not a task:
    # a submission that someone waits for hands the open batch to the writer (:meth:`_hop`)
    # at once when nothing is in flight (no task wake-up in between), and the
    # hop's completion starts the next due flush before it runs the finished flush's
    # callbacks, so the next flush is on disk while the loop publishes the previous one.

    def _lingered(self) -> None:
        self._linger_handle = None
        self._urgent = True
        if self._room():
            self._kick()

    def _room(self) -> bool:
        """Whether another flush may go to the writer now: nothing in flight; or fewer
        than :attr:`pipeline_depth`, none waiting to be sent again, and the open batch
        holding at least as many entries as the newest flush in flight.

        A smaller batch waits and grows: each flush pays a fixed cost (a round trip,
        the fence, the mark, a commit), and sending whatever one waiter brought split
        8 producers' flushes from 48 rows to 32 (PostgreSQL, 2-core machine, depths
        interleaved, medians of 7: 40k msg/s with one flush in flight, 45k with any
        second one, 59k with this rule)."""
        inflight = self._inflight
        if not inflight:
            return True
        return (
            len(inflight) < self.pipeline_depth
            and inflight[0].failed is None
            and self._open.entries >= inflight[-1].batch.entries
        )

    def _kick(self) -> None:
        """Start a flush of the open batch if one is due and there is room for it."""
        self._kick_soon = False
        if not self._room() or self.failure is not None:
            return
        if not (self._open or self._open_future is not None):
            self._urgent = False
            if self._closing and not self._inflight:
                self._idle.set()
            return
        if not (self._urgent or self._closing):
            return
        if self._inflight and not self._open.ops:
            return  # (it completes after those in flight: it goes once they are durable)
        self._urgent = False
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        flight = _Flight(self._open, self._open_future)
        self._open, self._open_future = WriteBatch(), None
        self.generation += 1
        self._inflight_entries += flight.batch.entries
        self._written_since_check += flight.batch.bytes
        if not self._inflight:
            self._attempt = 0
        self._inflight.append(flight)
        self._idle.clear()
        self._send(flight)

    def _send(self, flight: _Flight) -> None:
        """Hand ``flight`` to the writer (again, after a transient failure)."""
        flight.failed = None
        flight.started = time.perf_counter()
        self._unanswered += 1
        if flight.batch.ops:
            self._hop(flight.batch)
        else:  # only callbacks or waiters: nothing to write (and nothing in flight)
            asyncio.get_running_loop().call_soon(self._hopped, None)

    pipeline_depth = 1
    """How many flushes may be in flight at once. Above 1, :meth:`_hop` may be called
    again before the previous flush answered; the store must then apply the flushes in
    the order it got them, call :meth:`_hopped` in that order, and never commit a flush
    whose predecessor did not commit (it fails, transiently, instead)."""

    @abc.abstractmethod
    def _hop(self, batch: WriteBatch) -> None:
        """Apply ``batch.ops`` in one store transaction, off the loop (one hop for the
        whole flush), then call :meth:`_hopped` on the loop with None or the error
        (after which nothing of the batch may be stored)."""

    @abc.abstractmethod
    def _transient(self, exc: BaseException) -> bool:
        """Whether a failed flush may succeed if applied again (a busy database)."""

    @abc.abstractmethod
    async def _close_connections(self) -> None:
        """Close the connections (and writer) once everything is flushed."""

    def _check(self) -> None:
        """Assert the writer state machine's invariants between loop steps (the model
        tests call it after every step, as sortedcontainers' ``_check``)."""
        inflight = self._inflight
        assert (not inflight) == self._idle.is_set(), "idle iff no flush in flight"
        assert len(inflight) <= self.pipeline_depth
        assert self._inflight_entries == sum(f.batch.entries for f in inflight)
        waiting = 1 if self._full_retry is not None else 0
        assert self._unanswered == sum(f.failed is None for f in inflight) - waiting
        # answers come in order: those that failed and wait to go again come first
        failed = [f.failed is not None for f in inflight]
        assert failed == sorted(failed, reverse=True), "a failed flush behind an unanswered one"
        assert not self._closed or self._closing
        if self.failure is not None:
            assert not self._open
            assert self._open_future is None
        elif not inflight and (self._open or self._open_future is not None):
            # no lost wake-up: queued work has a flush coming (a kick or the linger)
            assert self._kick_soon or self._linger_handle is not None, "queued, no flush due"

    def _writer_lost(self, exc: BaseException) -> None:
        """The writer process ended with no flush in flight: the store fails."""
        self._fail(exc, [])

    def _hopped(self, exc: BaseException | None) -> None:
        """The writer's answer for the oldest flush it has not answered yet."""
        self._unanswered -= 1
        flight = next(f for f in self._inflight if f.failed is None)
        if exc is None and self.failure is not None:
            exc = self.failure  # a callback failed meanwhile: this flush is not published
        if exc is None:
            exc = self._lost()  # before anything of this flush is acknowledged
        if exc is not None and is_no_space(exc) and not self._closing and self.failure is None:
            # Rolled back whole: hold it and apply it again once it fits (module docstring).
            # (A store whose flushes meet a full disk keeps one in flight.)
            if self.disk_full is None:
                log.error("the disk is full (%s): writes wait until space is freed", exc)
            self.disk_full = str(exc)
            self._full_retry = asyncio.get_running_loop().call_later(
                self._full_delay, self._retry_full, flight
            )
            self._full_delay = min(self._full_delay * 2, _FULL_RETRY_MAX)
            return
        if exc is None and flight is not self._inflight[0]:
            # The store broke its promise never to commit a flush after one that failed.
            exc = EngineFailedError("a flush committed after the one before it failed")
        if exc is not None:
            if self._transient(exc) and self._attempt < len(_RETRY_DELAYS) and self.failure is None:
                # It goes again, and with it every flush behind it (those fail too: a
                # flush never commits after its predecessor failed), once all answered.
                flight.failed = exc
                if not self._unanswered:
                    delay = _RETRY_DELAYS[self._attempt]
                    self._attempt += 1
                    log.warning("flush failed (attempt %d), retrying: %s", self._attempt, exc)
                    asyncio.get_running_loop().call_later(delay, self._resend)
                return
            # Final: this flush and those failed before it (their answers are in) end here;
            # those behind it end with their own answers (failed, as the store now is).
            ended = [f for f in self._inflight if f.failed is not None or f is flight]
            for each in ended:
                self._inflight.remove(each)
                self._inflight_entries -= each.batch.entries
            self._fail(exc, [each.future for each in ended])
            if not self._inflight:
                self._idle.set()
            return
        if self.disk_full is not None:
            log.warning("the disk has space again: writes resume")
            self.disk_full = None
            self._full_delay = _FULL_RETRY_FIRST
            self._free_checked = -1.0
        self._inflight.popleft()
        self._inflight_entries -= flight.batch.entries
        self._attempt = 0
        seconds = time.perf_counter() - flight.started
        self._kick()  # the next due flush goes to disk before this one's callbacks run
        self._complete(flight.batch, flight.future, seconds)
        self._kick()  # a callback may have submitted more
        if not self._inflight:
            self._idle.set()

    def _resend(self) -> None:
        """Send again, in order, the flushes that failed transiently (all of those in
        flight: each answered), unless the store failed meanwhile."""
        if self.failure is not None:
            ended = list(self._inflight)
            self._inflight.clear()
            self._inflight_entries = 0
            self._fail(self.failure, [each.future for each in ended])
            self._idle.set()
            return
        for flight in self._inflight:
            self._send(flight)

    def _retry_full(self, flight: _Flight) -> None:
        self._full_retry = None
        self._send(flight)

    def _give_up_full(self) -> None:
        """Closing while a flush waits for space: it was not written; its waiters hear so."""
        if self._full_retry is None or not self._inflight:
            return  # (a retry is on its way: its answer decides)
        self._full_retry.cancel()
        self._full_retry = None
        flight = self._inflight.popleft()
        self._inflight_entries -= flight.batch.entries
        exc = OSError(errno.ENOSPC, f"the disk is full: {self.disk_full}")
        self._fail(exc, [flight.future])
        if not self._inflight:
            self._idle.set()

    def _complete(
        self, batch: WriteBatch, future: asyncio.Future[None] | None, seconds: float
    ) -> None:
        """A flush is durable: its callbacks in submission order, then its waiters."""
        callbacks = batch.callbacks
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:
                log.exception("on_durable callback failed")
                self._fail(exc, [])
        # A callback usually closes over its batch (to tell whether it is still the
        # batch's last one): dropping them breaks that cycle, so a flush's objects are
        # freed by reference counting here instead of by a later full collection.
        # Its rows are on disk: whoever still holds the batch (a fast send of an idle
        # transaction, say) holds an empty shell, not the flush's payloads.
        batch.clear()
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
        if self._linger_handle is not None:
            self._linger_handle.cancel()
            self._linger_handle = None
        error: Exception
        if isinstance(exc, DataDirectoryLostError):
            error = DataDirectoryLostError(str(exc))
        elif is_no_space(exc):
            error = InsufficientStorageError(f"the disk is full: {exc}; nothing was written")
        else:
            error = EngineFailedError(f"storage failed: {exc}")
        for future in pending:
            if future is not None and not future.done():
                future.set_exception(error)
        self._flushed.set()
        if not self._inflight:
            self._idle.set()
        if self.on_failure is not None:
            self.on_failure(exc)

    # -- lifecycle -----------------------------------------------------------------

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
        """Open (creating if needed) the SQLite database at ``path``: see
        :meth:`SqliteStore.open <txnstream.ledger._sqlite_store.SqliteStore.open>`."""
        from ._sqlite_store import SqliteStore  # (the implementation imports this module)

        return await SqliteStore.open(
            path,
            synchronous=synchronous,
            readers=readers,
            max_pending_entries=max_pending_entries,
            min_free_bytes=min_free_bytes,
            writer_process=writer_process,
        )

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun closing the connections."""
        return self._closed

    def _check_readable(self) -> None:
        if self._closed:
            raise ClosedError("the store is closed")

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
        while self._inflight or (
            self.failure is None and (self._open or self._open_future is not None)
        ):
            self._give_up_full()
            if not self._inflight and self.failure is not None:
                break
            self._idle.clear()
            self._kick()
            await self._idle.wait()
        self._closed = True
        await self._close_connections()

    # -- what the store reports ----------------------------------------------------

    @abc.abstractmethod
    def storage_metrics(self) -> StorageMetrics:
        """Sizes of the database and its write-ahead log (cheap: no query)."""

    # -- recovery ------------------------------------------------------------------

    async def prefetch_recovery(self) -> None:
        """Read at once what loading every topic asks for topic by topic (ledgers, open
        ledgers' totals, snapshots, producers), so that each of those reads is answered
        from memory, once, until :meth:`end_recovery`. For a store where a read is a
        network round trip (PostgreSQL: a failover loads every topic); a no-op here."""
        return

    async def end_recovery(self) -> None:
        """Drop what :meth:`prefetch_recovery` read and has not handed out yet."""
        return

    # -- reads: the log ------------------------------------------------------------
    # Positions are (ledger_id, entry_id); a "row" of the log is
    # (ledger_id, entry_id, kind, txn or None, data).

    @abc.abstractmethod
    async def ledger_rows(self, topic_id: int) -> list[Row]:
        """A topic's ledgers by id: ``(ledger_id, created_ms, entries, bytes, has_aborts,
        location, url, size, checksum)`` (entries and bytes are None while open)."""

    @abc.abstractmethod
    async def ledger_totals(self, topic_id: int, ledger_id: int) -> tuple[int, int]:
        """``(entries, payload bytes)`` stored in one ledger."""

    @abc.abstractmethod
    async def read_range(
        self, topic_id: int, start: Position, end: Position, limit: int
    ) -> list[Row]:
        """Up to ``limit`` log rows from ``start`` to ``end`` (inclusive), in order."""

    @abc.abstractmethod
    async def read_positions(self, topic_id: int, positions: Sequence[Position]) -> list[Row]:
        """The log rows at ``positions`` that exist, in log order."""

    @abc.abstractmethod
    async def read_metas(self, topic_id: int, start: Position, limit: int) -> list[Row]:
        """Up to ``limit`` ``(ledger_id, entry_id, kind, txn)`` from ``start`` on."""

    @abc.abstractmethod
    async def count_data(
        self,
        topic_id: int,
        start: Position,
        end: Position,
        except_txns: Sequence[int],
        except_keys: Sequence[int],
    ) -> int:
        """Data entries from ``start`` to ``end`` (inclusive), leaving out those of
        ``except_txns`` and those whose ``ledger_id << 32 | entry_id`` is in
        ``except_keys``."""

    @abc.abstractmethod
    async def ledger_entries(self, topic_id: int, ledger_id: int) -> list[Row]:
        """Every entry of one ledger as ``(entry_id, kind, txn, data)``, in order."""

    @abc.abstractmethod
    async def ledger_aborted(self, topic_id: int, ledger_id: int) -> list[Row]:
        """The aborted-index rows whose ABORT marker lies in ``ledger_id``, by marker:
        ``(txn, first_ledger, first_entry, last_ledger, last_entry, marker_ledger,
        marker_entry, stable_ledger, stable_entry)``."""

    # -- reads: the catalog --------------------------------------------------------

    @abc.abstractmethod
    async def topic_rows(self) -> list[Row]:
        """Every topic by id: ``(topic_id, name, created_ms, retention, offload)``."""

    @abc.abstractmethod
    async def partitioned_rows(self) -> list[Row]:
        """Every partitioned topic by name: ``(name, partitions, created_ms)``."""

    @abc.abstractmethod
    async def next_topic_id(self) -> int:
        """An id never used by any topic, deleted ones included."""

    @abc.abstractmethod
    async def producer_rows(self, topic_id: int) -> list[Row]:
        """A topic's idempotent producers: ``(producer, last_seq, positions)``."""

    # -- reads: subscriptions ------------------------------------------------------

    @abc.abstractmethod
    async def subscription_rows(self) -> list[Row]:
        """Every subscription: ``(topic_id, name, type, isolation, cursor, created_ms)``."""

    @abc.abstractmethod
    async def subscription_policy_rows(self) -> list[Row]:
        """Every subscription with a consumer policy: ``(topic_id, name, policy)``."""

    @abc.abstractmethod
    async def redelivery_rows(self) -> list[Row]:
        """Every stored redelivery state: ``(topic_id, name, ledger_id, entry_id, count,
        not_before_ms)``, by subscription and position."""

    @abc.abstractmethod
    async def delivery_time_rows(self, after_ms: int) -> list[Row]:
        """Every stored delivery time later than ``after_ms``: ``(topic_id, ledger_id,
        entry_id, deliver_at_ms)``."""

    @abc.abstractmethod
    async def topic_ttl_rows(self) -> list[Row]:
        """Every topic with a message TTL: ``(topic_id, ttl_ms)``."""

    # -- reads: the coordinator ----------------------------------------------------
    # An ended row is (seq, state, timeout_ms, deadline_ms, label, fenced, topics,
    # created_ms, reason, owner).

    @abc.abstractmethod
    async def store_meta(self, keys: Sequence[str]) -> dict[str, Any]:
        """The store's own settings named in ``keys`` that are set (identity, ...)."""

    @abc.abstractmethod
    async def remote_ledger_count(self) -> int:
        """How many ledgers of every topic live in the object store."""

    @abc.abstractmethod
    async def next_txn_seq(self) -> int | None:
        """The reserved transaction sequence counter (None before the first)."""

    @abc.abstractmethod
    async def nth_newest_ended_seq(self, ended_since_ms: int, n: int) -> int | None:
        """The seq of the ``n``-th newest (0-based) transaction that ended at or after
        ``ended_since_ms``; None if fewer ended."""

    @abc.abstractmethod
    async def outcome_codes(
        self, ended_since_ms: int, below_seq: int, limit: int, reason_codes: Mapping[str, int]
    ) -> list[tuple[int, int]]:
        """``(seq, code)`` of up to ``limit`` transactions ended since ``ended_since_ms``
        with a seq below ``below_seq``, newest first; ``code`` is ``committed | fenced <<
        1 | reason_codes[reason] << 2`` (0 for a reason not listed)."""

    @abc.abstractmethod
    async def txn_rows(self, ended_since_ms: int, from_seq: int) -> list[Row]:
        """Open transactions, and those ended since ``ended_since_ms`` with a seq from
        ``from_seq`` on, by seq: ``(seq, state, timeout_ms, deadline_ms,
        transactional_id, label, fenced, topics, acks, created_ms, ended_ms, reason,
        owner)``."""

    @abc.abstractmethod
    async def finish_keys(self) -> list[str]:
        """Every recorded ``finish`` idempotence key."""

    @abc.abstractmethod
    async def producer_epoch_rows(self) -> list[Row]:
        """Every transactional id's producer epoch: ``(name, epoch, session, used_ms,
        txn_seq)`` (``name`` in its owner's namespace; ``txn_seq`` None or the seq of the
        epoch's newest transaction)."""

    @abc.abstractmethod
    async def ended_txn_row(self, seq: int) -> Row | None:
        """One ended transaction's row, if it is still stored."""

    @abc.abstractmethod
    async def ended_txn_rows(
        self,
        *,
        state: str | None,
        label_prefix: str | None,
        born_before_ms: int | None,
        after_seq: int,
        upto_seq: int,
        limit: int,
    ) -> list[Row]:
        """A page of ended rows by seq in ``(after_seq, upto_seq]``, filtered by state,
        label prefix and creation time when given."""

    # -- reads: snapshots ----------------------------------------------------------

    @abc.abstractmethod
    async def snapshot_rows(self, topic_id: int) -> list[tuple[int, bytes]]:
        """A topic's snapshots, newest first: ``(snapshot_id, data)``."""

    @abc.abstractmethod
    async def snapshot_counters(self, topic_id: int) -> tuple[int, int]:
        """The highest snapshot id and segment id of a topic (-1 for none)."""

    @abc.abstractmethod
    async def snapshot_segments(
        self, topic_id: int, segment_ids: Sequence[int]
    ) -> dict[int, bytes]:
        """The segments of ``segment_ids`` that exist, by id."""


def _identity(path: Path | None) -> tuple[int, int] | None:
    """``(device, inode)`` of the file at ``path``, None if there is none."""
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


DataRow = tuple[int, int | None, bytes]
"""``(entry_id, txn sequence or None, payload)`` of one data entry."""


class StoreReader(abc.ABC):
    """Read-only, synchronous access to a store's committed rows, for readers in other
    processes (the Spark ``path`` mode): no engine, no event loop, no writes.

    One connection, used from the thread that opened it; close it (or use it as a
    context manager). Every read inside :meth:`snapshot` sees one consistent, committed
    state of the store while its owner keeps writing. What the rows *mean* (the
    committed view) is :class:`~txnstream.txn_buffer.CommittedReader`'s business.
    """

    @staticmethod
    def open(path: str | Path) -> StoreReader:
        """Open the data directory at ``path`` read-only, or the PostgreSQL store at a
        ``postgresql://`` URL. Raises :class:`~txnstream.ledger.InvalidArgumentError` if it
        is not a txnstream data directory (or store), :class:`~txnstream.ledger.LedgerError`
        if it cannot be opened."""
        from ._pg_url import PostgresUrl, store_location

        location = store_location(path)
        if isinstance(location, PostgresUrl):
            from ._pg_view import PgStoreReader  # (imports psycopg: only when used)

            return PgStoreReader(location.url)
        from ._sqlite_view import SqliteStoreReader  # (it imports this module)

        return SqliteStoreReader(path)

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection (idempotent)."""

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abc.abstractmethod
    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """A context in which every read sees one snapshot of the store."""

    @abc.abstractmethod
    def topic_id(self, name: str) -> int | None:
        """The id of topic ``name``, None if there is none."""

    @abc.abstractmethod
    def first_local(self, topic_id: int) -> Position | None:
        """The oldest entry stored locally (not offloaded)."""

    @abc.abstractmethod
    def last_local(self, topic_id: int, before: Position | None = None) -> Position | None:
        """The newest entry stored locally (before ``before``, when given)."""

    @abc.abstractmethod
    def remote_ledgers(self, topic_id: int) -> list[tuple[int, int, str, int | None]]:
        """The offloaded ledgers, oldest first: ``(ledger_id, entries, url, size)``."""

    @abc.abstractmethod
    def undecided_txns(self, decided: Sequence[str]) -> list[tuple[int, bytes]]:
        """``(seq, encoded topics)`` of every transaction whose state is not in
        ``decided``."""

    @abc.abstractmethod
    def first_data_of(
        self, topic_id: int, txns: Sequence[int], after: Position | None
    ) -> Position | None:
        """The first local data entry of any of ``txns`` (after ``after``, if given)."""

    @abc.abstractmethod
    def nth_local(self, topic_id: int, start: Position, n: int) -> Position | None:
        """The position of the ``n``-th local entry (0-based) at or after ``start``."""

    @abc.abstractmethod
    def ledger_tops(self, topic_id: int) -> list[tuple[int, int | None]]:
        """``(ledger_id, highest local entry id or None)`` of every ledger, in order."""

    @abc.abstractmethod
    def has_aborts_from(self, topic_id: int, ledger_id: int) -> bool:
        """Whether a ledger at or after ``ledger_id`` holds aborted-index rows."""

    @abc.abstractmethod
    def aborted_in(self, topic_id: int, ledger_id: int, lo: int, hi: int) -> set[int]:
        """Sequences of the aborted transactions with data in entries ``lo <= e < hi``
        of a local ledger (by the aborted index)."""

    @abc.abstractmethod
    def data_rows(
        self, topic_id: int, ledger_id: int, lo: int, hi: int, chunk: int
    ) -> Iterator[list[DataRow]]:
        """The data entries ``lo <= e < hi`` of a local ledger (markers skipped), in
        entry order, as lists of up to ``chunk`` rows fetched in bulk."""
