"""Retention over HTTP (issue 31 item 10): ``PUT /v1/topics/{topic}/retention``
``{"time_ms", "size_bytes"}``, the same fields in the topic's creation body, and the
retention in force in the topic's stats."""

from __future__ import annotations

from typing import Any


async def test_set_retention_and_see_it_in_stats(client: Any, name: str) -> None:
    assert (await client.put(f"/v1/topics/{name}")).status_code == 201
    assert (await client.get(f"/v1/topics/{name}/stats")).json()["retention"] is None
    body = {"time_ms": 604_800_000, "size_bytes": 10 * 1024**3}
    r = await client.put(f"/v1/topics/{name}/retention", json=body)
    assert r.status_code == 200, r.text
    assert r.json() == {"topic": name, **body}
    retention = (await client.get(f"/v1/topics/{name}/stats")).json()["retention"]
    assert retention["time_ms"] == 604_800_000
    assert retention["size_bytes"] == 10 * 1024**3
    assert retention["max_age"] == 604_800
    r = await client.put(f"/v1/topics/{name}/retention", json={"time_ms": 1000})
    assert r.json() == {"topic": name, "time_ms": 1000, "size_bytes": None}
    for bad in ({"time_ms": 0}, {"size_bytes": -1}, {"time_ms": "7d"}, {"size_bytes": 1.5}):
        r = await client.put(f"/v1/topics/{name}/retention", json=bad)
        assert r.status_code == 400, (bad, r.text)
    r = await client.put("/v1/topics/no-such-topic-xyz/retention", json={"time_ms": 1})
    assert r.status_code == 404


async def test_the_creation_body_takes_the_retention(client: Any, name: str) -> None:
    r = await client.put(f"/v1/topics/{name}", json={"size_bytes": 1_000_000})
    assert r.status_code == 201
    retention = (await client.get(f"/v1/topics/{name}/stats")).json()["retention"]
    assert (retention["time_ms"], retention["size_bytes"]) == (None, 1_000_000)
    r = await client.put(f"/v1/topics/{name}", json={"time_ms": 5000})  # it exists: 200
    assert r.status_code == 200
    retention = (await client.get(f"/v1/topics/{name}/stats")).json()["retention"]
    assert (retention["time_ms"], retention["size_bytes"]) == (5000, None)
    r = await client.put(f"/v1/topics/{name}", json={"time_ms": -5})
    assert r.status_code == 400
