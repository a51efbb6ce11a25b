"""Deleting a topic removes everything of it; a topic recreated with its name starts clean."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import drain, make_topics, positions, values

from txnstream.api import Engine, SubscriptionNotFoundError, TopicNotFoundError

CLEAN = {
    "last_confirmed": None,
    "stable_position": None,
    "open_txns": 0,
    "aborted_txns": 0,
    "entries": 0,
    "subscriptions": {},
}


def assert_clean(stats: dict[str, object]) -> None:
    assert {k: stats[k] for k in CLEAN} == CLEAN


async def test_delete_topic_removes_data_and_subscriptions(engine: Engine) -> None:
    await make_topics(engine, "t", "other")
    await engine.send_many("t", ["a", "b"])
    sub = await engine.subscribe("t", "s", type="shared")
    await sub.receive(timeout=0)
    await engine.send("other", "kept")

    await engine.delete_topic("t")

    assert await engine.list_topics() == ["other"]
    with pytest.raises(TopicNotFoundError):
        await engine.stats("t")
    with pytest.raises(TopicNotFoundError):
        await engine.send("t", "x")
    with pytest.raises(TopicNotFoundError):
        await engine.receive("t", "s", timeout=0)
    assert values(await drain(await engine.subscribe("other", "s"))) == ["kept"]

    assert await engine.create_topic("t") is True
    assert_clean(await engine.stats("t"))
    with pytest.raises(SubscriptionNotFoundError):
        await engine.receive("t", "s", timeout=0)
    fresh = await engine.send("t", "new")
    got = await drain(await engine.subscribe("t", "s"))
    assert positions(got) == [fresh]
    assert values(got) == ["new"]


async def test_delete_topic_removes_transaction_buffer_state(engine: Engine) -> None:
    await make_topics(engine, "t")
    aborted = await engine.begin()
    await aborted.send("t", "aborted")
    await aborted.abort()
    still_open = await engine.begin()
    await still_open.send("t", "open")
    await engine.send("t", "held back")

    await engine.delete_topic("t")
    await engine.create_topic("t")

    assert_clean(await engine.stats("t"))
    # The old open transaction does not hold back the new topic.
    plain = await engine.send("t", "plain")
    sub = await engine.subscribe("t", "s")
    assert positions(await sub.receive(timeout=0)) == [plain]
    stats = await engine.stats("t")
    assert stats["stable_position"] == stats["last_confirmed"] == str(plain)


async def test_ending_an_old_transaction_leaves_the_recreated_topic_untouched(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    committed_later = await engine.begin()
    await committed_later.send("t", "old data")
    aborted_later = await engine.begin()
    await aborted_later.send("t", "old data too")

    await engine.delete_topic("t")
    await engine.create_topic("t")
    plain = await engine.send("t", "plain")

    await committed_later.commit()
    await aborted_later.abort()

    stats = await engine.stats("t")
    assert stats["entries"] == 1, "a transaction of the deleted topic wrote into the new one"
    assert stats["last_confirmed"] == str(plain)
    assert stats["aborted_txns"] == 0
    assert positions(await drain(await engine.subscribe("t", "s"))) == [plain]


async def test_deleted_topic_stays_deleted_and_recreated_topic_clean_after_restart(
    data_dir: Path,
) -> None:
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t", "gone")
        txn = await engine.begin()
        await txn.send("t", "in txn")
        await txn.abort()
        await engine.send("t", "old")
        await engine.subscribe("t", "s")
        await engine.send("gone", "x")
        await engine.delete_topic("t")
        await engine.delete_topic("gone")
        await engine.create_topic("t")
        new = await engine.send("t", "new")

    async with Engine.open(data_dir) as engine:
        assert await engine.list_topics() == ["t"]
        stats = await engine.stats("t")
        assert stats["entries"] == 1
        assert stats["aborted_txns"] == 0
        assert stats["subscriptions"] == {}
        assert positions(await drain(await engine.subscribe("t", "s"))) == [new]


async def test_delete_subscription_then_recreate_starts_from_initial_position(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    await engine.send_many("t", ["a", "b"])
    sub = await engine.subscribe("t", "s")
    for msg in await sub.receive(max=10, timeout=0):
        await sub.ack(msg.position)
    await engine.delete_subscription("t", "s")
    assert (await engine.stats("t"))["subscriptions"] == {}
    with pytest.raises(SubscriptionNotFoundError):
        await engine.receive("t", "s", timeout=0)
    assert values(await drain(await engine.subscribe("t", "s"))) == ["a", "b"]


async def test_old_transactional_ack_does_not_ack_the_recreated_subscription(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    await engine.send("t", "old")
    sub = await engine.subscribe("t", "s", type="shared")
    (old,) = await sub.receive(timeout=0)
    txn = await engine.begin()
    await txn.ack("t", "s", [old.position])

    await engine.delete_topic("t")
    await engine.create_topic("t")
    new = await engine.send("t", "new")  # a fresh log: may reuse the old position
    recreated = await engine.subscribe("t", "s", type="shared")
    await txn.commit()

    assert positions(await recreated.receive(max=10, timeout=0.2)) == [new]
    assert (await engine.stats("t"))["subscriptions"]["s"]["mark_delete"] is None
