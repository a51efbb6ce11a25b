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
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import IsolationLevel

from . import _pg_sql as sql
from ._errors import InvalidArgumentError, LedgerError
from ._pg_url import redact
from ._position import Position
from ._store import DataRow, StoreReader

_REQUIRED_TABLES = ["topics", "ledgers", "entries", "aborted_txns", "txns"]


class PgStoreReader(StoreReader):
    """:class:`~txnstream.ledger.StoreReader` on a PostgreSQL store's database."""

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

    def _rows(self, query: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._conn.execute(query, params).fetchall()

    def _position(self, query: str, params: Sequence[Any]) -> Position | None:
        row = self._conn.execute(query, params).fetchone()
        return None if row is None else Position(row[0], row[1])

    def topic_id(self, name: str) -> int | None:
        row = self._conn.execute(sql.VIEW_TOPIC, (name,)).fetchone()
        return None if row is None else int(row[0])

    def first_local(self, topic_id: int) -> Position | None:
        return self._position(sql.VIEW_FIRST, (topic_id,))

    def last_local(self, topic_id: int, before: Position | None = None) -> Position | None:
        if before is None:
            return self._position(sql.VIEW_LAST, (topic_id,))
        return self._position(sql.VIEW_LAST_BEFORE, (topic_id, before.ledger_id, before.entry_id))

    def remote_ledgers(self, topic_id: int) -> list[tuple[int, int, str, int | None]]:
        rows = self._rows(sql.VIEW_REMOTE, (topic_id,))
        return [(int(i), int(n), str(u), s) for i, n, u, s in rows]

    def undecided_txns(self, decided: Sequence[str]) -> list[tuple[int, bytes]]:
        rows = self._rows(sql.VIEW_UNDECIDED, (list(decided),))
        return [(int(seq), topics) for seq, topics in rows]

    def first_data_of(
        self, topic_id: int, txns: Sequence[int], after: Position | None
    ) -> Position | None:
        query = sql.VIEW_FIRST_DATA
        params: list[object] = [topic_id, [int(txn) for txn in txns]]
        if after is not None:
            query += sql.VIEW_AFTER
            params += [after.ledger_id, after.entry_id]
        return self._position(query + sql.VIEW_FIRST_ORDER, params)

    def nth_local(self, topic_id: int, start: Position, n: int) -> Position | None:
        return self._position(sql.VIEW_NTH, (topic_id, start.ledger_id, start.entry_id, n))

    def ledger_tops(self, topic_id: int) -> list[tuple[int, int | None]]:
        rows = self._rows(sql.VIEW_LEDGER_TOPS, (topic_id,))
        return [(int(ledger), top) for ledger, top in rows]

    def has_aborts_from(self, topic_id: int, ledger_id: int) -> bool:
        return bool(self._rows(sql.VIEW_HAS_ABORTS, (topic_id, ledger_id)))

    def aborted_in(self, topic_id: int, ledger_id: int, lo: int, hi: int) -> set[int]:
        rows = self._rows(sql.VIEW_ABORTED, (topic_id, ledger_id, lo, ledger_id, hi, ledger_id, lo))
        return {int(txn) for (txn,) in rows}

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
