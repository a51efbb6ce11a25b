"""The SQLite store read from another process: :class:`SqliteStoreReader`.

It opens a data directory's SQLite file read-only with the stdlib ``sqlite3``
(synchronous, no event loop). In WAL mode such a reader sees a consistent snapshot of
durable, committed state while the owner keeps writing; a server may be running on
the directory meanwhile.
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from . import _sqlite_sql as sql
from ._batch import Params
from ._errors import InvalidArgumentError, LedgerError
from ._schema import DB_FILE
from ._sql_reads import SqlStoreReader, ViewStatements
from ._store import DataRow, Row

_REQUIRED_TABLES = ("topics", "ledgers", "entries", "aborted_txns", "txns")
_TIERS_SCHEMA = 3
"""The schema version from which ledgers have a location (older files are all local)."""


def database_file(path: str | Path) -> Path:
    """``<path>/txnstream.db``; :class:`InvalidArgumentError` if ``path`` is not a data
    directory."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise InvalidArgumentError(
            f"path {str(path)!r} is not a txnstream data directory: no such directory"
        )
    db = directory / DB_FILE
    if not db.is_file():
        raise InvalidArgumentError(
            f"path {str(path)!r} is not a txnstream data directory: it has no {DB_FILE}"
        )
    return db


class SqliteStoreReader(SqlStoreReader):
    """:class:`~txnstream.ledger.StoreReader` on a data directory's SQLite file."""

    _sql: ClassVar[ViewStatements] = sql

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        db = database_file(path)
        uri = f"file:{urllib.parse.quote(str(db.resolve()))}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open {db} read-only: {exc}") from exc
        try:
            conn.execute("PRAGMA query_only = 1")
            rows = conn.execute(sql.VIEW_TABLES, _REQUIRED_TABLES).fetchall()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise InvalidArgumentError(
                f"path {self.path!r} is not a txnstream data directory: {db.name} is not a"
                f" txnstream database ({exc})"
            ) from None
        missing = set(_REQUIRED_TABLES) - {name for (name,) in rows}
        if missing:
            conn.close()
            raise InvalidArgumentError(
                f"path {self.path!r} is not a txnstream data directory: {db.name} lacks the"
                f" tables {', '.join(sorted(missing))}"
            )
        self._conn = conn
        (version,) = conn.execute(sql.VIEW_VERSION).fetchone()
        self._tiers = int(version) >= _TIERS_SCHEMA

    def close(self) -> None:
        self._conn.close()

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            self._conn.execute("COMMIT")

    def _rows(self, query: str, params: Params) -> list[Row]:
        return self._conn.execute(query, params).fetchall()

    def _one(self, query: str, params: Params) -> Row | None:
        row: Row | None = self._conn.execute(query, params).fetchone()
        return row

    def remote_ledgers(self, topic_id: int) -> list[tuple[int, int, str, int | None]]:
        return super().remote_ledgers(topic_id) if self._tiers else []

    def data_rows(
        self, topic_id: int, ledger_id: int, lo: int, hi: int, chunk: int
    ) -> Iterator[list[DataRow]]:
        cursor = self._conn.execute(sql.VIEW_DATA, (topic_id, ledger_id, lo, hi))
        while rows := cursor.fetchmany(chunk):
            yield rows
