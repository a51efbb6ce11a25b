"""Issue 10 over HTTP: honest health, atomic batches, request and response limits, input
that would break things, and long polls whose client went away."""

from __future__ import annotations

import asyncio
import base64
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import wait_until

from txnstream.api import Engine, EngineConfig
from txnstream.api.http import create_app

VALUE = "v" * 1000


async def _client(engine: Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        yield http


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    config = EngineConfig(max_messages_per_request=5)
    async with Engine.open(tmp_path / "data", config) as engine:
        for topic in ("a", "b"):
            await engine.create_topic(topic)
        async for http in _client(engine):
            yield http


async def _last(client: httpx.AsyncClient, topic: str) -> Any:
    return (await client.get(f"/v1/topics/{topic}/stats")).json()["last_confirmed"]


async def test_health_is_degraded_while_writes_are_refused(tmp_path: Path) -> None:
    async with Engine.open(tmp_path / "data") as engine:
        await engine.create_topic("t")
        await engine.send("t", 1)
    full = EngineConfig(min_free_bytes=2**62)  # no disk has that much free: writes refused
    async with Engine.open(tmp_path / "data", full) as engine:
        async for http in _client(engine):
            health = await http.get("/v1/health")
            assert health.status_code == 503
            assert health.json()["status"] == "degraded"
            assert "writes refused" in health.json()["reason"]
            refused = await http.post("/v1/topics/t/messages", json={"messages": [{"value": 2}]})
            assert refused.status_code == 507
            assert refused.json()["error"]["code"] == "insufficient_storage"
            fetched = await http.get("/v1/topics/t/fetch")  # reads are served
            assert [e["value"] for e in fetched.json()["entries"]] == [1]
            metrics = (await http.get("/metrics")).text
            assert "txnstream_engine_up 0.0" in metrics
            assert 'txnstream_engine_health{reason="writes refused' in metrics
    async with Engine.open(tmp_path / "data") as engine:
        async for http in _client(engine):
            assert (await http.get("/v1/health")).json() == {"status": "ok"}
            assert "txnstream_engine_up 1.0" in (await http.get("/metrics")).text


async def test_a_batch_is_atomic_across_topics(client: httpx.AsyncClient) -> None:
    body = {
        "messages": [
            {"topic": "a", "value": 1},
            {"topic": "b", "value_b64": base64.b64encode(b"x").decode()},
            {"topic": "a", "value": 2, "key": "k", "properties": {"p": "q"}},
        ]
    }
    done = await client.post("/v1/batches", json=body)
    assert done.status_code == 200, done.text
    assert done.json() == {"positions": ["0:0", "0:0", "0:1"]}
    entries = (await client.get("/v1/topics/a/fetch")).json()["entries"]
    assert [(e["value"], e["key"]) for e in entries] == [(1, None), (2, "k")]
    assert (await client.get("/v1/topics/b/fetch")).json()["entries"][0]["value_b64"] == "eA=="
    missing = await client.post(
        "/v1/batches", json={"messages": [{"topic": "a", "value": 3}, {"topic": "c", "value": 4}]}
    )
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert await _last(client, "a") == "0:1"  # nothing of it stored


@pytest.mark.parametrize("path", ["/v1/topics/a/messages", "/v1/batches"])
async def test_more_messages_than_the_limit_is_413_and_stores_nothing(
    client: httpx.AsyncClient, path: str
) -> None:
    messages = [{"topic": "a", "value": n} if "batches" in path else {"value": n} for n in range(6)]
    refused = await client.post(path, json={"messages": messages})
    assert refused.status_code == 413
    assert refused.json()["error"]["code"] == "too_large"
    assert await _last(client, "a") is None
    assert (await client.post(path, json={"messages": messages[:5]})).status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"value": 1e400}]}',
        b'{"messages": [{"value": {"x": [-1E+999]}}]}',
        b'{"messages": [{"value": NaN}]}',
        b'{"messages": [{"value": -Infinity}]}',
        b'{"messages": [{"value": "\\udc00"}]}',
        b'{"messages": [{"value": 1, "key": "\\ud800"}]}',
        b'{"messages": [{"value": 1, "properties": {"\\udfff": "x"}}]}',
        b'{"messages": [{"value": 1, "properties": {"x": "a\\ud800b"}}]}',
    ],
)
async def test_values_that_cannot_round_trip_are_400(client: httpx.AsyncClient, raw: bytes) -> None:
    refused = await client.post(
        "/v1/topics/a/messages", content=raw, headers={"content-type": "application/json"}
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid_request"
    assert await _last(client, "a") is None


@settings(max_examples=30)
@given(
    where=st.sampled_from(["key", "name", "value"]),
    text=st.text(min_size=0, max_size=5),
    surrogate=st.integers(0xD800, 0xDFFF),
)
async def test_lone_surrogates_anywhere_are_400(where: str, text: str, surrogate: int) -> None:
    bad = f"{text}\\u{surrogate:04x}"
    message = {
        "key": f'{{"value": 1, "key": "{bad}"}}',
        "name": f'{{"value": 1, "properties": {{"{bad}": "x"}}}}',
        "value": f'{{"value": 1, "properties": {{"p": "{bad}"}}}}',
    }[where]
    raw = f'{{"messages": [{message}]}}'.encode()
    with tempfile.TemporaryDirectory(prefix="txnstream-surrogate-") as tmp:
        async with Engine.open(tmp) as engine:
            await engine.create_topic("a")
            async for http in _client(engine):
                refused = await http.post(
                    "/v1/topics/a/messages",
                    content=raw,
                    headers={"content-type": "application/json"},
                )
                assert refused.status_code == 400, (raw, refused.text)
                assert (await engine.stats("a"))["last_confirmed"] is None


async def test_max_bytes_bounds_receive_and_fetch(client: httpx.AsyncClient) -> None:
    messages = [{"value": VALUE} for _ in range(5)]
    assert (await client.post("/v1/topics/a/messages", json={"messages": messages})).is_success
    fetched = await client.get("/v1/topics/a/fetch", params={"max_bytes": 2500})
    assert [e["position"] for e in fetched.json()["entries"]] == ["0:0", "0:1"]
    assert fetched.json()["next"] == "0:2"
    one = await client.get("/v1/topics/a/fetch", params={"max_bytes": 1})
    assert len(one.json()["entries"]) == 1  # at least one always comes back
    base = "/v1/topics/a/subscriptions/s"
    await client.put(base, json={"type": "exclusive"})
    got: list[str] = []
    for budget in (2500, 1, 100_000):
        answer = await client.get(f"{base}/messages", params={"max_bytes": budget})
        got.append(",".join(m["position"] for m in answer.json()["messages"]))
    assert got == ["0:0,0:1", "0:2", "0:3,0:4"]  # in order, nothing skipped or repeated
    for bad in (0, 64 * 1024 * 1024 + 1, "x"):
        for path in ("/v1/topics/a/fetch", f"{base}/messages"):
            refused = await client.get(path, params={"max_bytes": bad})
            assert refused.status_code == 400
            assert refused.json()["error"]["code"] == "invalid_request"


async def test_seek_past_the_end_behaves_as_latest(client: httpx.AsyncClient) -> None:
    base = "/v1/topics/a/subscriptions/s"
    await client.put(base, json={})
    await client.post("/v1/topics/a/messages", json={"messages": [{"value": "old"}]})
    seek = await client.post(f"{base}/seek", json={"position": "999999999999999999:0"})
    assert seek.status_code == 200
    await client.post("/v1/topics/a/messages", json={"messages": [{"value": "new"}]})
    answer = await client.get(f"{base}/messages", params={"wait_ms": 1000})
    assert [m["value"] for m in answer.json()["messages"]] == ["new"]


async def test_a_long_poll_whose_client_left_hands_out_nothing(server_url: str, name: str) -> None:
    async with httpx.AsyncClient(base_url=server_url, timeout=10) as http:
        assert (await http.put(f"/v1/topics/{name}")).status_code == 201
        base = f"/v1/topics/{name}/subscriptions/s"
        assert (await http.put(base, json={"type": "exclusive"})).status_code == 201
        host, port = server_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        request = f"GET {base}/messages?consumer=c&wait_ms=30000 HTTP/1.1\r\nHost: {host}\r\n\r\n"
        writer.write(request.encode())
        await writer.drain()

        async def attached() -> bool:
            subs = (await http.get(f"/v1/topics/{name}/stats")).json()["subscriptions"]
            return subs["s"]["consumers"] == ["c"]

        await wait_until(attached, 10, "the long poll to attach")
        writer.close()  # the client goes away mid-poll
        await writer.wait_closed()
        del reader
        sent = await http.post(f"/v1/topics/{name}/messages", json={"messages": [{"value": 1}]})
        assert sent.status_code == 200
        answer = await http.get(
            f"{base}/messages", params={"consumer": "c", "wait_ms": 1000}, timeout=5
        )
        assert [m["value"] for m in answer.json()["messages"]] == [1]
        assert answer.json()["messages"][0]["redelivery_count"] == 0
