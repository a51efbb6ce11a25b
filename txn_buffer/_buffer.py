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

from collections.abc import Iterator, KeysView, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sortedcontainers import SortedKeyList, SortedList

from ledger import EntryKind, Position, TxnId


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
    read. The buffer itself retains a *plain* tuple of the same ints (an :data:`AbortedRow`)
    and wraps it on the way out: the collector untracks exact tuples of ints, never a
    tuple subclass, and a million tracked objects make every full collection cost
    ~200 ms of event loop.
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

AbortedRow = tuple[int, int, int, int, int, int, int, int | None, int | None]
"""How the buffer retains an aborted transaction: :class:`AbortedTxn`'s ints, as an
exact tuple (which the garbage collector stops tracking)."""


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


def _marker_key(aborted: AbortedRow) -> tuple[int | None, int | None]:
    return (aborted[5], aborted[6])


def _key(position: Position) -> tuple[int, int]:
    return (position.ledger_id, position.entry_id)


class _AbortedView(Mapping[TxnId, AbortedTxn]):
    """The retained aborted transactions by :class:`TxnId` (a read-only view of the
    buffer's table, which is keyed by sequence number)."""

    __slots__ = ("_by_seq",)

    def __init__(self, by_seq: dict[int, AbortedRow]) -> None:
        self._by_seq = by_seq

    def __getitem__(self, txn_id: TxnId) -> AbortedTxn:
        return _wrap(self._by_seq[txn_id.seq])

    def __contains__(self, txn_id: object) -> bool:
        return isinstance(txn_id, TxnId) and txn_id.seq in self._by_seq

    def __iter__(self) -> Iterator[TxnId]:
        return map(TxnId, self._by_seq)

    def __len__(self) -> int:
        return len(self._by_seq)


class _AbortedTable(dict[int, AbortedRow]):
    """The aborted rows by sequence number: a dict the collector never untracks.

    CPython untracks an exact dict whose values it finds untracked (ours are exact
    tuples of ints) at a full collection, and tracks it again, as a *new* object, the
    moment a fresh tuple is put in: a million-entry table then sits in the youngest
    generation and every young collection walks it (35 ms each, measured) until it ages
    out, again after each abort. A subclass is never untracked, so it stays where it is
    (old, or frozen with the recovered state).
    """

    __slots__ = ()


_NONE_YET: Any = ()  # an empty sorted container until the first add (see TxnBuffer)


