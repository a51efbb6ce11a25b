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
* The statements are :mod:`txnstream.ledger._sqlite_sql`'s; the schema and its
  migrations :mod:`txnstream.ledger._schema`'s.

This and :mod:`txnstream.ledger._sqlite_view` are the only modules that open SQLite
connections (besides the writer process's program, :mod:`txnstream.ledger._sqlwriter`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import queue
import sqlite3
import threading
from array import array
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import msgspec

from . import _sqlite_sql as sql
from ._batch import Params, WriteBatch
from ._lock import DirectoryLock
from ._position import Position
from ._schema import migrate
from ._sqlwriter import Statements, apply_flush, writer_pragmas
from ._store import Row, StorageMetrics, Store
from ._writer_process import WriterProcess

_TRANSIENT = ("database is locked", "database table is locked", "disk i/o error")
_T = TypeVar("_T")
_JSON_ENCODE = msgspec.json.Encoder().encode


def _json_ints(values: Sequence[int]) -> str:
    """Ints as JSON text for ``json_each``. msgspec: ~5 ms for 200,000 ints where joining
    their str() took ~24 (a backlog count leaves out every aborted transaction of its
    range). A str, not bytes: the json functions of SQLite before 3.45 refuse a BLOB."""
    items = values.tolist() if isinstance(values, array) else list(values)
    return _JSON_ENCODE(items).decode()


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


class SqliteStore(Store):
    """The store on one SQLite file (WAL mode): see the module docstring."""

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

    async def read(self, query: str, params: Params = ()) -> list[Any]:
        """Run SQLite SQL on a read connection; sees only committed (durable) data.
        (This store's own: the typed reads use it, and its tests and tools.)"""
        self._check_readable()
        reader = next(self._reader_cycle)
        rows = await reader.execute_fetchall(query, params)
        return list(rows)

    async def ledger_rows(self, topic_id: int) -> list[Row]:
        return await self.read(sql.LEDGERS, (topic_id,))

    async def ledger_totals(self, topic_id: int, ledger_id: int) -> tuple[int, int]:
        ((entries, size),) = await self.read(sql.LEDGER_TOTALS, (topic_id, ledger_id))
        return int(entries), int(size)

    async def read_range(
        self, topic_id: int, start: Position, end: Position, limit: int
    ) -> list[Row]:
        return await self.read(
            sql.RANGE,
            (topic_id, start.ledger_id, start.entry_id, end.ledger_id, end.entry_id, limit),
        )

    async def read_positions(self, topic_id: int, positions: Sequence[Position]) -> list[Row]:
        return await self.read(sql.positions(positions), (topic_id,))

    async def read_metas(self, topic_id: int, start: Position, limit: int) -> list[Row]:
        return await self.read(sql.METAS, (topic_id, start.ledger_id, start.entry_id, limit))

    async def count_data(
        self,
        topic_id: int,
        start: Position,
        end: Position,
        except_txns: Sequence[int],
        except_keys: Sequence[int],
    ) -> int:
        rows = await self.read(
            sql.COUNT_DATA,
            (
                topic_id,
                start.ledger_id,
                start.entry_id,
                end.ledger_id,
                end.entry_id,
                _json_ints(except_txns),
                _json_ints(except_keys),
            ),
        )
        return int(rows[0][0])

    async def ledger_entries(self, topic_id: int, ledger_id: int) -> list[Row]:
        return await self.read(sql.LEDGER_ROWS, (topic_id, ledger_id))

    async def ledger_aborted(self, topic_id: int, ledger_id: int) -> list[Row]:
        return await self.read(sql.LEDGER_ABORTED, (topic_id, ledger_id))

    async def topic_rows(self) -> list[Row]:
        return await self.read(sql.TOPICS)

    async def partitioned_rows(self) -> list[Row]:
        return await self.read(sql.PARTITIONED)

    async def next_topic_id(self) -> int:
        highest, reserved = (await self.read(sql.NEXT_TOPIC_ID))[0]
        return max(int(highest) + 1, int(reserved or 0))

    async def producer_rows(self, topic_id: int) -> list[Row]:
        return await self.read(sql.PRODUCERS, (topic_id,))

    async def subscription_rows(self) -> list[Row]:
        return await self.read(sql.SUBSCRIPTIONS)

    async def subscription_policy_rows(self) -> list[Row]:
        return await self.read(sql.SUBSCRIPTION_POLICIES)

    async def redelivery_rows(self) -> list[Row]:
        return await self.read(sql.REDELIVERIES)

    async def delivery_time_rows(self, after_ms: int) -> list[Row]:
        return await self.read(sql.DELIVERY_TIMES, (after_ms,))

    async def topic_ttl_rows(self) -> list[Row]:
        return await self.read(sql.TOPIC_TTLS)

    async def store_meta(self, keys: Sequence[str]) -> dict[str, Any]:
        return dict(await self.read(sql.STORE_META, (json.dumps(list(keys)),)))

    async def remote_ledger_count(self) -> int:
        return int((await self.read(sql.REMOTE_LEDGERS))[0][0])

    async def next_txn_seq(self) -> int | None:
        rows = await self.read(sql.NEXT_TXN_SEQ)
        return int(rows[0][0]) if rows else None

    async def nth_newest_ended_seq(self, ended_since_ms: int, n: int) -> int | None:
        rows = await self.read(sql.NTH_NEWEST_ENDED, (ended_since_ms, n))
        return int(rows[0][0]) if rows else None

    async def outcome_codes(
        self, ended_since_ms: int, below_seq: int, limit: int, reason_codes: Mapping[str, int]
    ) -> list[tuple[int, int]]:
        return await self.read(sql.outcome_codes(reason_codes), (ended_since_ms, below_seq, limit))

    async def txn_rows(self, ended_since_ms: int, from_seq: int) -> list[Row]:
        return await self.read(sql.TXNS, (ended_since_ms, from_seq))

    async def finish_keys(self) -> list[str]:
        return [key for (key,) in await self.read(sql.FINISH_KEYS)]

    async def ended_txn_row(self, seq: int) -> Row | None:
        rows = await self.read(sql.ENDED_TXN, (seq,))
        return rows[0] if rows else None

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
        params: list[object] = []
        if state is not None:
            params.append(state)
        if label_prefix is not None:
            params += [len(label_prefix), label_prefix]
        if born_before_ms is not None:
            params.append(born_before_ms)
        query = sql.ended_txns(
            state is not None, label_prefix is not None, born_before_ms is not None
        )
        return await self.read(query, (*params, after_seq, upto_seq, limit))

    async def snapshot_rows(self, topic_id: int) -> list[tuple[int, bytes]]:
        return await self.read(sql.SNAPSHOTS, (topic_id,))

    async def snapshot_counters(self, topic_id: int) -> tuple[int, int]:
        ((snapshot, segment),) = await self.read(sql.SNAPSHOT_COUNTERS, (topic_id, topic_id))
        return int(snapshot), int(segment)

    async def snapshot_segments(
        self, topic_id: int, segment_ids: Sequence[int]
    ) -> dict[int, bytes]:
        if not segment_ids:
            return {}
        rows = await self.read(sql.segments(segment_ids), (topic_id,))
        return dict(rows)


def _size(path: Path) -> int:
    """The file's size, 0 when it does not exist (no WAL between checkpoints' truncation)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0
