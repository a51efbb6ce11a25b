"""A topic's retained aborted transactions, stored as machine integers.

A topic keeps every aborted transaction whose data is still retained: at a steady
abort rate that is hundreds of thousands of them, for as long as retention lasts. As
Python objects (a tuple of nine ints, its key in a dict, a sorted index by marker) each
took ~370 bytes; here one takes ~75: nine 8-byte integers in one flat array, plus its
sequence number in a Roaring bitmap for the membership test readers do per row. (A set
of ints took ~70 bytes per number, the doubling of its table included, and made the
memory of a busy topic without retention step up by 4-8 MiB at a time; the bitmap takes
a bit per number where a quarter of the transactions abort, two bytes where few do. Its
``in`` costs ~40 ns against a set's ~30: the delivery filter's 1,000 rows take ~45 us
instead of ~31.)

ABORT markers arrive in position order (the buffer is fed durable entries in order), so
appending keeps the rows sorted by marker: a bisection finds the rows after a position,
and no sorted container is needed. Neither the array nor the bitmap gives the garbage
collector anything to walk.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from itertools import chain, islice

from pyroaring import BitMap64

from txnstream.ledger import Position

AbortedRow = tuple[int, int, int, int, int, int, int, int | None, int | None]
"""One aborted transaction as plain ints: its sequence number, then the ledger and entry
of its first data entry, its last data entry, its ABORT marker and its stable hint
(None, None when it had none)."""

_WIDTH = 9
_MARKER = 5  # offset of the marker's ledger id in a row
_NONE = -1  # a stable hint's ledger and entry when it had none (positions are >= 0)
_CHUNK = 1024  # rows made at a time by rows_from
_SEQ_END = 1 << 64  # sequence numbers a BitMap64 holds: 0 <= seq < _SEQ_END


def _seq_set(seqs: Sequence[int] = ()) -> BitMap64:
    """A set of ``seqs`` (each 0 <= seq < 2**64; else :class:`OverflowError`)."""
    return BitMap64(array("Q", seqs))  # (it reads a uint64 buffer in C)


def _stored(row: AbortedRow) -> tuple[int, ...]:
    if row[7] is None:
        return (*row[:7], _NONE, _NONE)
    return row  # type: ignore[return-value]  # no None left in it


class AbortedSet:
    """Aborted transactions in ABORT-marker order, with O(1) membership by sequence.

    Rows go in and come out as :data:`AbortedRow` tuples (made on the way out); a row's
    index is its rank in marker order.
    """

    __slots__ = ("_rows", "_span", "seqs")

    def __init__(self, rows: Sequence[AbortedRow] = ()) -> None:
        self._rows = array("q")
        self.seqs = _seq_set()
        """The retained sequence numbers, for membership tests (do not mutate)."""
        # At least the most ledgers between a row's first data entry and its marker (a
        # bound: never lowered): a prune looks for the rows it clamps only among markers
        # this close to the cut.
        self._span = 0
        self.extend(rows)

    # -- adding --------------------------------------------------------------------

    def append(self, row: AbortedRow) -> None:
        """Add one whose marker follows every retained one's."""
        self.seqs.add(row[0])  # first: a sequence number out of range changes nothing
        self._rows.extend(_stored(row))
        if row[5] - row[1] > self._span:
            self._span = row[5] - row[1]

    def extend(self, rows: Sequence[AbortedRow]) -> None:
        """:meth:`append` of many, in marker order, after every retained one (a restored
        snapshot goes in a segment at a time, one array pass each). Raises
        :class:`ValueError`, leaving the set unchanged, for a row that is not nine
        integers in range or rows out of marker order."""
        if not rows:
            return
        if set(map(len, rows)) != {_WIDTH}:
            raise ValueError(f"an aborted row holds {_WIDTH} integers")
        new: array[int]
        try:
            try:
                new = array("q", chain.from_iterable(rows))  # type: ignore[arg-type]
            except TypeError:  # a row without a stable hint (rare): the slow way
                new = array("q", chain.from_iterable(map(_stored, rows)))
            seqs = _seq_set(new[0::_WIDTH])
        except (TypeError, OverflowError) as exc:
            raise ValueError(f"malformed aborted row: {exc}") from exc
        markers = list(zip(new[_MARKER::_WIDTH], new[_MARKER + 1 :: _WIDTH], strict=True))
        if self._rows:
            markers.insert(0, self._marker(len(self) - 1))
        if not all(map(operator.lt, markers, islice(markers, 1, None))):
            raise ValueError("aborted rows out of marker order")
        if len(seqs) != len(rows) or not self.seqs.isdisjoint(seqs):
            raise ValueError("an aborted transaction appears twice")
        self._rows.extend(new)
        self.seqs |= seqs
        self._span = max(self._span, *map(operator.sub, new[_MARKER::_WIDTH], new[1::_WIDTH]))

    # -- reading -------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.seqs)

    def __contains__(self, seq: object) -> bool:
        # (``seqs`` raises for what is not an unsigned 64-bit int: a parsed id can be any)
        return type(seq) is int and 0 <= seq < _SEQ_END and seq in self.seqs

    def row(self, index: int) -> AbortedRow:
        """The row of rank ``index`` in marker order."""
        start = index * _WIDTH
        row = tuple(self._rows[start : start + _WIDTH])
        if row[7] == _NONE:
            return (*row[:7], None, None)  # type: ignore[return-value]
        return row  # type: ignore[return-value]

    def __iter__(self) -> Iterator[AbortedRow]:
        """Every row, in marker order."""
        return self.rows_from(0)

    def rows_from(self, index: int, stop: int | None = None) -> Iterator[AbortedRow]:
        """The rows of rank ``index`` and after (before ``stop``), in marker order, made a
        thousand at a time from a copy of that part of the array (~0.1 us a row; a caller
        that stops early, or between loop steps, copies no more than it takes)."""
        end = len(self._rows) if stop is None else stop * _WIDTH
        for start in range(index * _WIDTH, end, _CHUNK * _WIDTH):
            part = self._rows[start : min(start + _CHUNK * _WIDTH, end)]
            rows = zip(*(part[k::_WIDTH] for k in range(_WIDTH)), strict=True)
            if _NONE in part[7::_WIDTH]:  # a row without a stable hint (rare)
                yield from (row if row[7] != _NONE else (*row[:7], None, None) for row in rows)
            else:
                yield from rows

    def _marker(self, index: int) -> tuple[int, int]:
        start = index * _WIDTH + _MARKER
        return (self._rows[start], self._rows[start + 1])

    def rank_at(self, position: Position) -> int:
        """The rank of the first row whose marker is at or after ``position``."""
        return bisect_left(range(len(self)), tuple(position), key=self._marker)

    def rank_after(self, position: Position | None) -> int:
        """The rank of the first row whose marker lies after ``position`` (0 for None)."""
        if position is None:
            return 0
        return bisect_right(range(len(self)), tuple(position), key=self._marker)

    def ranks_around(self, start: Position, end: Position) -> tuple[int, int]:
        """The ranks ``[lo, hi)`` of every row whose data may overlap ``[start, end]``:
        its marker follows its data, so it is at or after ``start``, and its first entry
        lies at most ``_span`` ledgers before its marker, so a marker past ``end``'s
        ledger + ``_span`` means data wholly after ``end``. Some rows between overlap
        nothing."""
        lo = self.rank_at(start)
        return lo, max(lo, self.rank_at(Position(end.ledger_id + self._span + 1, 0)))

    def seqs_around(self, start: Position, end: Position) -> Sequence[int]:
        """The sequence numbers of the rows :meth:`ranks_around` names (one slice of the
        array: a backlog count leaves them out, and one with no data in the range
        changes nothing there)."""
        lo, hi = self.ranks_around(start, end)
        return self._rows[lo * _WIDTH : hi * _WIDTH : _WIDTH]

    def find(self, seq: int, after: Position | None = None) -> AbortedRow | None:
        """The row of ``seq``, or None; ``after``, a position known to lie before its
        marker (one of its data entries), lets the search start there instead of at the
        oldest row (~17 ms a million)."""
        if seq not in self:
            return None
        start = self.rank_after(after)
        with memoryview(self._rows) as view:
            try:
                offset = operator.indexOf(view[start * _WIDTH :: _WIDTH], seq)
            except ValueError:  # ``after`` was not before its marker after all
                start, offset = 0, operator.indexOf(view[::_WIDTH], seq)
        return self.row(start + offset)

    # -- dropping ------------------------------------------------------------------

    def prune_before(self, position: Position) -> int:
        """Forget the data before ``position``: a row whose data all lies before it goes,
        one whose data starts before it starts at it now. Returns how many went."""
        at = (position.ledger_id, position.entry_id)
        rows = self._rows
        # A marker before ``at`` means all of the data is: those rows are a prefix. After
        # it, a row whose data starts before ``at`` has its first ledger at or before
        # ``at``'s, so it lies in the stretch ranks_around(at, at) bounds (a million rows
        # scanned took 55 ms; the stretch is a ledger or two).
        head, stop = self.ranks_around(position, position)
        gone = rows[0 : head * _WIDTH : _WIDTH]
        firsts = rows[head * _WIDTH + 1 : stop * _WIDTH : _WIDTH]
        below = at[0] + 1 if at[1] else at[0]  # first ledgers that can start before ``at``
        spanning = [head + i for i, ledger in enumerate(firsts) if ledger < below]
        for index in reversed(spanning):  # newest first: deleting keeps lower ranks
            start = index * _WIDTH
            first, last = (rows[start + 1], rows[start + 2]), (rows[start + 3], rows[start + 4])
            if last < at:
                gone.append(rows[start])
                del rows[start : start + _WIDTH]
            elif first < at:
                rows[start + 1 : start + 3] = array("q", at)
        del rows[: head * _WIDTH]
        self.seqs.difference_update(_seq_set(gone))
        return len(gone)

    def _check(self) -> None:
        """Assert the invariants (tests call it after every step)."""
        rows = self._rows
        assert len(rows) % _WIDTH == 0
        assert len(self.seqs) == len(rows) // _WIDTH
        assert set(rows[0::_WIDTH]) == set(self.seqs)
        markers = list(zip(rows[_MARKER::_WIDTH], rows[_MARKER + 1 :: _WIDTH], strict=True))
        assert markers == sorted(markers)
        assert len(set(markers)) == len(markers)
