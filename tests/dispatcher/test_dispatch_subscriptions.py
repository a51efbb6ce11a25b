"""Subscription settings, backlog accounting and the async iterator."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from support import drain, make_topics, positions, values

from txnstream.api import ClosedError, ConflictError, Engine, Message, SubscriptionConflictError


def _sub(stats: dict[str, object], name: str = "s") -> dict[str, object]:
    subs = stats["subscriptions"]
    assert isinstance(subs, dict)
    result = subs[name]
    assert isinstance(result, dict)
    return result


async def test_subscription_defaults(engine: Engine) -> None:
    await make_topics(engine, "t")
    await engine.send("t", "early")
    sub = await engine.subscribe("t", "s")
    stats = _sub(await engine.stats("t"))
    assert stats["type"] == "exclusive"
    assert stats["isolation"] == "read_committed"
    assert stats["consumers"] == [sub.consumer]
    assert values(await drain(sub)) == ["early"]  # earliest


@pytest.mark.parametrize(
    "other",
    [
        {"type": "failover"},
        {"type": "exclusive"},
        {"isolation": "read_uncommitted"},
        {"type": "shared", "isolation": "read_uncommitted"},
    ],
)
async def test_existing_subscription_with_other_settings_conflicts(
    engine: Engine, other: dict[str, str]
) -> None:
    await make_topics(engine, "t")
    assert await engine.create_subscription("t", "s", type="shared") is True
    before = await engine.stats("t")
    with pytest.raises(SubscriptionConflictError) as caught:
        await engine.subscribe("t", "s", **{"type": "shared", **other})
    assert isinstance(caught.value, ConflictError)
    with pytest.raises(SubscriptionConflictError):
        await engine.create_subscription("t", "s", **{"type": "shared", **other})
    assert await engine.stats("t") == before


async def test_same_settings_attach_and_initial_position_is_ignored(engine: Engine) -> None:
    await make_topics(engine, "t")
    assert await engine.create_subscription("t", "s", type="shared") is True
    assert await engine.create_subscription("t", "s", type="shared") is False
    await engine.send("t", "x")
    sub = await engine.subscribe("t", "s", type="shared", initial_position="latest")
    assert values(await drain(sub)) == ["x"]


async def test_backlog_never_counts_markers_or_aborted_data(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s", type="shared")
    await engine.send_many("t", ["p1", "p2", "p3"])
    for _ in range(2):
        aborted = await engine.begin()
        await aborted.send_many("t", ["a1", "a2"])
        await aborted.abort()
    committed = await engine.begin()
    await committed.send_many("t", ["c1", "c2"])
    await committed.commit()

    stats = await engine.stats("t")
    assert stats["entries"] == 3 + 2 * 3 + 3
    assert _sub(stats)["backlog"] == 5

    # Delivered but unacknowledged still counts; acked does not.
    got = await sub.receive(max=10, timeout=0)
    assert values(got) == ["p1", "p2", "p3", "c1", "c2"]
    assert _sub(await engine.stats("t"))["backlog"] == 5
    await sub.ack([got[0].position, got[3].position])
    assert _sub(await engine.stats("t"))["backlog"] == 3
    await sub.ack(positions(got))
    stats = await engine.stats("t")
    assert _sub(stats)["backlog"] == 0
    assert _sub(stats)["mark_delete"] == stats["last_confirmed"]


async def test_backlog_stops_at_the_stable_position(engine: Engine) -> None:
    await make_topics(engine, "t")
    await engine.subscribe("t", "committed")
    await engine.subscribe("t", "dirty", isolation="read_uncommitted")
    await engine.send("t", "before")
    txn = await engine.begin()
    await txn.send_many("t", ["t1", "t2"])
    await engine.send("t", "after")

    stats = await engine.stats("t")
    assert _sub(stats, "committed")["backlog"] == 1
    assert _sub(stats, "dirty")["backlog"] == 4

    await txn.commit()
    stats = await engine.stats("t")
    assert _sub(stats, "committed")["backlog"] == 4
    assert _sub(stats, "dirty")["backlog"] == 4


async def test_backlog_of_a_new_latest_subscription_is_zero(engine: Engine) -> None:
    await make_topics(engine, "t")
    await engine.send_many("t", ["a", "b"])
    await engine.create_subscription("t", "s", initial_position="latest")
    assert _sub(await engine.stats("t"))["backlog"] == 0
    await engine.send("t", "c")
    assert _sub(await engine.stats("t"))["backlog"] == 1


async def test_subscription_is_an_async_iterator(engine: Engine) -> None:
    await make_topics(engine, "t")
    sent = await engine.send_many("t", ["a", "b", "c"])
    reader = await engine.subscribe("t", "audit-reader")
    seen: list[Message] = []
    async with asyncio.timeout(5.0):
        async for msg in reader:
            seen.append(msg)
            await reader.ack(msg.position)
            if len(seen) == 3:
                break
    assert positions(seen) == sent
    assert _sub(await engine.stats("t"), "audit-reader")["backlog"] == 0


async def test_async_iterator_waits_for_new_messages(engine: Engine) -> None:
    await make_topics(engine, "t")
    reader = await engine.subscribe("t", "r")

    async def first_two() -> list[object]:
        got: list[object] = []
        async for msg in reader:
            got.append(msg.value)
            if len(got) == 2:
                return got
        return got

    task = asyncio.create_task(first_two())
    done, _ = await asyncio.wait({task}, timeout=0.1)
    assert not done
    await engine.send("t", "one")
    txn = await engine.begin()
    await txn.send("t", "two")
    await txn.commit()
    assert await asyncio.wait_for(task, timeout=5.0) == ["one", "two"]


async def test_async_iterator_stops_after_close(engine: Engine) -> None:
    await make_topics(engine, "t")
    reader = await engine.subscribe("t", "r")
    await reader.close()
    async with asyncio.timeout(5.0):
        seen = [msg async for msg in reader]
    assert seen == []
    assert _sub(await engine.stats("t"), "r")["consumers"] == []


async def test_async_iterator_ends_when_the_consumer_is_closed_while_waiting(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    reader = await engine.subscribe("t", "r")
    seen: list[object] = []

    async def consume() -> str:
        async for msg in reader:
            seen.append(msg.value)
        return "stopped"

    task = asyncio.create_task(consume())
    done, _ = await asyncio.wait({task}, timeout=0.1)
    assert not done
    await reader.close()
    try:
        result = await asyncio.wait_for(task, timeout=2.0)
    except ClosedError:
        result = "stopped"  # ending with ClosedError is as good as StopAsyncIteration
    except TimeoutError:
        result = "still waiting"
    assert result == "stopped", "`async for` kept waiting after the consumer was closed"
    assert seen == []


async def test_receive_in_flight_on_a_closed_consumer_does_not_take_new_messages(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    closing = await engine.subscribe("t", "s", type="shared")
    staying = await engine.subscribe("t", "s", type="shared")
    in_flight = asyncio.create_task(closing.receive(max=10, timeout=3.0))
    done, _ = await asyncio.wait({in_flight}, timeout=0.1)
    assert not done

    await closing.close()
    sent = await engine.send("t", "after close")

    got = await staying.receive(max=10, timeout=1.0)
    with contextlib.suppress(ClosedError):
        stolen = await asyncio.wait_for(in_flight, timeout=5.0)
        assert stolen == [], "a closed consumer's receive took a message"
    assert positions(got) == [sent]
