"""HTTP: seek a subscription and fetch by publish time (issue 31 item 5), and ``GET /``
(item 12). A timestamp is ISO 8601 (UTC unless it names an offset) or integer
milliseconds since the epoch."""

from __future__ import annotations

from datetime import datetime
from typing import Any


async def _publish_times(client: Any, topic: str) -> list[tuple[str, str]]:
    r = await client.get(f"/v1/topics/{topic}/fetch")
    return [(e["position"], e["publish_time"]) for e in r.json()["entries"]]


async def test_seek_and_fetch_by_timestamp(client: Any, name: str) -> None:
    assert (await client.put(f"/v1/topics/{name}")).status_code == 201
    body = {"messages": [{"value": i} for i in range(3)]}
    assert (await client.post(f"/v1/topics/{name}/messages", json=body)).status_code == 200
    sub = f"/v1/topics/{name}/subscriptions/s"
    assert (await client.put(sub, json={"type": "shared"})).status_code == 201
    (position, published), *_ = await _publish_times(client, name)
    ms = int(datetime.fromisoformat(published).timestamp() * 1000)

    for stamp in (published, ms, str(ms), published.replace("+00:00", "Z")):
        r = await client.post(f"{sub}/seek", json={"timestamp": stamp})
        assert r.status_code == 200, r.text
        assert r.json() == {"position": position}
        r = await client.get(f"/v1/topics/{name}/fetch", params={"timestamp": str(stamp)})
        assert r.status_code == 200, r.text
        assert [e["value"] for e in r.json()["entries"]] == [0, 1, 2]
    r = await client.post(f"{sub}/seek", json={"timestamp": "9999-01-01T00:00:00Z"})
    assert r.json() == {"position": "latest"}
    r = await client.get(f"{sub}/messages", params={"wait_ms": 0})
    assert r.json()["messages"] == []
    r = await client.get(f"/v1/topics/{name}/fetch", params={"timestamp": "9999-01-01"})
    assert r.status_code == 200
    assert r.json()["entries"] == []

    for bad in (
        {"timestamp": "yesterday"},
        {"timestamp": -1},
        {"timestamp": 1.5},
        {"position": "earliest", "timestamp": ms},
        {},
    ):
        r = await client.post(f"{sub}/seek", json=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["code"] == "invalid_request"
    both = {"from": position, "timestamp": str(ms)}
    r = await client.get(f"/v1/topics/{name}/fetch", params=both)
    assert r.status_code == 400
    r = await client.get(f"/v1/topics/{name}/fetch", params={"timestamp": "soon"})
    assert r.status_code == 400


async def test_the_root_leads_to_the_console(client: Any) -> None:
    r = await client.get("/", follow_redirects=False)
    assert r.status_code == 307
    assert r.headers["location"] == "/ui"
