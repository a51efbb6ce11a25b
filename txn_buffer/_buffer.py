"""TxnBuffer: one topic's transaction buffer, a sans-I/O state machine.

Definition (Pulsar's ``TopicTransactionBuffer``, Kafka's last stable offset): the
*stable position*, here ``max_read_position`` (inclusive), is the position just before
the first entry of the oldest open transaction on the topic, or the last confirmed
(newest durable) position when none is open. A read_committed reader may read up to it
and everything there is decided: below it, every transactional entry belongs to a
committed or an aborted transaction, and the aborted ones are in ``aborted``.

The buffer is fed durable entries in position order (``on_entry``) and never awaits, so
no mutation is ever split by an ``await``. It holds O(open + retained aborted
transactions), never a transaction's messages.

Recovery rule: state after replaying entries ``[0, p]`` from scratch equals the state
restored from a snapshot taken at ``p`` followed by replay of the entries after ``p``.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView
from dataclasses import dataclass
from typing import Any

from pyroaring import BitMap64
from sortedcontainers import SortedList

from txnstream.ledger import EntryKind, Position, TxnId

from ._aborted import AbortedRow, AbortedSet


@dataclass(slots=True)
class OpenTxn:
    """An open transaction's durable data on this topic."""

    first: Position
    before_first: Position | None
    """The last confirmed position when ``first`` arrived: the stable limit it imposes."""
    last: Position


class AbortedTxn(tuple):  # type: ignore[type-arg]
    """An aborted transaction's data range on this topic (Kafka's AbortedTxn).

    ``AbortedTxn(txn_id, first, last, marker, stable)``; read-only. One tuple of plain
    ints (sequence, then each position's ledger and entry); the fields are made when
    read. The buffer retains the same ints in an :class:`AbortedSet` and makes one of
    these on the way out.
    """

    __slots__ = ()

    def __new__(
        cls,
        txn_id: TxnId,
        first: Position,
        last: Position,
        marker: Position,
        stable: Position | None,
    ) -> AbortedTxn:
        return _new_tuple(cls, _row(txn_id, first, last, marker, stable))

    @property
    def txn_id(self) -> TxnId:
        """The aborted transaction."""
        return TxnId(self[0])

    @property
    def first(self) -> Position:
        """Its first data entry on this topic."""
        return Position(self[1], self[2])

    @property
    def last(self) -> Position:
        """Its last data entry on this topic."""
        return Position(self[3], self[4])

    @property
    def marker(self) -> Position:
        """Its ABORT marker."""
        return Position(self[5], self[6])

    @property
    def stable(self) -> Position | None:
        """``max_read_position`` just before the ABORT marker (Kafka's lastStableOffset
        hint). A hint only: after retention or snapshot recovery it may differ from the
        value the original run computed, so nothing relies on it for correctness."""
        return None if self[7] is None else Position(self[7], self[8])

    def __repr__(self) -> str:
        return (
            f"AbortedTxn(txn_id={self.txn_id!r}, first={self.first!r}, last={self.last!r},"
            f" marker={self.marker!r}, stable={self.stable!r})"
        )


_new_tuple = tuple.__new__


def _row(
    txn_id: TxnId, first: Position, last: Position, marker: Position, stable: Position | None
) -> AbortedRow:
    return (
        txn_id.seq,
        first.ledger_id,
        first.entry_id,
        last.ledger_id,
        last.entry_id,
        marker.ledger_id,
        marker.entry_id,
        None if stable is None else stable.ledger_id,
        None if stable is None else stable.entry_id,
    )


def _wrap(row: AbortedRow) -> AbortedTxn:
    aborted: AbortedTxn = _new_tuple(AbortedTxn, row)
    return aborted


def _key(position: Position) -> tuple[int, int]:
    return (position.ledger_id, position.entry_id)


class _AbortedView(Mapping[TxnId, AbortedTxn]):
    """The retained aborted transactions by :class:`TxnId`, in marker order (a read-only
    view of the buffer's :class:`AbortedSet`). A lookup by id scans for the row (~17 ms
    a million): :meth:`TxnBuffer.find_aborted` takes a hint; iteration does not look up."""

    __slots__ = ("_set",)

    def __init__(self, aborted: AbortedSet) -> None:
        self._set = aborted

    def __getitem__(self, txn_id: TxnId) -> AbortedTxn:
        row = self._set.find(txn_id.seq) if isinstance(txn_id, TxnId) else None
        if row is None:
            raise KeyError(txn_id)
        return _wrap(row)

    def __contains__(self, txn_id: object) -> bool:
        return isinstance(txn_id, TxnId) and txn_id.seq in self._set

    def __iter__(self) -> Iterator[TxnId]:
        return (TxnId(row[0]) for row in self._set)

    def __len__(self) -> int:
        return len(self._set)

    def items(self) -> ItemsView[TxnId, AbortedTxn]:
        return _Items(self)

    def values(self) -> ValuesView[AbortedTxn]:
        return _Values(self)


