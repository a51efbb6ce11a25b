"""Position assignment across ledger rollovers: a batch appended in runs lands exactly
where appending its entries one by one would put them."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from txnstream.ledger import EntryKind, LedgerInfo, ManagedLedger, WriteBatch


def _ledger(max_entries: int, max_bytes: int) -> ManagedLedger:
    info = LedgerInfo(0, 0, 0, 0, False, False)
    return ManagedLedger(cast(Any, None), 1, [info], max_entries=max_entries, max_bytes=max_bytes)


@given(
    sizes=st.lists(st.lists(st.integers(1, 40), min_size=1, max_size=30), min_size=1, max_size=8),
    max_entries=st.integers(1, 12),
    max_bytes=st.integers(1, 120),
)
def test_batches_roll_over_exactly_as_single_entries(
    sizes: list[list[int]], max_entries: int, max_bytes: int
) -> None:
    batched, single = _ledger(max_entries, max_bytes), _ledger(max_entries, max_bytes)
    got, want = [], []
    for batch_sizes in sizes:
        payloads = [b"x" * n for n in batch_sizes]
        got += batched.prepare_data(WriteBatch(), payloads, 7)
        for payload in payloads:
            want += single.prepare_append(WriteBatch(), [(EntryKind.DATA, None, payload)])
    assert got == want
    assert [(i.ledger_id, i.entries, i.bytes) for i in batched.ledgers] == [
        (i.ledger_id, i.entries, i.bytes) for i in single.ledgers
    ]
