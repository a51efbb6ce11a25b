"""CommittedReader: the committed view of a data directory, read without an engine.

For readers in other processes (the Spark ``path`` mode): one engine owns a data
directory, and a server may be running on it, so this never opens an engine. It reads
the store's rows through a read-only :class:`~txnstream.ledger.StoreReader`
(synchronous, no event loop), which sees a consistent snapshot of durable, committed
state while the owner keeps writing; this module holds only the logic.

The committed view, computed the way :class:`~txnstream.txn_buffer.TxnBuffer` does:

* ``max_read_position`` (the stable position) of a topic is its newest entry when no
  transaction is open on it, else the entry just before the first data entry of the
  oldest transaction that has data on the topic and no marker yet. A transaction's
  decision and its markers become durable in one store transaction, so "no marker on
  the topic" is "its transaction record is not decided yet"; that record and the entries are
  read in one snapshot (:meth:`CommittedReader.read_transaction`);
* below it everything is decided; the aborted transactions are the aborted-index
  rows (written atomically with each ABORT marker of a transaction that had data on the
  topic), looked up per read range, and only when a ledger at or after the range has
  ``has_aborts`` set (an ABORT marker always follows its data; KIP-1058).
* offloaded ledgers (a prefix of the topic's ledgers) have no local entries: their
  sizes come from their ledger records and their data from the
  object at their URL, whose ``aborted`` column flags aborted data, so reading their
  committed view needs no index lookup at all (:meth:`CommittedReader.read_offloaded`).

Values come back plain (positions, ints, raw ``(entry_id, txn, payload)`` rows fetched
in bulk): decoding payloads is the caller's business, so a bulk reader can decode them
vectorized.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from txnstream.ledger import (
    DataRow,
    OffloadStore,
    Position,
    RemoteStorageError,
    StoreReader,
    TopicNotFoundError,
    database_file,
    decode_payload,
    plain_payload_layout,
    split_value,
    unpack,
)

from ._state import TxnState

__all__ = ["CommittedReader", "CommittedView", "DataRow", "OffloadedLedger"]

_DECIDED = (TxnState.COMMITTED.value, TxnState.ABORTED.value)
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
        self._store = StoreReader.open(path)

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
        return database_file(path)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._store.close()

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
        with self._store.snapshot():
            yield

    def topic_id(self, topic: str) -> int:
        """The id of ``topic``; :class:`~txnstream.ledger.TopicNotFoundError` if it is unknown."""
        topic_id = self._store.topic_id(topic)
        if topic_id is None:
            raise TopicNotFoundError(f"topic {topic!r} not found in data directory {self.path}")
        return topic_id

    def view(self, topic: str, *, scan_from: Position | None = None) -> CommittedView:
        """Look at ``topic`` in one read transaction (``scan_from``: see
        :meth:`max_read_position`)."""
        with self.read_transaction():
            tid = self.topic_id(topic)
            lac = self.last_confirmed(tid)
            stable = self.max_read_position(tid, topic, scan_from=scan_from) if lac else None
            remote = self.offloaded(tid)
            local = self._store.first_local(tid)
        first = Position(remote[0].ledger_id, 0) if remote else local
        return CommittedView(tid, first, lac, stable)

    def last_confirmed(self, topic_id: int) -> Position | None:
        """The newest durable entry of the topic."""
        last = self._store.last_local(topic_id)
        return last if last is not None else self._last_remote(topic_id)

    def _last_remote(self, topic_id: int, before: int | None = None) -> Position | None:
        """The last entry of the newest remote ledger (below ledger ``before``)."""
        remote = [r for r in self.offloaded(topic_id) if before is None or r.ledger_id < before]
        return Position(remote[-1].ledger_id, remote[-1].entries - 1) if remote else None

    def offloaded(self, topic_id: int) -> list[OffloadedLedger]:
        """The topic's remote ledgers, oldest first (none in a pre-tiers data directory)."""
        return [OffloadedLedger(*row) for row in self._store.remote_ledgers(topic_id)]

    @staticmethod
    def object_url(base: str, topic: str, ledger_id: int) -> str:
        """The URL of ledger ``ledger_id`` of ``topic`` in the offload store at ``base``
        (``file:///dir``, a plain path or ``s3://bucket/prefix``); raises
        :class:`~txnstream.ledger.InvalidArgumentError` for a bad ``base``."""
        return OffloadStore(base).ledger_url(topic, ledger_id)

    @staticmethod
    def read_offloaded(
        url: str,
        lo: int,
        hi: int,
        *,
        columns: Sequence[str],
        committed: bool,
        size: int | None = None,
    ) -> Iterator[Any]:
        """Arrow record batches with ``columns`` (the Spark source's) of the data entries
        ``lo <= entry_id < hi`` of an offloaded ledger, read straight from its object;
        ``committed`` drops aborted data (the object's ``aborted`` column). Raises
        :class:`~txnstream.ledger.RemoteStorageError` if the object cannot be read."""
        del size  # the object's footer says all we need
        if hi <= lo:
            return
        try:
            yield from _OBJECTS.read_batches(url, lo, hi - 1, columns=columns, committed=committed)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read offloaded ledger {url}: {exc}") from exc

    def open_txns(self, topic: str) -> list[int]:
        """Sequences of the undecided transactions that touched ``topic``.

        Cost: one pass over the coordinator's undecided rows.
        """
        found = []
        for seq, topics in self._store.undecided_txns(_DECIDED):
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
        first = self._store.first_data_of(topic_id, pending, scan_from) if pending else None
        if first is None:
            return self.last_confirmed(topic_id)
        before = self._store.last_local(topic_id, before=first)
        if before is not None:
            return before
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
        return self._store.nth_local(topic_id, start, n)

    def ledger_sizes(self, topic_id: int) -> list[tuple[int, int]]:
        """``(ledger_id, number of durable entries)`` of every retained ledger, in order
        (-1 for a ledger with no entry); remote ledgers included."""
        rows = self._store.ledger_tops(topic_id)
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
        if not self._store.has_aborts_from(topic_id, ledger_id):
            return set()
        return self._store.aborted_in(topic_id, ledger_id, lo, hi)

    def data_rows(
        self, topic_id: int, ledger_id: int, lo: int, hi: int, chunk: int
    ) -> Iterator[list[DataRow]]:
        """The data entries ``lo <= e < hi`` of a ledger (markers skipped), in entry
        order, as lists of up to ``chunk`` raw rows fetched in bulk."""
        return self._store.data_rows(topic_id, ledger_id, lo, hi, chunk)
