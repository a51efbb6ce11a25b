"""HTTP consumers expire when idle, never while a long poll is waiting."""

from __future__ import annotations

import asyncio
import time

from txnstream.api import Engine


async def test_idle_http_consumer_is_detached_and_its_messages_redelivered(
    engine: Engine,
) -> None:
    await engine.create_topic("t")
    await engine.create_subscription("t", "s", type="shared")
    await engine.send("t", "m")
    got = await engine.receive("t", "s", consumer="c1", max=10)
    assert [m.value for m in got] == ["m"]
    sub = engine._rt.subscriptions.get("t", "s")
    sub.expire(time.monotonic() + 31, 30.0)
    assert "c1" not in sub.consumers
    again = await engine.receive("t", "s", consumer="c2", max=10)
    assert [(m.value, m.redelivery_count) for m in again] == [("m", 1)]


async def test_consumer_waiting_in_a_long_poll_is_not_expired(engine: Engine) -> None:
    await engine.create_topic("t")
    await engine.create_subscription("t", "s")
    poll = asyncio.create_task(engine.receive("t", "s", consumer="c1", max=10, timeout=5.0))
    sub = engine._rt.subscriptions.get("t", "s")
    async with asyncio.timeout(5):
        while not sub.consumers.get("c1") or not sub.consumers["c1"].polling:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    sub.expire(time.monotonic() + 60, 30.0)
    assert "c1" in sub.consumers
    await engine.send("t", "m")
    assert [m.value for m in await poll] == ["m"]