class _Items(ItemsView[TxnId, AbortedTxn]):
    _mapping: _AbortedView

    def __iter__(self) -> Iterator[tuple[TxnId, AbortedTxn]]:
        return ((TxnId(row[0]), _wrap(row)) for row in self._mapping._set)


class _Values(ValuesView[AbortedTxn]):
    _mapping: _AbortedView

    def __iter__(self) -> Iterator[AbortedTxn]:
        return map(_wrap, self._mapping._set)


_NONE_YET: Any = ()  # an empty sorted container until the first add (see TxnBuffer)
_NO_ABORTS = AbortedSet()  # every buffer's until its first abort: never added to


class TxnBuffer:
    """Open transactions' first positions, the aborted set, and ``max_read_position``."""

    def __init__(self) -> None:
        self._ongoing: dict[TxnId, OpenTxn] = {}
        # (first position, txn id): the empty tuple until the first add, then a sorted
        # container (five or six objects for the collector; most of 10,000 topics never
        # see a transaction). The aborted set is a shared empty one until the first abort.
        self._ongoing_order: SortedList = _NONE_YET
        self._aborted = _NO_ABORTS
        self.last_confirmed: Position | None = None
        self.max_read_position: Position | None = None

    # -- feeding -------------------------------------------------------------------

    def on_entry(self, position: Position, kind: EntryKind, txn_id: TxnId | None) -> None:
        """Apply one durable entry; entries must arrive in strictly increasing position."""
        if self.last_confirmed is not None and position <= self.last_confirmed:
            raise ValueError(f"entry {position} arrived after {self.last_confirmed}")
        if txn_id is not None:
            if kind is EntryKind.DATA:
                open_txn = self._ongoing.get(txn_id)
                if open_txn is not None:
                    open_txn.last = position
                elif txn_id.seq not in self._aborted.seqs:
                    self._ongoing[txn_id] = OpenTxn(position, self.last_confirmed, position)
                    self._order().add((position, txn_id))
            else:
                open_txn = self._ongoing.pop(txn_id, None)
                if open_txn is not None:
                    self._ongoing_order.remove((open_txn.first, txn_id))
                    if kind is EntryKind.ABORT:
                        if self._aborted is _NO_ABORTS:
                            self._aborted = AbortedSet()
                        self._aborted.append(
                            _row(
                                txn_id,
                                open_txn.first,
                                open_txn.last,
                                position,
                                self.max_read_position,
                            )
                        )
        self.last_confirmed = position
        if self._ongoing_order:
            _, oldest = self._ongoing_order[0]
            self.max_read_position = self._ongoing[oldest].before_first
        else:
            self.max_read_position = position

    def on_run(
        self, first: Position, last: Position, kind: EntryKind, txn_id: TxnId | None
    ) -> None:
        """:meth:`on_entry` for every entry from ``first`` to ``last``: consecutive
        entries of this topic, all of ``kind`` and ``txn_id`` (a marker is a run of one).
        The same state as feeding them one by one, in one update."""
        if kind is not EntryKind.DATA or first is last:
            if first is not last:
                raise ValueError("a marker run holds one entry")
            self.on_entry(first, kind, txn_id)
            return
        if self.last_confirmed is not None and first <= self.last_confirmed:
            raise ValueError(f"entry {first} arrived after {self.last_confirmed}")
        if last < first:
            raise ValueError(f"run {first}..{last} goes backwards")
        if txn_id is not None:
            open_txn = self._ongoing.get(txn_id)
            if open_txn is not None:
                open_txn.last = last
            elif txn_id.seq not in self._aborted.seqs:
                self._ongoing[txn_id] = OpenTxn(first, self.last_confirmed, last)
                self._order().add((first, txn_id))
        self.last_confirmed = last
        if self._ongoing_order:
            _, oldest = self._ongoing_order[0]
            self.max_read_position = self._ongoing[oldest].before_first
        else:
            self.max_read_position = last

    # -- queries -------------------------------------------------------------------

    def is_aborted(self, txn_id: TxnId) -> bool:
        """True if ``txn_id`` aborted with data on this topic (O(1))."""
        return txn_id.seq in self._aborted

    @property
    def aborted_seqs(self) -> BitMap64:
        """Sequence numbers of the retained aborted transactions: a reader tests raw
        rows' ``txn`` column against it without making a :class:`TxnId` (``in`` takes
        an int from 0 to 2**64 - 1, as that column holds)."""
        return self._aborted.seqs

    def is_open(self, txn_id: TxnId) -> bool:
        """True if ``txn_id`` has durable data here and no marker yet."""
        return txn_id in self._ongoing

    @property
    def ongoing_txns(self) -> dict[TxnId, OpenTxn]:
        """Open transactions with data on this topic (do not mutate)."""
        return self._ongoing

    @property
    def aborted_txns(self) -> Mapping[TxnId, AbortedTxn]:
        """Retained aborted transactions, in marker order (a read-only view)."""
        return _AbortedView(self._aborted)

    def find_aborted(self, txn_id: TxnId, seen_at: Position | None = None) -> AbortedTxn | None:
        """The retained aborted transaction ``txn_id``, or None. ``seen_at``, one of its
        data entries' positions, starts the search at its marker's neighbourhood (a
        reader that met the entry has it)."""
        row = self._aborted.find(txn_id.seq, seen_at)
        return None if row is None else _wrap(row)

    def oldest_open(self) -> TxnId | None:
        """The open transaction whose first entry holds ``max_read_position``, if any."""
        return self._ongoing_order[0][1] if self._ongoing_order else None

    def open_below(self, low_watermark: int) -> list[TxnId]:
        """Open transactions whose id is below the coordinator's low watermark."""
        return [txn_id for txn_id in self._ongoing if txn_id.seq < low_watermark]

    def aborted_in_range(self, start: Position, end: Position) -> list[AbortedTxn]:
        """Aborted transactions whose data span overlaps ``[start, end]``, in marker order.

        Only the stretch of markers :meth:`AbortedSet.ranks_around` names can qualify.
        """
        lo, hi = _key(start), _key(end)
        return [
            _wrap(row)
            for row in self._aborted.rows_from(*self._aborted.ranks_around(start, end))
            if (row[1], row[2]) <= hi and (row[3], row[4]) >= lo
        ]

    def aborted_seqs_around(self, start: Position, end: Position) -> Sequence[int]:
        """Sequence numbers of the aborted transactions with data in ``[start, end]``,
        plus possibly some with none there (harmless to leave out of a count of that
        range): one slice of the aborted set, no object per transaction."""
        return self._aborted.seqs_around(start, end)

    @property
    def aborted(self) -> AbortedSet:
        """Retained aborted transactions in marker order, as :data:`AbortedRow` tuples
        (do not mutate)."""
        return self._aborted

    def _order(self) -> SortedList:
        order = self._ongoing_order
        if order is _NONE_YET:
            order = self._ongoing_order = SortedList()
        return order

    # -- maintenance ---------------------------------------------------------------

    def prune_aborted_before(self, position: Position) -> int:
        """Forget what lies before ``position`` (the first retained entry).

        Aborted transactions whose data all lies before it are dropped; one whose data
        starts before it starts at it now (what a replay from ``position`` would see).
        Returns how many were dropped.
        """
        return self._aborted.prune_before(position)

    def restore(
        self,
        *,
        last_confirmed: Position | None,
        max_read_position: Position | None,
        ongoing: dict[TxnId, OpenTxn],
        aborted: Sequence[AbortedRow] | AbortedSet,
    ) -> None:
        """Load state taken from a snapshot (replay continues after it). ``aborted``, in
        marker order, is an :class:`AbortedSet` (taken over, not copied) or rows: plain
        :data:`AbortedRow` tuples or :class:`AbortedTxn` values. Raises
        :class:`ValueError` for malformed rows."""
        if not isinstance(aborted, AbortedSet):
            aborted = AbortedSet(aborted)
        self.last_confirmed = last_confirmed
        self.max_read_position = max_read_position
        self._ongoing = dict(ongoing)
        self._ongoing_order = (
            SortedList((o.first, t) for t, o in ongoing.items()) if ongoing else _NONE_YET
        )
        self._aborted = aborted if aborted else _NO_ABORTS

    def _check(self) -> None:
        """Assert the buffer's invariants (tests call it after every step)."""
        assert len(self._ongoing) == len(self._ongoing_order)
        self._aborted._check()
        for first, txn_id in self._ongoing_order:
            open_txn = self._ongoing[txn_id]
            assert open_txn.first == first <= open_txn.last
            assert self.last_confirmed is not None
            assert open_txn.last <= self.last_confirmed
            assert self.max_read_position is None or self.max_read_position < first
            assert txn_id.seq not in self._aborted.seqs
        if not self._ongoing:
            assert self.max_read_position == self.last_confirmed
        elif self.max_read_position is not None:
            assert self.last_confirmed is not None
            assert self.max_read_position <= self.last_confirmed
        for row in self._aborted:
            aborted = _wrap(row)
            assert aborted.first <= aborted.last < aborted.marker
