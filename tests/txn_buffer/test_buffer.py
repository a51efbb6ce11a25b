"""The sans-I/O transaction buffer against a brute-force definition of the stable position."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnstream.ledger import EntryKind, Position, TxnId
from txnstream.txn_buffer import TxnBuffer

# An operation: (0, txn) data of txn, (1, txn) commit, (2, txn) abort, (3, _) plain data.
ops = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5)), max_size=60)


def _run(operations: list[tuple[int, int]], ledger_size: int = 4):
    buffer = TxnBuffer()
    log: list[tuple[Position, EntryKind, TxnId | None]] = []
    ended: set[int] = set()
    count = 0
    history = []
    for op, seq in operations:
        if op in (0, 1, 2) and seq in ended:
            continue
        position = Position(count // ledger_size, count % ledger_size)
        count += 1
        if op == 0:
            entry = (position, EntryKind.DATA, TxnId(seq))
        elif op == 3:
            entry = (position, EntryKind.DATA, None)
        else:
            entry = (position, EntryKind.COMMIT if op == 1 else EntryKind.ABORT, TxnId(seq))
            ended.add(seq)
        buffer.on_entry(*entry)
        buffer._check()
        log.append(entry)
        history.append(buffer.max_read_position)
    return buffer, log, history


def _stable_by_definition(log: list[tuple[Position, EntryKind, TxnId | None]]) -> Position | None:
    ended = {txn for _, kind, txn in log if kind is not EntryKind.DATA}
    previous = None
    for position, kind, txn in log:
        if kind is EntryKind.DATA and txn is not None and txn not in ended:
            return previous
        previous = position
    return previous


@given(ops)
def test_stable_position_is_before_the_oldest_open_transaction(operations) -> None:
    buffer, log, _ = _run(operations)
    assert buffer.max_read_position == _stable_by_definition(log)
    assert buffer.last_confirmed == (log[-1][0] if log else None)


@given(ops)
def test_stable_position_never_moves_backwards(operations) -> None:
    _, _, history = _run(operations)
    seen = [p for p in history if p is not None]
    assert seen == sorted(seen)
    first_set = next((i for i, p in enumerate(history) if p is not None), len(history))
    assert all(p is not None for p in history[first_set:])


@given(ops)
def test_aborted_set_and_range_query(operations) -> None:
    buffer, log, _ = _run(operations)
    aborted = {txn for _, kind, txn in log if kind is EntryKind.ABORT}
    with_data = {txn for _, kind, txn in log if kind is EntryKind.DATA and txn is not None}
    assert set(buffer.aborted_txns) == aborted & with_data
    if not log:
        return
    start, end = log[0][0], log[-1][0]
    for i in range(len(log)):
        for j in range(i, len(log)):
            lo, hi = log[i][0], log[j][0]
            expected = {
                txn
                for position, kind, txn in log
                if kind is EntryKind.DATA and txn in aborted and lo <= position <= hi
            }
            found = {a.txn_id for a in buffer.aborted_in_range(lo, hi)}
            # the range query may over-approximate (spans), never miss
            assert expected <= found
    assert start <= end


def test_entries_out_of_order_are_refused() -> None:
    buffer = TxnBuffer()
    buffer.on_entry(Position(0, 1), EntryKind.DATA, None)
    with pytest.raises(ValueError, match="arrived after"):
        buffer.on_entry(Position(0, 1), EntryKind.DATA, None)


def test_retained_aborted_set_gives_the_garbage_collector_nothing_to_walk() -> None:
    """A topic keeps up to millions of aborted transactions for its whole retention: none
    may be an object the collector tracks, or every full collection walks them all
    (~200 ms of event loop per million)."""
    buffer = TxnBuffer()
    entry = 0
    gc.collect()
    tracked = len(gc.get_objects())
    for seq in range(20_000):
        txn = TxnId(seq)
        buffer.on_entry(Position(0, entry), EntryKind.DATA, txn)
        buffer.on_entry(Position(0, entry + 1), EntryKind.ABORT, txn)
        entry += 2
    gc.collect()
    assert len(gc.get_objects()) - tracked < 100
    # readers still get the typed view, by id and in marker order
    aborted = buffer.aborted_txns[TxnId(7)]
    assert (aborted.txn_id, aborted.first, aborted.marker) == (
        TxnId(7),
        Position(0, 14),
        Position(0, 15),
    )
    assert buffer.find_aborted(TxnId(7), Position(0, 14)) == aborted
    assert [a.txn_id.seq for a in buffer.aborted_txns.values()] == list(range(20_000))


def test_an_abort_after_a_full_collection_leaves_young_collections_small() -> None:
    """A big aborted set must stay where the collector last put it when one more
    transaction aborts: were its table moved to the youngest generation (as CPython does
    with an exact dict it had untracked), every young collection would walk all of it
    (35 ms per million entries) until it aged out again."""
    buffer = TxnBuffer()
    entry = 0

    def abort(seq: int) -> None:
        nonlocal entry
        txn = TxnId(seq)
        buffer.on_entry(Position(0, entry), EntryKind.DATA, txn)
        buffer.on_entry(Position(0, entry + 1), EntryKind.ABORT, txn)
        entry += 2

    for seq in range(20_000):
        abort(seq)
    gc.collect()
    abort(20_000)
    young = [o for o in gc.get_objects(generation=0) if isinstance(o, (dict, list, set))]
    assert max(map(len, young), default=0) < 10_000
    assert len(buffer.aborted_txns) == 20_001
