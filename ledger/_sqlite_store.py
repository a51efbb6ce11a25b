"""The SQLite store: one file per data directory, one writer that group-commits, and
separate read connections.

* The write connection belongs to one thread this module starts and owns
  (:class:`_WriterThread`): a flush is one function handed to it through a queue,
  which applies the flush's statements in one SQLite transaction and reports back to
  the loop itself — one wake-up of the loop per flush, no future, coroutine or task in
  between. With ``writer_process`` a child process applies the flushes instead (see
  :mod:`txnstream.ledger._writer_process`).
* Reads go to ``readers`` read-only connections (aiosqlite, used through its public
  API), round robin; in WAL mode they see committed data only and never wait for
  the writer.
* The statements are :mod:`txnstream.ledger._sqlite_sql`'s; the typed reads over them
  are :class:`~txnstream.ledger._sql_reads.SqlStore`'s (shared with PostgreSQL); the
  schema and its migrations :mod:`txnstream.ledger._schema`'s.

This and :mod:`txnstream.ledger._sqlite_view` are the only modules that open SQLite
connections (besides the writer process's program, :mod:`txnstream.ledger._sqlwriter`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import aiosqlite

from . import _sqlite_sql as sql
from ._batch import Params, WriteBatch
from ._lock import DirectoryLock
from ._schema import migrate
from ._sql_reads import ReadStatements, SqlStore
from ._sqlwriter import Statements, apply_flush, writer_pragmas
from ._store import Row, StorageMetrics
from ._writer_process import WriterProcess

_TRANSIENT = ("database is locked", "database table is locked", "disk i/o error")
_T = TypeVar("_T")


class _WriterThread:
    """The thread that owns the write connection: it runs functions from its queue, in
    order, until it gets None."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.conn: sqlite3.Connection | None = None
        self._thread = threading.Thread(target=self._run, name="txnstream-writer", daemon=True)

    def _run(self) -> None:
        while (function := self._queue.get()) is not None:
            function()
        if self.conn is not None:
            self.conn.close()

    def post(self, function: Callable[[], None]) -> None:
        """Run ``function`` on the thread after everything posted before it."""
        self._queue.put(function)

    async def call(self, function: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``function(connection)`` on the thread and return its result."""
        return await self._call(lambda: function(self._connection()))

    def _connection(self) -> sqlite3.Connection:
        assert self.conn is not None
        return self.conn

    async def _call(self, function: Callable[[], _T]) -> _T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()

        def settle(result: Any, exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(result)

        def run() -> None:
            try:
                result = function()
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                loop.call_soon_threadsafe(settle, None, exc)
            else:
                loop.call_soon_threadsafe(settle, result, None)

        self.post(run)
        return await future

    async def start(self) -> None:
        """Start the thread and open the connection on it."""
        self._thread.start()

        def connect() -> None:
            self.conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)

        await self._call(connect)

    async def close(self) -> None:
        """Close the connection and end the thread (after what was posted before)."""
        if not self._thread.is_alive():
            return
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)


class SqliteStore(SqlStore):
    """The store on one SQLite file (WAL mode): see the module docstring."""

    _sql: ClassVar[ReadStatements] = sql

    def __init__(
        self,
        path: Path,
        writer: _WriterThread | None,
        readers: list[aiosqlite.Connection],
        *,
        max_pending_entries: int,
        min_free_bytes: int = 0,
    ) -> None:
        super().__init__(
            path, max_pending_entries=max_pending_entries, min_free_bytes=min_free_bytes
        )
        self.database = path
        """The SQLite file."""
        self._writer = writer
        self._process: WriterProcess | None = None
        self._readers = readers
        self._reader_cycle = itertools.cycle(readers)
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
    ) -> SqliteStore:
        """Open (creating and migrating if needed) the database at ``path`` and start
        the writer: a thread of this process, or with ``writer_process`` a child process
        (see :mod:`txnstream.ledger._writer_process`).

        Takes the directory's owner lock first (:class:`DirectoryLock`): a second opener
        gets :class:`DataDirLockedError` before anything is read or written.
        """
        path = Path(path)
        lock = await DirectoryLock.acquire_when_free(path.parent)
        writer = _WriterThread(path)
        reader_conns: list[aiosqlite.Connection] = []
        try:
            await writer.start()

            def setup(conn: sqlite3.Connection) -> None:
                for pragma in writer_pragmas(synchronous):
                    conn.execute(pragma)
                migrate(conn)

            await writer.call(setup)
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
                store.kick_at_once = True
                store._process = await WriterProcess.start(
                    path, synchronous, lock.fileno(), store._hopped, store._writer_lost
                )
        except BaseException:
            for conn in reader_conns:
                await conn.close()
            await writer.close()
            lock.release()
            raise
        store._lock = lock
        return store

    # -- the writer ----------------------------------------------------------------

    def _hop(self, batch: WriteBatch) -> None:
        # An operation the table does not name is SQLite SQL already (this store's own
        # tests queue raw statements); the layers above only queue typed operations.
        writes = sql.WRITES
        statements: Statements = [(writes.get(op, op), rows) for op, rows in batch.ops]
        if self._process is not None:
            self._process.apply(statements, batch.bytes)
            return
        writer = self._writer
        assert writer is not None
        assert writer.conn is not None
        conn = writer.conn
        loop = asyncio.get_running_loop()
        done = self._hopped

        def run() -> None:  # on the writer thread
            try:
                apply_flush(conn, statements)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                loop.call_soon_threadsafe(done, exc)
            else:
                loop.call_soon_threadsafe(done, None)

        writer.post(run)

    def _transient(self, exc: BaseException) -> bool:
        return isinstance(exc, sqlite3.OperationalError) and any(
            word in str(exc).lower() for word in _TRANSIENT
        )

    async def _close_connections(self) -> None:
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

    def storage_metrics(self) -> StorageMetrics:
        """The database file's size and its ``-wal`` file's (0 between truncations)."""
        database = self.database
        return StorageMetrics(
            database_bytes=_size(database),
            wal_bytes=_size(database.with_name(database.name + "-wal")),
        )

    # -- reading -------------------------------------------------------------------

    async def read(self, query: str, params: Params = ()) -> list[Row]:
        """Run SQLite SQL on a read connection, round robin; sees only committed
        (durable) data. (The typed reads use it, and this store's tests and tools.)"""
        self._check_readable()
        reader = next(self._reader_cycle)
        rows = await reader.execute_fetchall(query, params)
        return list(rows)  # type: ignore[arg-type]  # (no row factory: tuples)


def _size(path: Path) -> int:
    """The file's size, 0 when it does not exist (no WAL between checkpoints' truncation)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