class TxnBuffer:
    """Open transactions' first positions, the aborted set, and ``max_read_position``."""

    def __init__(self) -> None:
        self._ongoing: dict[TxnId, OpenTxn] = {}
        # (first position, txn id) and the aborted rows by marker. Both start as the
        # empty tuple and become sorted containers at their first add: a sorted
        # container is five or six objects for the collector, and most of 10,000 topics
        # never see a transaction or an abort.
        self._ongoing_order: SortedList = _NONE_YET
        self._aborted: dict[int, AbortedRow] = _AbortedTable()  # by transaction seq
        self._aborted_by_marker: SortedKeyList = _NONE_YET
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
                elif txn_id.seq not in self._aborted:
                    self._ongoing[txn_id] = OpenTxn(position, self.last_confirmed, position)
                    self._order().add((position, txn_id))
            else:
                open_txn = self._ongoing.pop(txn_id, None)
                if open_txn is not None:
                    self._ongoing_order.remove((open_txn.first, txn_id))
                    if kind is EntryKind.ABORT:
                        aborted = _row(
                            txn_id, open_txn.first, open_txn.last, position, self.max_read_position
                        )
                        self._aborted[txn_id.seq] = aborted
                        self._by_marker().add(aborted)
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
            elif txn_id.seq not in self._aborted:
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
    def aborted_seqs(self) -> KeysView[int]:
        """Sequence numbers of the retained aborted transactions: a reader tests raw
        rows' ``txn`` column against it without making a :class:`TxnId`."""
        return self._aborted.keys()

    def is_open(self, txn_id: TxnId) -> bool:
        """True if ``txn_id`` has durable data here and no marker yet."""
        return txn_id in self._ongoing

    @property
    def ongoing_txns(self) -> dict[TxnId, OpenTxn]:
        """Open transactions with data on this topic (do not mutate)."""
        return self._ongoing

    @property
    def aborted_txns(self) -> Mapping[TxnId, AbortedTxn]:
        """Retained aborted transactions (a read-only view)."""
        return _AbortedView(self._aborted)

    def oldest_open(self) -> TxnId | None:
        """The open transaction whose first entry holds ``max_read_position``, if any."""
        return self._ongoing_order[0][1] if self._ongoing_order else None

    def open_below(self, low_watermark: int) -> list[TxnId]:
        """Open transactions whose id is below the coordinator's low watermark."""
        return [txn_id for txn_id in self._ongoing if txn_id.seq < low_watermark]

    def aborted_in_range(self, start: Position, end: Position) -> list[AbortedTxn]:
        """Aborted transactions whose data span overlaps ``[start, end]``, in marker order.

        A transaction's ABORT marker always follows its data, so only markers at or after
        ``start`` can qualify; cost O(aborted transactions with a marker after ``start``).
        """
        if not self._aborted_by_marker:
            return []
        lo, hi = _key(start), _key(end)
        return [
            _wrap(aborted)
            for aborted in self._aborted_by_marker.irange_key(min_key=lo)
            if (aborted[1], aborted[2]) <= hi and (aborted[3], aborted[4]) >= lo
        ]

    @property
    def aborted_by_marker(self) -> SortedKeyList:
        """Retained aborted transactions ordered by ABORT marker, as :data:`AbortedRow`
        tuples (do not mutate; an empty tuple until the first abort)."""
        return self._aborted_by_marker

    def iter_aborted(self) -> Iterator[AbortedTxn]:
        """Every retained aborted transaction, in marker order."""
        return map(_wrap, self._aborted_by_marker)

    def _order(self) -> SortedList:
        order = self._ongoing_order
        if order is _NONE_YET:
            order = self._ongoing_order = SortedList()
        return order

    def _by_marker(self) -> SortedKeyList:
        by_marker = self._aborted_by_marker
        if by_marker is _NONE_YET:
            by_marker = self._aborted_by_marker = SortedKeyList(key=_marker_key)
        return by_marker

    # -- maintenance ---------------------------------------------------------------

    def prune_aborted_before(self, position: Position) -> int:
        """Forget what lies before ``position`` (the first retained entry).

        Aborted transactions whose data all lies before it are dropped; one whose data
        starts before it starts at it now (what a replay from ``position`` would see).
        """
        at = _key(position)
        gone = [a for a in self._aborted_by_marker if (a[1], a[2]) < at]
        for aborted in gone:
            self._aborted_by_marker.remove(aborted)
            del self._aborted[aborted[0]]
            if (aborted[3], aborted[4]) >= at:
                clamped = (aborted[0], *at, *aborted[3:])
                self._aborted[aborted[0]] = clamped
                self._aborted_by_marker.add(clamped)
        return sum(1 for a in gone if (a[3], a[4]) < at)

    def restore(
        self,
        *,
        last_confirmed: Position | None,
        max_read_position: Position | None,
        ongoing: dict[TxnId, OpenTxn],
        aborted: Sequence[AbortedRow],
    ) -> None:
        """Load state taken from a snapshot (replay continues after it); ``aborted`` may
        hold :class:`AbortedTxn` values or plain :data:`AbortedRow` tuples."""
        aborted = [a if type(a) is tuple else cast(AbortedRow, tuple(a)) for a in aborted]
        self.last_confirmed = last_confirmed
        self.max_read_position = max_read_position
        self._ongoing = dict(ongoing)
        self._ongoing_order = (
            SortedList((o.first, t) for t, o in ongoing.items()) if ongoing else _NONE_YET
        )
        self._aborted = _AbortedTable((a[0], a) for a in aborted)
        self._aborted_by_marker = SortedKeyList(aborted, key=_marker_key) if aborted else _NONE_YET

    def _check(self) -> None:
        """Assert the buffer's invariants (tests call it after every step)."""
        assert len(self._ongoing) == len(self._ongoing_order)
        assert len(self._aborted) == len(self._aborted_by_marker)
        for first, txn_id in self._ongoing_order:
            open_txn = self._ongoing[txn_id]
            assert open_txn.first == first <= open_txn.last
            assert self.last_confirmed is not None
            assert open_txn.last <= self.last_confirmed
            assert self.max_read_position is None or self.max_read_position < first
            assert txn_id.seq not in self._aborted
        if not self._ongoing:
            assert self.max_read_position == self.last_confirmed
        elif self.max_read_position is not None:
            assert self.last_confirmed is not None
            assert self.max_read_position <= self.last_confirmed
        for row in self._aborted.values():
            assert type(row) is tuple
            aborted = _wrap(row)
            assert aborted.first <= aborted.last < aborted.marker
