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
from collections.abc import Iterator, Sequence
from pathlib import Path

from . import _sqlite_sql as sql
from ._errors import InvalidArgumentError, LedgerError
from ._position import Position
from ._schema import DB_FILE
from ._store import DataRow, StoreReader

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


class SqliteStoreReader(StoreReader):
    """:class:`~txnstream.ledger.StoreReader` on a data directory's SQLite file."""

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

    def _position(self, query: str, params: Sequence[object]) -> Position | None:
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
        if not self._tiers:
            return []
        rows = self._conn.execute(sql.VIEW_REMOTE, (topic_id,)).fetchall()
        return [(int(i), int(n), str(u), s) for i, n, u, s in rows]

    def undecided_txns(self, decided: Sequence[str]) -> list[tuple[int, bytes]]:
        query = sql.VIEW_UNDECIDED.format(marks=",".join("?" * len(decided)))
        return [(int(seq), topics) for seq, topics in self._conn.execute(query, tuple(decided))]

    def first_data_of(
        self, topic_id: int, txns: Sequence[int], after: Position | None
    ) -> Position | None:
        query = sql.VIEW_FIRST_DATA.format(marks=",".join("?" * len(txns)))
        params: list[object] = [topic_id, *txns]
        if after is not None:
            query += sql.VIEW_AFTER
            params += [after.ledger_id, after.entry_id]
        return self._position(query + sql.VIEW_FIRST_ORDER, params)

    def nth_local(self, topic_id: int, start: Position, n: int) -> Position | None:
        return self._position(sql.VIEW_NTH, (topic_id, start.ledger_id, start.entry_id, n))

    def ledger_tops(self, topic_id: int) -> list[tuple[int, int | None]]:
        rows = self._conn.execute(sql.VIEW_LEDGER_TOPS, (topic_id,)).fetchall()
        return [(int(ledger), top) for ledger, top in rows]

    def has_aborts_from(self, topic_id: int, ledger_id: int) -> bool:
        return self._conn.execute(sql.VIEW_HAS_ABORTS, (topic_id, ledger_id)).fetchone() is not None

    def aborted_in(self, topic_id: int, ledger_id: int, lo: int, hi: int) -> set[int]:
        rows = self._conn.execute(
            sql.VIEW_ABORTED, (topic_id, ledger_id, lo, ledger_id, hi, ledger_id, lo)
        ).fetchall()
        return {int(txn) for (txn,) in rows}

    def data_rows(
        self, topic_id: int, ledger_id: int, lo: int, hi: int, chunk: int
    ) -> Iterator[list[DataRow]]:
        cursor = self._conn.execute(sql.VIEW_DATA, (topic_id, ledger_id, lo, hi))
        while rows := cursor.fetchmany(chunk):
            yield rows
