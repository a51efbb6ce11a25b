"""CommittedReader: the committed view of a data directory, read without an engine.

For readers in other processes (the Spark ``path`` mode): one engine owns a data
directory, and a server may be running on it, so this never opens an engine. It opens
the directory's SQLite file read-only with the stdlib ``sqlite3`` (synchronous, no
event loop) and reads the ledger tables and the coordinator's ``txns`` table. In WAL
mode such a reader sees a consistent snapshot of durable, committed state while the
owner keeps writing.

The committed view, computed the way :class:`~txnstream.txn_buffer.TxnBuffer` does:

* ``max_read_position`` (the stable position) of a topic is its newest entry when no
  transaction is open on it, else the entry just before the first data entry of the
  oldest transaction that has data on the topic and no marker yet. A transaction's
  decision and its markers become durable in one SQLite transaction, so "no marker on
  the topic" is "its ``txns`` row is not decided yet"; that row and the ``entries`` are
  read in one snapshot (:meth:`CommittedReader.read_transaction`);
* below it everything is decided; the aborted transactions are the ``aborted_txns``
  rows (written atomically with each ABORT marker of a transaction that had data on the
  topic), looked up per read range, and only when a ledger at or after the range has
  ``has_aborts`` set (an ABORT marker always follows its data; KIP-1058).
* offloaded ledgers (``location = 'remote'``, a prefix of the topic's ledgers) have no
  rows in ``entries``: their sizes come from ``ledgers`` and their data from the
  object at their URL, whose ``aborted`` column flags aborted data, so reading their
  committed view needs no index lookup at all (:meth:`CommittedReader.read_offloaded`).

Values come back plain (positions, ints, raw ``(entry_id, txn, payload)`` rows fetched
in bulk): decoding payloads is the caller's business, so a bulk reader can decode them
vectorized.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from txnstream.ledger import (
    DB_FILE,
    InvalidArgumentError,
    LedgerError,
    OffloadStore,
    Position,
    RemoteStorageError,
    TopicNotFoundError,
    decode_payload,
    plain_payload_layout,
    split_value,
    unpack,
)

from ._state import TxnState

DataRow = tuple[int, int | None, bytes]
"""``(entry_id, txn sequence or None, payload)`` of one data entry."""

_REQUIRED_TABLES = ("topics", "ledgers", "entries", "aborted_txns", "txns")
_DECIDED = (TxnState.COMMITTED.value, TxnState.ABORTED.value)
_TIERS_SCHEMA = 3
"""The schema version that added the ledgers' location (older files are all local)."""
_OBJECTS = OffloadStore()
"""This process's reader of offloaded objects (its caches are shared by every reader)."""


@dataclass(frozen=True, slots=True)
class OffloadedLedger:
    """A ledger of the remote tier: its size in entries and its object's URL and size."""

    ledger_id: int
    entries: int
    url: str
    size: int | None


@dataclass(frozen=True, slots=True)
class CommittedView:
    """One consistent look at a topic (all inclusive positions; None: no such entry)."""

    topic_id: int
    first: Position | None
    """The oldest retained entry."""
    last_confirmed: Position | None
    max_read_position: Position | None


