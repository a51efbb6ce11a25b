from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnstream.ledger import InvalidArgumentError, Position, TxnId

ids = st.integers(min_value=0, max_value=10**12)


@given(ids, ids)
def test_position_round_trips_through_text(ledger_id: int, entry_id: int) -> None:
    position = Position(ledger_id, entry_id)
    assert Position.parse(str(position)) == position


@given(ids, ids, ids, ids)
def test_position_order_is_ledger_then_entry(a: int, b: int, c: int, d: int) -> None:
    assert (Position(a, b) < Position(c, d)) == ((a, b) < (c, d))


@pytest.mark.parametrize("text", ["", "1", "1:", ":1", "-1:2", "1:2:3", "a:b", "01:2", " 1:2", 5])
def test_bad_position_text_is_a_clear_error(text: object) -> None:
    with pytest.raises(InvalidArgumentError):
        Position.parse(text)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="position"):
        Position.parse(text)  # type: ignore[arg-type]


def test_txn_id_text_form() -> None:
    assert str(TxnId(17)) == "txn-17"
    assert TxnId.parse("txn-17") == TxnId(17)
    with pytest.raises(InvalidArgumentError):
        TxnId.parse("17")
