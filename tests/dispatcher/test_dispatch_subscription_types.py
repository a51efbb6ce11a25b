"""The four subscription types as consumers see them."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from support import drain, make_topics, positions, values

from txnstream.api import ClosedError, ConflictError, ConsumerBusyError, Engine, Message


async def test_exclusive_refuses_a_second_consumer(engine: Engine) -> None:
    await make_topics(engine, "t")
    sent = await engine.send_many("t", ["a", "b", "c"])
    first = await engine.subscribe("t", "s")  # exclusive is the default

    with pytest.raises(ConsumerBusyError) as caught:
        await engine.subscribe("t", "s")
    assert isinstance(caught.value, ConflictError)
    with pytest.raises(ConsumerBusyError):
        await engine.receive("t", "s", consumer="intruder", timeout=0)
    assert (await engine.stats("t"))["subscriptions"]["s"]["consumers"] == [first.consumer]
    assert (await engine.stats("t"))["subscriptions"]["s"]["type"] == "exclusive"

    got = await first.receive(max=2, timeout=0)
    assert positions(got) == sent[:2]
    await first.close()
    with pytest.raises(ClosedError):
        await first.receive(timeout=0)

    # Once the holder detaches another consumer may take over, and gets the
    # unacknowledged messages again, in order.
    second = await engine.subscribe("t", "s")
    again = await drain(second)
    assert positions(again) == sent
    assert [m.redelivery_count for m in again] == [1, 1, 0]


async def test_failover_delivers_only_to_the_active_consumer(engine: Engine) -> None:
    await make_topics(engine, "t")
    sent = await engine.send_many("t", [f"m{i}" for i in range(5)])
    active = await engine.subscribe("t", "s", type="failover")
    standby = await engine.subscribe("t", "s", type="failover")
    assert len((await engine.stats("t"))["subscriptions"]["s"]["consumers"]) == 2

    got = await active.receive(max=3, timeout=0)
    assert positions(got) == sent[:3]
    assert await standby.receive(timeout=0.1) == []
    await active.ack(got[0].position)


async def test_failover_fails_over_on_close_and_redelivers_unacked(engine: Engine) -> None:
    await make_topics(engine, "t")
    sent = await engine.send_many("t", [f"m{i}" for i in range(5)])
    active = await engine.subscribe("t", "s", type="failover")
    standby = await engine.subscribe("t", "s", type="failover")
    got = await active.receive(max=3, timeout=0)
    await active.ack(got[0].position)

    # The standby is waiting when the active consumer goes away.
    waiter = asyncio.create_task(standby.receive(max=10, timeout=10.0))
    done, _ = await asyncio.wait({waiter}, timeout=0.1)
    assert not done
    await active.close()
    first_batch = await asyncio.wait_for(waiter, timeout=5.0)

    taken_over = first_batch + await drain(standby)
    assert positions(taken_over) == sent[1:]
    assert [m.redelivery_count for m in taken_over] == [1, 1, 0, 0]
    assert (await engine.stats("t"))["subscriptions"]["s"]["consumers"] == [standby.consumer]


async def test_shared_splits_messages_between_consumers(engine: Engine) -> None:
    await make_topics(engine, "t")
    sent = await engine.send_many("t", list(range(10)))
    c1 = await engine.subscribe("t", "s", type="shared")
    c2 = await engine.subscribe("t", "s", type="shared")

    got1 = await c1.receive(max=4, timeout=0)
    got2 = await c2.receive(max=4, timeout=0)
    rest = await c1.receive(max=10, timeout=0)

    assert len(got1) == 4
    assert len(got2) == 4
    assert len(rest) == 2
    everything = positions(got1) + positions(got2) + positions(rest)
    assert sorted(everything) == sent
    assert len(set(everything)) == 10
    assert set(positions(got1)).isdisjoint(positions(got2))
    assert await c2.receive(timeout=0.05) == []


async def test_shared_nack_goes_to_whichever_consumer_asks(engine: Engine) -> None:
    await make_topics(engine, "t")
    (pos,) = await engine.send_many("t", ["only"])
    c1 = await engine.subscribe("t", "s", type="shared")
    c2 = await engine.subscribe("t", "s", type="shared")
    assert positions(await c1.receive(timeout=0)) == [pos]
    assert await c2.receive(timeout=0.05) == []  # in flight at c1
    await c1.nack([pos])
    (again,) = await c2.receive(timeout=1.0)
    assert again.position == pos
    assert again.redelivery_count == 1


async def test_key_shared_keeps_each_key_on_one_consumer(engine: Engine) -> None:
    await make_topics(engine, "t")
    keys = [f"k{i}" for i in range(20)]
    for round_ in range(3):
        for key in keys:
            await engine.send("t", f"{key}/{round_}", key=key)
    c1 = await engine.subscribe("t", "s", type="key_shared")
    c2 = await engine.subscribe("t", "s", type="key_shared")

    received: dict[str, list[Message]] = {c1.consumer: [], c2.consumer: []}
    for _ in range(20):
        for consumer in (c1, c2):
            got = await consumer.receive(max=7, timeout=0.05)
            received[consumer.consumer].extend(got)
            for msg in got:
                await consumer.ack(msg.position)
        if sum(map(len, received.values())) == 60:
            break

    assert sum(map(len, received.values())) == 60
    owner: dict[str, str] = {}
    per_key: dict[str, list[Message]] = defaultdict(list)
    for consumer, msgs in received.items():
        assert msgs, "key_shared left a consumer idle with 20 keys"
        for msg in msgs:
            assert msg.key is not None
            assert owner.setdefault(msg.key, consumer) == consumer, f"{msg.key} split"
            per_key[msg.key].append(msg)
    for key, msgs in per_key.items():
        assert values(msgs) == [f"{key}/{r}" for r in range(3)]  # per-key order
        assert positions(msgs) == sorted(positions(msgs))
    assert (await engine.stats("t"))["subscriptions"]["s"]["backlog"] == 0


async def test_exclusive_and_failover_deliver_in_position_order(engine: Engine) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    expected = []
    for i in range(30):
        if i % 3 == 0:
            expected.append(await txn.send("t", i))
        else:
            expected.append(await engine.send("t", i))
        if i == 20:
            await txn.commit()
            txn = await engine.begin()
    await txn.commit()
    for sub_type in ("exclusive", "failover"):
        sub = await engine.subscribe("t", f"s-{sub_type}", type=sub_type)
        got = []
        while len(got) < 30:
            batch = await sub.receive(max=7, timeout=1.0)
            assert batch
            got.extend(batch)
        assert positions(got) == expected
        assert values(got) == list(range(30))


async def test_key_shared_keeps_per_key_order_when_a_consumer_joins(engine: Engine) -> None:
    await make_topics(engine, "t")
    keys = [f"k{i}" for i in range(20)]
    for key in keys:
        await engine.send("t", f"{key}/0", key=key)
    first = await engine.subscribe("t", "s", type="key_shared")
    assert len(await first.receive(max=100, timeout=0)) == 20  # all in flight, unacked

    joined = await engine.subscribe("t", "s", type="key_shared")
    for key in keys:
        await engine.send("t", f"{key}/1", key=key)
    seen: dict[str, list[str]] = defaultdict(list)
    for msg in await joined.receive(max=100, timeout=0.1):
        seen[msg.key or ""].append(msg.value)
    await first.close()  # its unacknowledged /0 messages go to the joined consumer
    for msg in await drain(joined):
        seen[msg.key or ""].append(msg.value)

    assert sorted(seen) == sorted(keys)
    out_of_order = {k: v for k, v in seen.items() if v != [f"{k}/0", f"{k}/1"]}
    assert not out_of_order, f"per-key order broken: {dict(list(out_of_order.items())[:3])}"


async def test_key_shared_keeps_per_key_order_behind_other_consumers_backlog(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    c1 = await engine.subscribe("t", "s", type="key_shared")
    c2 = await engine.subscribe("t", "s", type="key_shared")
    # Learn which consumer owns which key (the consumer set stays the same below).
    keys = [f"k{i}" for i in range(20)]
    for key in keys:
        await engine.send("t", "probe", key=key)
    owner: dict[str, str] = {}
    for consumer in (c1, c2):
        for msg in await consumer.receive(max=100, timeout=0.1):
            owner[msg.key or ""] = consumer.consumer
            await consumer.ack(msg.position)
    assert sorted(owner) == sorted(keys)
    mine = next(k for k in keys if owner[k] == c1.consumer)
    theirs = next(k for k in keys if owner[k] == c2.consumer)

    # c2 is slow: a long run of its key, then a few of c1's key.
    for i in range(100):
        await engine.send("t", f"{theirs}/{i}", key=theirs)
    for i in range(5):
        await engine.send("t", f"{mine}/{i}", key=mine)
    got = [m.value for m in await c1.receive(max=1, timeout=0)]
    await engine.send("t", f"{mine}/5", key=mine)
    for _ in range(10):
        batch = await c1.receive(max=10, timeout=0.1)
        got.extend(m.value for m in batch)
        if len(got) == 6:
            break

    assert got == [f"{mine}/{i}" for i in range(6)]
