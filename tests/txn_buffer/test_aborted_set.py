"""The aborted set's compact storage against a plain list of rows."""

from __future__ import annotations

import tracemalloc
from itertools import islice
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

import txnstream.txn_buffer._aborted as aborted_module
from txnstream.ledger import Position
from txnstream.txn_buffer import AbortedRow, AbortedSet

LEDGER = 5  # entries per ledger in these positions


def _at(n: int) -> tuple[int, int]:
    return (n // LEDGER, n % LEDGER)


@st.composite
def aborted_rows(draw: st.DrawFn) -> list[AbortedRow]:
    """Rows in marker order, as a buffer makes them: each transaction's data (first <=
    last) lies before its marker; sequence numbers are unique but not in marker order."""
    count = draw(st.integers(0, 25))
    seqs = draw(st.lists(st.integers(0, 2**40), min_size=count, max_size=count, unique=True))
    rows: list[AbortedRow] = []
    marker = 0
    for seq in seqs:
        marker += draw(st.integers(1, 6))
        first = draw(st.integers(0, marker - 1))
        last = draw(st.integers(first, marker - 1))
        stable = draw(st.none() | st.integers(0, marker - 1))
        hint = (None, None) if stable is None else _at(stable)
        rows.append((seq, *_at(first), *_at(last), *_at(marker), *hint))
    return rows


def _pruned(rows: list[AbortedRow], at: tuple[int, int]) -> tuple[list[AbortedRow], int]:
    """The definition: a row whose data all lies before ``at`` goes; one whose data
    starts before it starts at it."""
    kept = []
    for row in rows:
        if (row[3], row[4]) < at:
            continue
        kept.append(row if (row[1], row[2]) >= at else (row[0], *at, *row[3:]))
    return kept, len(rows) - len(kept)


@given(aborted_rows(), st.integers(0, 6), st.integers(0, 200), st.integers(1, 4))
def test_rows_come_back_as_they_went_in_and_prune_follows_the_definition(
    rows: list[AbortedRow], split: int, cut: int, chunk: int
) -> None:
    with patch.object(aborted_module, "_CHUNK", chunk):  # rows are made in chunks
        _rows_come_back_and_prune(rows, split, cut)


def _rows_come_back_and_prune(rows: list[AbortedRow], split: int, cut: int) -> None:
    aborted = AbortedSet(rows[:split])
    for row in rows[split:]:
        aborted.append(row)
    aborted._check()
    assert list(aborted) == rows
    assert len(aborted) == len(rows)
    assert set(aborted.seqs) == {row[0] for row in rows}
    for row in rows:  # found by id, from the start or from one of its data positions
        assert aborted.find(row[0]) == row
        assert aborted.find(row[0], Position(row[3], row[4])) == row
        assert aborted.find(row[0], Position(row[5] + 1, 0)) == row  # a wrong hint
    assert aborted.find(2**41) is None
    position = Position(*_at(cut))
    ranked = [r for r in rows if (r[5], r[6]) >= position]
    assert list(aborted.rows_from(aborted.rank_at(position))) == ranked
    after = [r for r in rows if (r[5], r[6]) > position]
    assert list(aborted.rows_from(aborted.rank_after(position))) == after
    for lo, hi in ((0, cut), (cut, cut + 7), (cut // 2, 200)):
        start, end = Position(*_at(lo)), Position(*_at(hi))
        around = set(aborted.seqs_around(start, end))
        overlapping = {r[0] for r in rows if (r[1], r[2]) <= end and (r[3], r[4]) >= start}
        assert overlapping <= around  # every one with data there, and none before it:
        assert around <= {r[0] for r in rows if (r[5], r[6]) >= start}
    expected, gone = _pruned(rows, tuple(position))
    assert aborted.prune_before(position) == gone
    aborted._check()
    assert list(aborted) == expected
    assert set(aborted.seqs) == {row[0] for row in expected}


@given(aborted_rows())
def test_malformed_rows_are_refused_and_change_nothing(rows: list[AbortedRow]) -> None:
    aborted = AbortedSet(rows)
    marker = (rows[-1][5], rows[-1][6]) if rows else (0, 0)
    ahead = (2**41, 0, 0, 0, 0, marker[0] + 1, 0, None, None)
    bad: list[tuple[list[AbortedRow], str]] = [
        ([ahead, (2**42, 0, 0, 0, 0, marker[0] + 1, 0, None, None)], "marker order"),
        ([ahead, (2**41, 0, 0, 0, 0, marker[0] + 2, 0, None, None)], "twice"),
        ([ahead[:8]], "holds 9 integers"),  # type: ignore[list-item]
        ([(2**41, 0, 0, 0, 0, marker[0] + 1, 0, "x", None)], "malformed"),  # type: ignore[list-item]
        ([(2**64, 0, 0, 0, 0, marker[0] + 1, 0, None, None)], "malformed"),
        ([(-1, 0, 0, 0, 0, marker[0] + 1, 0, None, None)], "malformed"),
    ]
    if rows:
        bad.append(([(*rows[-1][:5], marker[0] + 1, 0, None, None)], "twice"))  # type: ignore[list-item]
        bad.append(([(2**41, 0, 0, 0, 0, *marker, None, None)], "marker order"))
    for more, message in bad:
        with pytest.raises(ValueError, match=message):
            aborted.extend(more)
        aborted._check()
        assert list(aborted) == rows


def test_reading_a_few_rows_copies_a_few_rows() -> None:
    """A first snapshot seals a million rows in 20 ms slices, each taking a thousand rows
    from ``rows_from``: were each call to copy all the rows after its start, every slice
    would be a 125-160 ms event-loop step (measured)."""
    rows = [(seq, 0, 2 * seq, 0, 2 * seq, 0, 2 * seq + 1, 0, 2 * seq) for seq in range(100_000)]
    aborted = AbortedSet(rows)
    tracemalloc.start()
    try:
        taken = list(islice(aborted.rows_from(10), 1_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert taken == rows[10:1_010]
    assert peak < 1_000_000  # a copy of the rest: ~14 MB


def test_ids_that_cannot_be_a_sequence_number_are_not_aborted() -> None:
    """A parsed id can be any int (``txn-99999999999999999999``): not aborted, no error."""
    aborted = AbortedSet([(5, 0, 0, 0, 0, 0, 1, None, None)])
    assert 5 in aborted
    for other in (6, -1, 2**64, 2**80, "5", 5.0, None):
        assert other not in aborted
        assert aborted.find(other) is None  # type: ignore[arg-type]


def test_the_sequence_numbers_of_many_aborts_take_bits_not_objects() -> None:
    """A busy topic without retention keeps every aborted transaction: a quarter of
    800,000 transactions aborted cost ~8 MiB as a set of ints (object and hash slot
    each); as a bitmap, about a bit per transaction."""
    seqs = range(0, 800_000, 4)
    rows = [(seq, 0, seq, 0, seq, 0, seq + 1, None, None) for seq in seqs]
    aborted = AbortedSet(rows)
    stats = aborted.seqs.get_statistics()
    held = stats["n_bytes_array_containers"] + stats["n_bytes_run_containers"]
    held += stats["n_bytes_bitset_containers"]
    assert held <= 800_000 // 8 + 16_384  # a bit per transaction, a container's slack
    assert all(seq in aborted for seq in seqs[::997])