class CommittedReader:
    """Read-only, synchronous access to the committed view of one data directory.

    Open it with the directory's path (it checks that it is one) and close it, or use it
    as a context manager. One connection, used from the thread that opened it.

    Raises :class:`~txnstream.ledger.InvalidArgumentError` if ``path`` is not a txnstream data
    directory and :class:`~txnstream.ledger.LedgerError` if its database cannot be opened.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        db = self.database_file(path)
        uri = f"file:{urllib.parse.quote(str(db.resolve()))}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open {db} read-only: {exc}") from exc
        try:
            conn.execute("PRAGMA query_only = 1")
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?, ?)",
                _REQUIRED_TABLES,
            ).fetchall()
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
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        self._tiers = int(version) >= _TIERS_SCHEMA

    decode_payload = staticmethod(decode_payload)
    """``(key, value, properties, publish_ms)`` of a stored payload (the ledger's codec)."""

    plain_payload_layout = staticmethod(plain_payload_layout)
    """The byte layout of key-less, property-less bytes payloads, for vectorized reads."""

    split_value = staticmethod(split_value)
    """``(value, value_json)`` columns of a message value, as offloaded objects hold them."""

    @staticmethod
    def database_file(path: str | Path) -> Path:
        """``<path>/txnstream.db``; :class:`~txnstream.ledger.InvalidArgumentError` if ``path`` is
        not a data directory."""
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

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._conn.close()

    def __enter__(self) -> CommittedReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @contextmanager
    def read_transaction(self) -> Iterator[None]:
        """Every read inside sees one snapshot of the database."""
        self._conn.execute("BEGIN")
        try:
            yield
        finally:
            self._conn.execute("COMMIT")

    def topic_id(self, topic: str) -> int:
        """The id of ``topic``; :class:`~txnstream.ledger.TopicNotFoundError` if it is unknown."""
        row = self._conn.execute("SELECT topic_id FROM topics WHERE name = ?", (topic,)).fetchone()
        if row is None:
            raise TopicNotFoundError(f"topic {topic!r} not found in data directory {self.path}")
        return int(row[0])

    def view(self, topic: str, *, scan_from: Position | None = None) -> CommittedView:
        """Look at ``topic`` in one read transaction (``scan_from``: see
        :meth:`max_read_position`)."""
        with self.read_transaction():
            tid = self.topic_id(topic)
            lac = self.last_confirmed(tid)
            stable = self.max_read_position(tid, topic, scan_from=scan_from) if lac else None
            remote = self.offloaded(tid)
            row = self._conn.execute(
                "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
                " ORDER BY ledger_id, entry_id LIMIT 1",
                (tid,),
            ).fetchone()
        if remote:
            first: Position | None = Position(remote[0].ledger_id, 0)
        else:
            first = None if row is None else Position(row[0], row[1])
        return CommittedView(tid, first, lac, stable)

    def last_confirmed(self, topic_id: int) -> Position | None:
        """The newest durable entry of the topic."""
        row = self._conn.execute(
            "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
            " ORDER BY ledger_id DESC, entry_id DESC LIMIT 1",
            (topic_id,),
        ).fetchone()
        if row is not None:
            return Position(row[0], row[1])
        return self._last_remote(topic_id)

    def _last_remote(self, topic_id: int, before: int | None = None) -> Position | None:
        """The last entry of the newest remote ledger (below ledger ``before``)."""
        remote = [r for r in self.offloaded(topic_id) if before is None or r.ledger_id < before]
        return Position(remote[-1].ledger_id, remote[-1].entries - 1) if remote else None

    def offloaded(self, topic_id: int) -> list[OffloadedLedger]:
        """The topic's remote ledgers, oldest first (none in a pre-tiers data directory)."""
        if not self._tiers:
            return []
        rows = self._conn.execute(
            "SELECT ledger_id, entries, url, size FROM ledgers WHERE topic_id = ?"
            " AND location = 'remote' ORDER BY ledger_id",
            (topic_id,),
        ).fetchall()
        return [OffloadedLedger(int(i), int(n), str(u), s) for i, n, u, s in rows]

    @staticmethod
    def object_url(base: str, topic: str, ledger_id: int) -> str:
        """The URL of ledger ``ledger_id`` of ``topic`` in the offload store at ``base``
        (``file:///dir``, a plain path or ``s3://bucket/prefix``); raises
        :class:`~txnstream.ledger.InvalidArgumentError` for a bad ``base``."""
        return OffloadStore(base).ledger_url(topic, ledger_id)

    @staticmethod
    def read_offloaded(
        url: str, lo: int, hi: int, *, committed: bool, size: int | None = None
    ) -> Iterator[Any]:
        """Arrow record batches (the Spark source's columns) of the data entries ``lo <=
        entry_id < hi`` of an offloaded ledger, read straight from its object;
        ``committed`` drops aborted data (the object's ``aborted`` column). Raises
        :class:`~txnstream.ledger.RemoteStorageError` if the object cannot be read."""
        del size  # the object's footer says all we need
        if hi <= lo:
            return
        try:
            yield from _OBJECTS.read_batches(url, lo, hi - 1, committed=committed)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read offloaded ledger {url}: {exc}") from exc

    def open_txns(self, topic: str) -> list[int]:
        """Sequences of the undecided transactions that touched ``topic``.

        Cost: one pass over the coordinator's undecided rows.
        """
        found = []
        for seq, topics in self._conn.execute(
            "SELECT seq, topics FROM txns WHERE state NOT IN (?, ?)", _DECIDED
        ):
            try:
                names = unpack(topics)
            except (ValueError, TypeError):  # a damaged row: assume it may touch the topic
                names = [topic]
            if topic in names:
                found.append(int(seq))
        return found

    def max_read_position(
        self, topic_id: int, topic: str, *, scan_from: Position | None = None
    ) -> Position | None:
        """The topic's stable position, as its transaction buffer computes it.

        The newest entry if no transaction with data on the topic is undecided;
        otherwise the entry just before the first data entry of the oldest such
        transaction (None if nothing precedes it). ``scan_from`` may be any value this
        returned earlier (it never moves backwards, so every open transaction starts
        after it); it bounds the scan for the first open entry. Call it inside
        :meth:`read_transaction`.
        """
        pending = self.open_txns(topic)
        first: Position | None = None
        if pending:
            marks = ",".join("?" * len(pending))
            sql = (
                "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ? AND kind = 0"
                f" AND txn IN ({marks})"
            )
            params: list[Any] = [topic_id, *pending]
            if scan_from is not None:
                sql += " AND (ledger_id, entry_id) > (?, ?)"
                params += [scan_from.ledger_id, scan_from.entry_id]
            row = self._conn.execute(sql + " ORDER BY ledger_id, entry_id LIMIT 1", params)
            found = row.fetchone()
            if found is not None:
                first = Position(found[0], found[1])
        if first is None:
            return self.last_confirmed(topic_id)
        before = self._conn.execute(
            "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
            " AND (ledger_id, entry_id) < (?, ?) ORDER BY ledger_id DESC, entry_id DESC LIMIT 1",
            (topic_id, first.ledger_id, first.entry_id),
        ).fetchone()
        if before is not None:
            return Position(before[0], before[1])
        return self._last_remote(topic_id, first.ledger_id)

    def nth_position(self, topic_id: int, start: Position, n: int) -> Position | None:
        """The position of the ``n``-th entry (0-based) at or after ``start``, if any."""
        for remote in self.offloaded(topic_id):
            if remote.ledger_id < start.ledger_id:
                continue
            lo = start.entry_id if remote.ledger_id == start.ledger_id else 0
            here = max(remote.entries - lo, 0)
            if n < here:
                return Position(remote.ledger_id, lo + n)
            n -= here
        row = self._conn.execute(
            "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
            " AND (ledger_id, entry_id) >= (?, ?) ORDER BY ledger_id, entry_id LIMIT 1 OFFSET ?",
            (topic_id, start.ledger_id, start.entry_id, n),
        ).fetchone()
        return None if row is None else Position(row[0], row[1])

    def ledger_sizes(self, topic_id: int) -> list[tuple[int, int]]:
        """``(ledger_id, number of durable entries)`` of every retained ledger, in order
        (-1 for a ledger with no entry); remote ledgers included."""
        rows = self._conn.execute(
            "SELECT ledger_id, (SELECT max(entry_id) FROM entries e WHERE e.topic_id ="
            " l.topic_id AND e.ledger_id = l.ledger_id) FROM ledgers l WHERE topic_id = ?"
            " ORDER BY ledger_id",
            (topic_id,),
        ).fetchall()
        remote = {r.ledger_id: r.entries for r in self.offloaded(topic_id)}
        return [
            (int(ledger), remote[ledger] if ledger in remote else -1 if top is None else top + 1)
            for ledger, top in rows
        ]

    def aborted_txns(self, topic_id: int, ledger_id: int, lo: int, hi: int) -> set[int]:
        """Sequences of the aborted transactions with data in entries ``lo <= e < hi`` of
        a local ledger; empty without an index lookup when no ledger at or after it holds
        an ABORT marker of a transaction with data. (A local ledger's aborted data has
        its ABORT marker in the same or a later, hence local, ledger.)"""
        flagged = self._conn.execute(
            "SELECT 1 FROM ledgers WHERE topic_id = ? AND ledger_id >= ? AND has_aborts != 0"
            " LIMIT 1",
            (topic_id, ledger_id),
        ).fetchone()
        if flagged is None:
            return set()
        rows = self._conn.execute(
            "SELECT txn FROM aborted_txns WHERE topic_id = ?"
            " AND (marker_ledger, marker_entry) >= (?, ?)"
            " AND (first_ledger, first_entry) < (?, ?) AND (last_ledger, last_entry) >= (?, ?)",
            (topic_id, ledger_id, lo, ledger_id, hi, ledger_id, lo),
        ).fetchall()
        return {int(txn) for (txn,) in rows}

    def data_rows(
        self, topic_id: int, ledger_id: int, lo: int, hi: int, chunk: int
    ) -> Iterator[list[DataRow]]:
        """The data entries ``lo <= e < hi`` of a ledger (markers skipped), in entry
        order, as lists of up to ``chunk`` raw rows fetched in bulk."""
        cursor = self._conn.execute(
            "SELECT entry_id, txn, data FROM entries WHERE topic_id = ? AND ledger_id = ?"
            " AND entry_id >= ? AND entry_id < ? AND kind = 0 ORDER BY entry_id",
            (topic_id, ledger_id, lo, hi),
        )
        while rows := cursor.fetchmany(chunk):
            yield rows
