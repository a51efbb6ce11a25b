"""Consumer policies (issue 31 items 14-16): a redelivery limit with a dead-letter topic,
negative acks with a delay, and message TTL per topic; each honoured across restarts."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from txnstream.api import Engine, EngineConfig, InvalidArgumentError


async def _wait(condition: Any, what: str, timeout: float = 10.0) -> Any:
    """Await ``condition()`` (a coroutine function) until truthy, bounded."""
    deadline = time.monotonic() + timeout
    while not (result := await condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)
    return result


async def _dead_letters(engine: Engine, topic: str, count: int) -> list[Any]:
    """The first ``count`` messages of dead-letter topic ``topic`` (waits for them)."""

    async def arrived() -> bool:
        if topic not in await engine.list_topics():
            return False
        stats = await engine.topic_stats(topic)
        return stats.last_confirmed is not None and stats.entries >= count

    await _wait(arrived, f"{count} message(s) on {topic}")
    reader = await engine.subscribe(topic, "check")
    return await reader.receive(max=count + 10, timeout=1.0)


@pytest.mark.parametrize("type_", ["shared", "exclusive", "key_shared"])
async def test_a_message_past_its_redelivery_limit_moves_to_the_dead_letter_topic(
    engine: Engine, type_: str
) -> None:
    await engine.create_topic("orders")
    await engine.send("orders", {"id": 1}, key="k", properties={"src": "web"})
    await engine.send("orders", b"\x00raw")
    sub = await engine.subscribe("orders", "billing", type=type_, max_redeliveries=2)
    seen = []
    for _ in range(3):  # delivered max_redeliveries + 1 = 3 times, nacked each time
        [message] = await sub.receive(max=1, timeout=2.0)
        assert message.value == {"id": 1}
        seen.append(message.redelivery_count)
        await sub.nack([message.position])
    assert seen == [0, 1, 2]
    # never delivered on the subscription again; the next message is
    [second] = await sub.receive(max=10, timeout=2.0)
    assert second.value == b"\x00raw"
    await sub.ack([second.position])
    [dead] = await _dead_letters(engine, "orders-billing-DLQ", 1)
    assert dead.value == {"id": 1}
    assert dead.key == "k"
    assert dead.properties == {
        "src": "web",
        "origin_topic": "orders",
        "origin_subscription": "billing",
        "origin_position": "0:0",
        "redelivery_count": "3",
    }
    assert await sub.receive(timeout=0.2) == []
    stats = (await engine.stats("orders"))["subscriptions"]["billing"]
    assert stats["backlog"] == 0
    assert stats["max_redeliveries"] == 2
    assert stats["dead_letters"] == 0


async def test_the_move_and_its_ack_survive_a_restart_together(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        await engine.create_topic("dead")
        await engine.send("t", "poison")
        sub = await engine.subscribe(
            "t", "s", type="shared", max_redeliveries=0, dead_letter_topic="dead"
        )
        [message] = await sub.receive(timeout=2.0)
        await sub.nack([message.position])
        await _dead_letters(engine, "dead", 1)
    async with Engine.open(data_dir) as engine:
        reader = await engine.subscribe("dead", "again")
        assert [m.value for m in await reader.receive(max=10, timeout=0.5)] == ["poison"]
        sub = await engine.subscribe("t", "s", type="shared")
        assert await sub.receive(timeout=0.3) == []
        assert (await engine.stats("t"))["subscriptions"]["s"]["dead_letter_topic"] == "dead"


async def test_redelivery_counts_survive_a_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        await engine.send("t", "x")
        sub = await engine.subscribe("t", "s", type="shared", max_redeliveries=2)
        for _ in range(2):
            [message] = await sub.receive(timeout=2.0)
            await sub.nack([message.position])
    async with Engine.open(data_dir) as engine:
        sub = await engine.subscribe("t", "s", type="shared")
        [message] = await sub.receive(timeout=2.0)
        assert message.redelivery_count == 2  # the third delivery: the last one
        await sub.nack([message.position])
        assert [m.value for m in await _dead_letters(engine, "t-s-DLQ", 1)] == ["x"]
        assert await sub.receive(timeout=0.2) == []


async def test_expired_deliveries_count_toward_the_limit(data_dir: Path) -> None:
    config = EngineConfig(consumer_expiry=0.05)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        await engine.send("t", "slow")
        await engine.create_subscription("t", "s", type="shared", max_redeliveries=1)
        for consumer in ("a", "b"):  # each takes it and goes silent: detached, released
            [message] = await engine.receive("t", "s", consumer=consumer, timeout=5.0)
            assert message.value == "slow"
        dead = await _dead_letters(engine, "t-s-DLQ", 1)
        assert dead[0].properties["redelivery_count"] == "2"


async def test_policy_validation(engine: Engine) -> None:
    await engine.create_topic("t")
    for bad in (
        {"max_redeliveries": -1},
        {"max_redeliveries": True},
        {"dead_letter_topic": "x"},  # without a limit
        {"max_redeliveries": 1, "dead_letter_topic": "t"},  # itself
        {"max_redeliveries": 1, "dead_letter_topic": "__system"},
        {"nack_delay_ms": -5},
        {"nack_delay_ms": 1.5},
    ):
        with pytest.raises(InvalidArgumentError):
            await engine.create_subscription("t", "s", **bad)
    assert "s" not in (await engine.stats("t"))["subscriptions"]


async def test_a_policy_given_again_replaces_the_old_one(engine: Engine) -> None:
    await engine.create_topic("t")
    assert await engine.create_subscription("t", "s", type="shared", max_redeliveries=3)
    assert not await engine.create_subscription("t", "s", type="shared", nack_delay_ms=100)
    policy = await engine.subscription_policy("t", "s")
    assert policy == {"max_redeliveries": None, "dead_letter_topic": None, "nack_delay_ms": 100}


# -- negative acks with a delay ---------------------------------------------------------


async def test_a_nacked_message_waits_for_the_subscriptions_nack_delay(engine: Engine) -> None:
    await engine.create_topic("t")
    await engine.send("t", "later")
    sub = await engine.subscribe("t", "s", type="shared", nack_delay_ms=400)
    [message] = await sub.receive(timeout=2.0)
    nacked = time.monotonic()
    await sub.nack([message.position])
    assert await sub.receive(timeout=0.2) == []  # not yet
    [again] = await sub.receive(timeout=5.0)
    assert time.monotonic() - nacked >= 0.39
    assert again.value == "later"
    assert again.redelivery_count == 1
    assert (await engine.stats("t"))["subscriptions"]["s"]["nack_delay_ms"] == 400


async def test_a_nack_may_carry_its_own_delay(engine: Engine) -> None:
    await engine.create_topic("t")
    await engine.send_many("t", ["a", "b"])
    sub = await engine.subscribe("t", "s", type="key_shared")
    first, second = await sub.receive(max=2, timeout=2.0)
    await sub.nack([first.position], delay_ms=300)
    await sub.nack([second.position], delay_ms=0)
    assert [m.value for m in await sub.receive(max=10, timeout=0.1)] == ["b"]
    assert (await engine.stats("t"))["subscriptions"]["s"]["delayed"] == 1
    assert [m.value for m in await sub.receive(max=10, timeout=5.0)] == ["a"]
    with pytest.raises(InvalidArgumentError):
        await sub.nack([first.position], delay_ms=-1)


async def test_ordered_subscriptions_redeliver_at_once_in_order(engine: Engine) -> None:
    await engine.create_topic("t")
    await engine.send_many("t", ["a", "b"])
    sub = await engine.subscribe("t", "s", type="exclusive", nack_delay_ms=60_000)
    first, second = await sub.receive(max=2, timeout=2.0)
    await sub.nack([first.position, second.position])
    assert [m.value for m in await sub.receive(max=10, timeout=2.0)] == ["a", "b"]


async def test_a_nack_delay_is_honoured_across_a_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        await engine.send("t", "x")
        sub = await engine.subscribe("t", "s", type="shared", nack_delay_ms=1500)
        [message] = await sub.receive(timeout=2.0)
        await sub.nack([message.position])
        nacked = time.monotonic()
    async with Engine.open(data_dir) as engine:
        sub = await engine.subscribe("t", "s", type="shared")
        assert await sub.receive(timeout=0.2) == []  # the delay still runs
        [again] = await sub.receive(timeout=5.0)
        assert time.monotonic() - nacked >= 1.4
        assert again.redelivery_count == 1


# -- message TTL -------------------------------------------------------------------------


async def test_messages_older_than_the_ttl_are_acknowledged_for_every_subscription(
    data_dir: Path,
) -> None:
    config = EngineConfig(ttl_check_interval=0.05)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        await engine.create_subscription("t", "a")
        await engine.create_subscription("t", "b", type="shared")
        await engine.send_many("t", ["old", "older"])
        await engine.set_ttl("t", 200)
        assert (await engine.stats("t"))["ttl_ms"] == 200

        async def expired() -> bool:
            subs = (await engine.stats("t"))["subscriptions"]
            return subs["a"]["backlog"] == 0 and subs["b"]["backlog"] == 0

        await _wait(expired, "the TTL pass")
        await engine.send("t", "fresh")  # younger than the TTL: delivered
        sub = await engine.subscribe("t", "a")
        assert [m.value for m in await sub.receive(max=10, timeout=1.0)] == ["fresh"]
    async with Engine.open(data_dir) as engine:  # the TTL is stored with the topic
        assert engine.ttl("t") == 200
        await engine.set_ttl("t", None)
        assert (await engine.stats("t"))["ttl_ms"] is None


async def test_the_ttl_leaves_an_open_transactions_data_alone(engine: Engine) -> None:
    await engine.create_topic("t")
    await engine.create_subscription("t", "s")
    txn = await engine.begin()
    await txn.send("t", "pending")
    await engine.send("t", "plain")
    await engine.set_ttl("t", 1)
    await asyncio.sleep(0.01)
    assert await engine.apply_ttl("t") == 0  # the stable position holds it back
    await txn.commit()
    await asyncio.sleep(0.01)
    assert await engine.apply_ttl("t") == 1
    assert (await engine.stats("t"))["subscriptions"]["s"]["backlog"] == 0


async def test_ttl_validation(engine: Engine) -> None:
    await engine.create_topic("t")
    for bad in (0, -1, 1.5, True, "1h"):
        with pytest.raises(InvalidArgumentError):
            await engine.set_ttl("t", bad)  # type: ignore[arg-type]


# -- delayed delivery ----------------------------------------------------------------------


async def test_delayed_delivery_on_shared_subscriptions(engine: Engine) -> None:
    await engine.create_topic("t")
    shared = await engine.subscribe("t", "shared", type="shared")
    ordered = await engine.subscribe("t", "ordered", type="exclusive")
    sent = time.monotonic()
    await engine.send("t", "after", deliver_after_ms=400)
    await engine.send("t", "at", deliver_at=datetime.now(UTC) + timedelta(milliseconds=600))
    await engine.send("t", "now")
    assert [m.value for m in await shared.receive(max=10, timeout=0.2)] == ["now"]
    # exclusive (and failover) subscriptions deliver in order and ignore the delay
    assert [m.value for m in await ordered.receive(max=10, timeout=1.0)] == ["after", "at", "now"]
    [after] = await shared.receive(max=10, timeout=5.0)
    assert after.value == "after"
    assert time.monotonic() - sent >= 0.39
    [at] = await shared.receive(max=10, timeout=5.0)
    assert at.value == "at"
    assert time.monotonic() - sent >= 0.59
    for bad in ({"deliver_after_ms": -1}, {"deliver_at": datetime(2026, 1, 1)}):
        with pytest.raises(InvalidArgumentError):
            await engine.send("t", "x", **bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await engine.send("t", "x", deliver_after_ms=1, deliver_at=datetime.now(UTC))


async def test_delayed_delivery_is_honoured_across_a_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        await engine.create_subscription("t", "s", type="key_shared")
        sent = time.monotonic()
        await engine.send("t", "later", key="k", deliver_after_ms=1500)
        await engine.send("t", "now", key="k")
    async with Engine.open(data_dir) as engine:
        sub = await engine.subscribe("t", "s", type="key_shared")
        assert [m.value for m in await sub.receive(max=10, timeout=0.3)] == ["now"]
        [later] = await sub.receive(max=10, timeout=5.0)
        assert later.value == "later"
        assert time.monotonic() - sent >= 1.4


async def test_stored_redelivery_state_goes_with_the_ack_seek_and_deletion(engine: Engine) -> None:
    await engine.create_topic("t")
    await engine.send_many("t", ["a", "b"])
    sub = await engine.subscribe("t", "s", type="shared", max_redeliveries=5)
    first, second = await sub.receive(max=2, timeout=2.0)
    await sub.nack([first.position, second.position])
    assert len(await engine._rt.store.redelivery_rows()) == 2
    await sub.ack([first.position])
    assert [row[2:5] for row in await engine._rt.store.redelivery_rows()] == [(0, 1, 1)]
    await sub.seek("earliest")
    assert await engine._rt.store.redelivery_rows() == []
    [again, _] = await sub.receive(max=2, timeout=2.0)
    await sub.nack([again.position])
    await engine.delete_subscription("t", "s")
    assert await engine._rt.store.redelivery_rows() == []
