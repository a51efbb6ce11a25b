"""The PostgreSQL store read from another process: :class:`PgStoreReader`.

One synchronous psycopg connection (no event loop), read-only. Inside
:meth:`~PgStoreReader.snapshot` every read belongs to one ``REPEATABLE READ READ ONLY``
transaction, so it sees one committed state while the active server keeps writing (as
SQLite's WAL snapshot does for :class:`~txnstream.ledger._sqlite_view.SqliteStoreReader`).
Any number of such readers (Spark executors, say) may read the database beside the servers.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import ClassVar

import psycopg
from psycopg import IsolationLevel

from . import _pg_sql as sql
from ._batch import Params
from ._errors import InvalidArgumentError, LedgerError
from ._pg_url import redact
from ._sql_reads import SqlStoreReader, ViewStatements
from ._store import DataRow, Row

_REQUIRED_TABLES = ["topics", "ledgers", "entries", "aborted_txns", "txns"]


class PgStoreReader(SqlStoreReader):
    """:class:`~txnstream.ledger.StoreReader` on a PostgreSQL store's database."""

    _sql: ClassVar[ViewStatements] = sql

    def __init__(self, url: str, connect_timeout: int = 10) -> None:
        self.url = url
        try:
            conn = psycopg.connect(
                url,
                autocommit=True,
                application_name="txnstream-reader",
                connect_timeout=connect_timeout,
                # read-only for every statement: ``conn.read_only`` covers only the
                # transactions psycopg begins, and in autocommit mode it begins none
                options="-c default_transaction_read_only=on",
            )
        except psycopg.Error as exc:
            raise LedgerError(f"cannot connect to {redact(url)}: {exc}") from exc
        conn.read_only = True
        conn.isolation_level = IsolationLevel.REPEATABLE_READ
        try:
            rows = conn.execute(sql.VIEW_TABLES, (_REQUIRED_TABLES,)).fetchall()
        except psycopg.Error as exc:
            conn.close()
            raise LedgerError(f"cannot read {redact(url)}: {exc}") from exc
        missing = set(_REQUIRED_TABLES) - {name for (name,) in rows}
        if missing:
            conn.close()
            raise InvalidArgumentError(
                f"{redact(url)} is not a txnstream store: it lacks the tables"
                f" {', '.join(sorted(missing))}"
            )
        self._conn = conn

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        with self._conn.transaction():
            yield

    def _rows(self, query: str, params: Params) -> list[Row]:
        return self._conn.execute(query, params).fetchall()

    def _one(self, query: str, params: Params) -> Row | None:
        return self._conn.execute(query, params).fetchone()

    def data_rows(
        self, topic_id: int, ledger_id: int, lo: int, hi: int, chunk: int
    ) -> Iterator[list[DataRow]]:
        # A server-side cursor: a ledger's rows arrive ``chunk`` at a time, never all at
        # once (WITH HOLD, so it works outside a snapshot's transaction too).
        name = f"txnstream_data_{uuid.uuid4().hex[:12]}"
        with self._conn.cursor(name=name, withhold=True) as cursor:
            cursor.execute(sql.VIEW_DATA, (topic_id, ledger_id, lo, hi))
            while rows := cursor.fetchmany(chunk):
                yield [(int(e), t, bytes(d)) for e, t, d in rows]
