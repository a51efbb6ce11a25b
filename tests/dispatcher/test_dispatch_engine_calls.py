"""The engine's consumer calls used by the HTTP layer: named consumers, text positions."""

from __future__ import annotations

import pytest
from support import make_topics, positions, values

from txnstream.api import ConsumerBusyError, Engine


async def test_receive_ack_nack_seek_by_name_with_text_positions(engine: Engine) -> None:
    await make_topics(engine, "t")
    sent = await engine.send_many("t", ["a", "b", "c"])
    assert await engine.create_subscription("t", "s", type="shared") is True

    got = await engine.receive("t", "s", max=2, timeout=0)  # consumer "default"
    assert positions(got) == sent[:2]
    stats = (await engine.stats("t"))["subscriptions"]["s"]
    assert stats["consumers"] == ["default"]

    assert await engine.ack("t", "s", [str(sent[0])]) == 1
    await engine.nack("t", "s", [str(sent[1])])
    again = await engine.receive("t", "s", max=10, timeout=1.0)
    assert positions(again) == [sent[1], sent[2]]
    assert [m.redelivery_count for m in again] == [1, 0]

    assert await engine.ack("t", "s", str(sent[2]), cumulative=True) == 1
    assert (await engine.stats("t"))["subscriptions"]["s"]["backlog"] == 0
    await engine.seek("t", "s", str(sent[1]))
    assert values(await engine.receive("t", "s", max=10, timeout=1.0)) == ["b", "c"]


async def test_named_consumers_share_and_exclusive_refuses_another_name(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    sent = await engine.send_many("t", list(range(4)))
    await engine.create_subscription("t", "shared", type="shared")
    one = await engine.receive("t", "shared", consumer="one", max=2, timeout=0)
    two = await engine.receive("t", "shared", consumer="two", max=2, timeout=0)
    assert sorted(positions(one) + positions(two)) == sent
    consumers = (await engine.stats("t"))["subscriptions"]["shared"]["consumers"]
    assert sorted(consumers) == ["one", "two"]

    await engine.create_subscription("t", "excl")
    assert len(await engine.receive("t", "excl", consumer="one", max=10, timeout=0)) == 4
    with pytest.raises(ConsumerBusyError):
        await engine.receive("t", "excl", consumer="two", timeout=0)
    # The same consumer name polls again without conflict.
    assert await engine.receive("t", "excl", consumer="one", timeout=0) == []


async def test_transactional_ack_by_name(engine: Engine) -> None:
    await make_topics(engine, "t")
    sent = await engine.send_many("t", ["a", "b"])
    await engine.create_subscription("t", "s")
    await engine.receive("t", "s", max=10, timeout=0)
    txn = await engine.begin()
    assert await engine.ack("t", "s", [str(p) for p in sent], txn=txn.id) == 2
    assert (await engine.stats("t"))["subscriptions"]["s"]["mark_delete"] is None
    await engine.commit(txn.id)
    assert (await engine.stats("t"))["subscriptions"]["s"]["mark_delete"] == str(sent[1])
