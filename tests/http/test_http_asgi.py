"""``create_app`` in process (httpx ASGITransport, no lifespan) over an open engine."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import wait_until

from txnstream.api import Engine, EngineConfig
from txnstream.api.http import ERROR_TABLE, Drain, create_app
from txnstream.api.http._errors import lookup_error


@pytest.fixture
async def engine(tmp_path: Path) -> Any:
    async with Engine.open(tmp_path / "data", config=EngineConfig(max_request_bytes=4096)) as eng:
        yield eng


@pytest.fixture
def drain() -> Drain:
    return Drain()


@pytest.fixture
async def client(engine: Any, drain: Drain) -> Any:
    app = create_app(engine, drain=drain)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://txnstream") as http:
        yield http


async def _attached_poll(
    client: httpx.AsyncClient, engine: Any, wait_ms: int
) -> asyncio.Task[httpx.Response]:
    """A long-poll receive on ``t``/``s``, returned once its consumer is attached."""
    poll = asyncio.create_task(
        client.get("/v1/topics/t/subscriptions/s/messages", params={"wait_ms": wait_ms})
    )

    async def attached() -> bool:
        return bool((await engine.stats("t"))["subscriptions"]["s"]["consumers"])

    await wait_until(attached, 5, "the long poll to attach")
    return poll


def test_error_table_walks_the_mro() -> None:
    from txnstream.api import (
        AckConflictError,
        ConsumerBusyError,
        CorruptEntryError,
        SubscriptionNotFoundError,
        TopicNotFoundError,
        TxnNotFoundError,
    )

    assert lookup_error(TopicNotFoundError("x")) == (404, "not_found")
    assert lookup_error(SubscriptionNotFoundError("x")) == (404, "not_found")
    assert lookup_error(TxnNotFoundError("x")) == (404, "not_found")
    assert lookup_error(ConsumerBusyError("x")) == (409, "conflict")
    assert lookup_error(AckConflictError("x")) == (409, "conflict")
    assert lookup_error(CorruptEntryError("x")) is None  # -> 500 internal
    assert lookup_error(ValueError("x")) is None
    assert len(ERROR_TABLE) >= 8


async def test_configured_request_limit(client: httpx.AsyncClient) -> None:
    assert (await client.put("/v1/topics/t")).status_code == 201
    body = {"messages": [{"value": "x" * 5000}]}
    r = await client.post("/v1/topics/t/messages", json=body)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "too_large"
    r = await client.post("/v1/topics/t/messages", json={"messages": [{"value": "x" * 100}]})
    assert r.status_code == 200


async def test_drain_ends_pending_long_polls(
    client: httpx.AsyncClient, engine: Any, drain: Drain
) -> None:
    await client.put("/v1/topics/t")
    await client.put("/v1/topics/t/subscriptions/s")
    started = time.monotonic()
    poll = await _attached_poll(client, engine, wait_ms=20000)
    drain.start()
    r = await asyncio.wait_for(poll, timeout=5)
    assert r.status_code == 200
    assert r.json() == {"messages": []}
    assert time.monotonic() - started < 5
    # Once draining, later polls do not wait either.
    r = await asyncio.wait_for(
        client.get("/v1/topics/t/subscriptions/s/messages", params={"wait_ms": 20000}), 5
    )
    assert r.json() == {"messages": []}


async def test_long_poll_during_subscription_delete_is_not_503(
    client: httpx.AsyncClient, engine: Any
) -> None:
    await client.put("/v1/topics/t")
    await client.put("/v1/topics/t/subscriptions/s")
    poll = await _attached_poll(client, engine, wait_ms=5000)
    assert (await client.delete("/v1/topics/t/subscriptions/s")).status_code == 200
    r = await asyncio.wait_for(poll, timeout=10)
    assert r.status_code in (200, 404), r.text


async def test_a_listing_of_thousands_streams_every_transaction_a_get_finds(
    engine: Any, client: httpx.AsyncClient
) -> None:
    """An unfiltered listing names every transaction ended within the retention: past
    one page it is sent page by page (chunked, no Content-Length), oldest first, and
    says what a GET of each says; a small filtered listing stays one plain body."""
    txns = [await engine.begin(label=f"job:{n % 3}:{n}") for n in range(4_500)]
    await engine.finish(commit=[t.id for t in txns[::2]], abort=[t.id for t in txns[1::2]])
    kept_open = await engine.begin(label="job:0:open")

    response = await client.get("/v1/transactions")
    assert response.status_code == 200
    assert "content-length" not in response.headers  # streamed
    listed = response.json()["transactions"]
    assert [t["txn"] for t in listed] == [t.id for t in txns] + [kept_open.id]
    for n in (0, 1, 999, 2_000, 2_001, 4_499):
        assert listed[n] == (await client.get(f"/v1/transactions/{txns[n].id}")).json()
    assert listed[-1]["state"] == "open"

    small = await client.get("/v1/transactions", params={"label_prefix": "job:0:open"})
    assert small.headers["content-length"] == str(len(small.content))
    assert [t["txn"] for t in small.json()["transactions"]] == [kept_open.id]
    aborted = await client.get("/v1/transactions", params={"state": "aborted"})
    assert [t["txn"] for t in aborted.json()["transactions"]] == [t.id for t in txns[1::2]]
