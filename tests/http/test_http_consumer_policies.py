"""Consumer policies over HTTP (issue 31 items 14-16; HTTP_API.md "Additions (v1.2)"):
subscription fields ``max_redeliveries``, ``dead_letter_topic`` and ``nack_delay_ms``, a
nack body's ``delay_ms``, and ``PUT /v1/topics/{topic}/ttl`` ``{"ttl_ms": N}`` (also in
the creation body), each shown in stats."""

from __future__ import annotations

import asyncio
import time
from typing import Any


async def _wait(condition: Any, what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := await condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return result


async def test_dead_letter_topic_over_http(client: Any, name: str) -> None:
    dead = f"{name}-dead"
    assert (await client.put(f"/v1/topics/{name}")).status_code == 201
    sub = f"/v1/topics/{name}/subscriptions/s"
    body = {"type": "shared", "max_redeliveries": 1, "dead_letter_topic": dead}
    r = await client.put(sub, json=body)
    assert r.status_code == 201, r.text
    assert r.json()["max_redeliveries"] == 1
    assert r.json()["dead_letter_topic"] == dead
    r = await client.post(f"/v1/topics/{name}/messages", json={"messages": [{"value_b64": "AAE="}]})
    [position] = r.json()["positions"]
    for count in (0, 1):
        [message] = (await client.get(f"{sub}/messages?wait_ms=2000")).json()["messages"]
        assert message["redelivery_count"] == count
        assert (await client.post(f"{sub}/nack", json={"positions": [position]})).status_code == 200

    async def moved() -> Any:
        r = await client.get(f"/v1/topics/{dead}/stats")
        return r.status_code == 200 and r.json()["last_confirmed"] is not None

    await _wait(moved, "the dead-letter move")
    assert (await client.put(f"/v1/topics/{dead}/subscriptions/r")).status_code == 201
    r = await client.get(f"/v1/topics/{dead}/subscriptions/r/messages?wait_ms=1000")
    [moved_message] = r.json()["messages"]
    assert moved_message["value_b64"] == "AAE="  # as it was produced
    assert moved_message["properties"]["origin_topic"] == name
    assert moved_message["properties"]["origin_subscription"] == "s"
    assert moved_message["properties"]["origin_position"] == position
    assert (await client.get(f"{sub}/messages?wait_ms=200")).json()["messages"] == []
    stats = (await client.get(f"/v1/topics/{name}/stats")).json()["subscriptions"]["s"]
    assert stats["max_redeliveries"] == 1
    assert stats["dead_letter_topic"] == dead
    assert stats["backlog"] == 0


async def test_nack_delay_over_http(client: Any, name: str) -> None:
    assert (await client.put(f"/v1/topics/{name}")).status_code == 201
    sub = f"/v1/topics/{name}/subscriptions/s"
    r = await client.put(sub, json={"type": "shared", "nack_delay_ms": 60_000})
    assert r.status_code == 201
    assert r.json()["nack_delay_ms"] == 60_000
    await client.post(
        f"/v1/topics/{name}/messages", json={"messages": [{"value": 1}, {"value": 2}]}
    )
    first, second = (await client.get(f"{sub}/messages?max=2&wait_ms=2000")).json()["messages"]
    assert (
        await client.post(f"{sub}/nack", json={"positions": [first["position"]]})
    ).status_code == 200
    r = await client.post(f"{sub}/nack", json={"positions": [second["position"]], "delay_ms": 200})
    assert r.status_code == 200, r.text
    # the default delay holds the first back; the second comes after its own 200 ms
    [again] = (await client.get(f"{sub}/messages?max=10&wait_ms=5000")).json()["messages"]
    assert again["value"] == 2
    assert again["redelivery_count"] == 1
    stats = (await client.get(f"/v1/topics/{name}/stats")).json()["subscriptions"]["s"]
    assert stats["nack_delay_ms"] == 60_000
    assert stats["delayed"] == 1
    for bad in ({"positions": [], "delay_ms": -1}, {"positions": [], "delay_ms": "5s"}):
        assert (await client.post(f"{sub}/nack", json=bad)).status_code == 400


async def test_bad_policy_fields_are_400_and_change_nothing(client: Any, name: str) -> None:
    assert (await client.put(f"/v1/topics/{name}")).status_code == 201
    sub = f"/v1/topics/{name}/subscriptions/s"
    for bad in (
        {"max_redeliveries": -1},
        {"max_redeliveries": "3"},
        {"dead_letter_topic": "x"},  # without max_redeliveries
        {"max_redeliveries": 1, "dead_letter_topic": "__x"},
        {"max_redeliveries": 1, "dead_letter_topic": name},
        {"nack_delay_ms": -1},
    ):
        r = await client.put(sub, json=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["code"] == "invalid_request"
    assert (await client.get(f"/v1/topics/{name}/stats")).json()["subscriptions"] == {}


async def test_ttl_over_http(client: Any, name: str) -> None:
    r = await client.put(f"/v1/topics/{name}", json={"ttl_ms": 300})
    assert r.status_code == 201, r.text
    assert (await client.get(f"/v1/topics/{name}/stats")).json()["ttl_ms"] == 300
    assert (await client.put(f"/v1/topics/{name}/subscriptions/s")).status_code == 201
    await client.post(f"/v1/topics/{name}/messages", json={"messages": [{"value": "old"}]})

    async def expired() -> Any:
        stats = (await client.get(f"/v1/topics/{name}/stats")).json()
        return stats["subscriptions"]["s"]["backlog"] == 0

    await _wait(expired, "the TTL pass (every ttl_check_interval seconds)")
    r = await client.put(f"/v1/topics/{name}/ttl", json={"ttl_ms": None})
    assert r.status_code == 200
    assert r.json() == {"topic": name, "ttl_ms": None}
    assert (await client.get(f"/v1/topics/{name}/stats")).json()["ttl_ms"] is None
    r = await client.put(f"/v1/topics/{name}/ttl", json={"ttl_ms": 60_000})
    assert r.json() == {"topic": name, "ttl_ms": 60_000}
    for bad in ({"ttl_ms": 0}, {"ttl_ms": "1h"}, {"ttl_ms": 1.5}, {}):
        r = await client.put(f"/v1/topics/{name}/ttl", json=bad)
        assert r.status_code == 400, (bad, r.text)
    assert (
        await client.put("/v1/topics/no-such-topic-ttl/ttl", json={"ttl_ms": 1})
    ).status_code == 404


async def test_delayed_delivery_over_http(client: Any, name: str) -> None:
    assert (await client.put(f"/v1/topics/{name}")).status_code == 201
    sub = f"/v1/topics/{name}/subscriptions/s"
    assert (await client.put(sub, json={"type": "shared"})).status_code == 201
    messages = [
        {"value": "after", "deliver_after_ms": 300},
        {"value": "at", "deliver_at": "2099-01-01T00:00:00Z"},  # beyond a year: refused
    ]
    r = await client.post(f"/v1/topics/{name}/messages", json={"messages": messages})
    assert r.status_code == 400, r.text
    messages[1] = {"value_b64": "AA==", "deliver_at": "2020-01-01T00:00:00Z"}  # past: now
    r = await client.post(f"/v1/topics/{name}/messages", json={"messages": messages})
    assert r.status_code == 200, r.text
    sent = time.monotonic()
    first = (await client.get(f"{sub}/messages?max=10&wait_ms=100")).json()["messages"]
    assert [m.get("value_b64") for m in first] == ["AA=="]
    later = (await client.get(f"{sub}/messages?max=10&wait_ms=5000")).json()["messages"]
    assert [m["value"] for m in later] == ["after"]
    assert time.monotonic() - sent >= 0.2
    for bad in (
        {"value": 1, "deliver_after_ms": -1},
        {"value": 1, "deliver_at": "tomorrow"},
        {"value": 1, "deliver_after_ms": 5, "deliver_at": "2020-01-01T00:00:00Z"},
    ):
        r = await client.post(f"/v1/topics/{name}/messages", json={"messages": [bad]})
        assert r.status_code == 400, (bad, r.text)
