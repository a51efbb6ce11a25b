"""``engine.send_batch``: one atomic multi-topic append without a transaction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import NewStore, drain, store_per_example

from txnstream.api import (
    Engine,
    InvalidArgumentError,
    OutgoingMessage,
    Position,
    TooLargeError,
    TopicNotFoundError,
)


async def test_positions_come_back_in_request_order_and_each_topic_keeps_its_order(
    engine: Engine,
) -> None:
    for name in ("orders", "audit"):
        await engine.create_topic(name)
    items = [
        ("orders", {"id": 1}),
        ("audit", b"x"),
        ("orders", OutgoingMessage({"id": 2}, key="k", properties={"p": "v"})),
        ("audit", "y"),
    ]
    positions = await engine.send_batch(items)
    assert len(positions) == 4
    assert positions[0] < positions[2]
    assert positions[1] < positions[3]
    orders = await engine.subscribe("orders", "s")
    got = await drain(orders)
    assert [(m.position, m.value, m.key) for m in got] == [
        (positions[0], {"id": 1}, None),
        (positions[2], {"id": 2}, "k"),
    ]
    assert got[1].properties == {"p": "v"}
    audit = await engine.subscribe("audit", "s")
    assert [m.value for m in await drain(audit)] == [b"x", "y"]


@pytest.mark.parametrize(
    ("items", "error"),
    [
        ([("orders", 1), ("missing", 2)], TopicNotFoundError),
        ([("orders", 1), ("audit", OutgoingMessage(1, key="\udc00"))], InvalidArgumentError),
        ([("orders", 1), ("audit", OutgoingMessage(1, properties={"\ud800": "x"}))], ValueError),
        ([("orders", 1), ("audit", b"x" * (5 * 1024 * 1024 + 1))], TooLargeError),
        ([("orders", 1), ("audit", object())], InvalidArgumentError),
        ([("orders", 1), ("audit",)], InvalidArgumentError),
        ([], InvalidArgumentError),
    ],
)
async def test_nothing_is_stored_unless_everything_is(
    engine: Engine, items: list[tuple[object, ...]], error: type[Exception]
) -> None:
    for name in ("orders", "audit"):
        await engine.create_topic(name)
    with pytest.raises(error):
        await engine.send_batch(items)  # type: ignore[arg-type]
    for name in ("orders", "audit"):
        assert (await engine.stats(name))["last_confirmed"] is None
    # and the log continues without a gap
    assert await engine.send_batch([("orders", 1)]) == [Position(0, 0)]


@pytest.mark.postgresql_in_full_run  # (100 examples, each a store of its own)
@store_per_example()
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=30))
async def test_each_topic_gets_its_items_contiguously_in_order(
    new_store: NewStore, names: list[str]
) -> None:
    with new_store() as tmp:
        async with Engine.open(tmp) as engine:
            for name in ("a", "b", "c"):
                await engine.create_topic(name)
            positions = await engine.send_batch([(n, i) for i, n in enumerate(names)])
            for name in ("a", "b", "c"):
                mine = [p for p, n in zip(positions, names, strict=True) if n == name]
                assert mine == [Position(0, e) for e in range(len(mine))]
