"""The coordinator's compact outcome store: one byte per ended transaction, whole chunks
dropped least recently written first, never below the number it must keep."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnstream.txn_buffer._table import _Outcomes

pytestmark = pytest.mark.timeout(60)

codes = st.integers(min_value=0, max_value=254)


@given(
    kept=st.integers(min_value=1, max_value=300),
    puts=st.lists(st.tuples(st.integers(min_value=0, max_value=5_000), codes), max_size=600),
)
def test_what_it_answers_is_what_was_put_and_it_keeps_enough(
    kept: int, puts: list[tuple[int, int]]
) -> None:
    outcomes = _Outcomes(kept)
    model: dict[int, int] = {}
    for seq, code in puts:
        outcomes.put(seq, code)
        model[seq] = code
        assert outcomes.get(seq) == code  # the newest outcome is always there
    answered = {seq: outcomes.get(seq) for seq in model}
    held = {seq: code for seq, code in answered.items() if code is not None}
    assert held == {seq: model[seq] for seq in held}  # nothing invented or stale
    assert len(held) == outcomes.count
    assert outcomes.count >= min(kept, len(model))
    assert outcomes.get(5_001) is None


@given(kept=st.integers(min_value=1, max_value=3_000), ended=st.integers(0, 20_000))
def test_ends_in_seq_order_keep_the_newest(kept: int, ended: int) -> None:
    """The common case (transactions end about in the order they began): the newest
    ``kept`` are all answered, and memory stays bounded by a chunk beyond that."""
    outcomes = _Outcomes(kept)
    for seq in range(ended):
        outcomes.put(seq, seq % 20)
    newest = range(max(0, ended - kept), ended)
    assert [outcomes.get(seq) for seq in newest] == [seq % 20 for seq in newest]
    assert outcomes.count <= kept + 4096


def test_a_late_end_refreshes_its_old_chunk() -> None:
    kept = 65_536  # chunks of 4,096 seqs
    outcomes = _Outcomes(kept)
    outcomes.put(5, 1)  # seq 5's chunk, written first
    others = iter(range(4_096, 1 << 20))
    for _ in range(kept - 1):
        outcomes.put(next(others), 2)
    outcomes.put(6, 3)  # a long transaction ends now: its chunk is the newest written
    for _ in range(4_096):
        outcomes.put(next(others), 2)  # the least recently written chunk goes instead
    assert (outcomes.get(5), outcomes.get(6)) == (1, 3)
    assert outcomes.get(4_096) is None
    assert outcomes.count >= kept


def test_keeping_none_keeps_none() -> None:
    outcomes = _Outcomes(0)
    outcomes.put(1, 1)
    assert outcomes.get(1) is None
