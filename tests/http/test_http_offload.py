"""Tiers over HTTP (in process, ASGI): the ledger listing, the offload policy and run,
409 without an offload URL, bad input, stats and metrics."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from txnstream.api import Engine, EngineConfig
from txnstream.api.http import create_app

pytestmark = pytest.mark.timeout(60)


def open_client(engine: Engine) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=create_app(engine))
    return httpx.AsyncClient(transport=transport, base_url="http://txnstream")


@pytest.fixture
async def tiered(tmp_path: Path) -> Any:
    config = EngineConfig(
        offload_url=(tmp_path / "objects").as_uri(), ledger_max_entries=4, min_free_bytes=0
    )
    async with Engine.open(tmp_path / "data", config) as engine, open_client(engine) as http:
        yield http


async def test_listing_policy_and_run(tiered: httpx.AsyncClient) -> None:
    http = tiered
    assert (await http.put("/v1/topics/t")).status_code == 201
    for i in range(10):
        body = {"messages": [{"value": i}]}
        assert (await http.post("/v1/topics/t/messages", json=body)).status_code == 200
    txn = (await http.post("/v1/transactions", json={})).json()["txn"]
    body = {"messages": [{"value_b64": "AAE="}], "txn": txn}
    assert (await http.post("/v1/topics/t/messages", json=body)).status_code == 200
    assert (await http.post(f"/v1/transactions/{txn}/abort")).status_code == 200
    body = {"messages": [{"value": 10}]}
    assert (await http.post("/v1/topics/t/messages", json=body)).status_code == 200

    listing = (await http.get("/v1/topics/t/ledgers")).json()["ledgers"]
    assert [i["ledger"] for i in listing] == [0, 1, 2, 3]
    assert listing[0] == {
        "ledger": 0,
        "entries": 4,
        "bytes": listing[0]["bytes"],
        "has_aborts": False,
        "location": "local",
        "url": None,
    }
    answer = await http.put(
        "/v1/topics/t/offload", json={"after_ms": 60000, "min_local_ledgers": 2}
    )
    assert answer.status_code == 200
    assert answer.json() == {"topic": "t", "after_ms": 60000, "min_local_ledgers": 2}
    run = await http.post("/v1/topics/t/offload/run")
    assert run.status_code == 200
    assert run.json() == {"offloaded": [0, 1]}
    listing = (await http.get("/v1/topics/t/ledgers")).json()["ledgers"]
    assert [i["location"] for i in listing] == ["remote", "remote", "local", "local"]
    assert re.search(r"/t/00000000000000000000-[0-9a-f]{32}\.parquet$", listing[0]["url"])
    stats = (await http.get("/v1/topics/t/stats")).json()
    assert stats["offloaded_ledgers"] == 2
    assert stats["entries"] == 13
    fetched = (await http.get("/v1/topics/t/fetch", params={"max": 100})).json()
    assert fetched["aborted"] == [{"txn": txn, "first_position": "2:2"}]
    kept = [e for e in fetched["entries"] if e["kind"] == "data" and e["txn"] != txn]
    assert [e["value"] for e in kept] == list(range(11))
    # an empty body sets the defaults: manual offload only, one local ledger
    assert (await http.put("/v1/topics/t/offload")).json() == {
        "topic": "t",
        "after_ms": None,
        "min_local_ledgers": 1,
    }
    assert (await http.post("/v1/topics/t/offload/run")).json() == {"offloaded": [2]}
    metrics = (await http.get("/metrics")).text
    assert re.search(r'^txnstream_offloaded_ledgers\{topic="t"\} 3\.0$', metrics, re.M)
    assert re.search(r'^txnstream_offloaded_bytes\{topic="t"\} [1-9]', metrics, re.M)
    assert re.search(r"^txnstream_offload_index_fetches_total ", metrics, re.M)
    assert re.search(r"^txnstream_offload_data_fetches_total ", metrics, re.M)


@pytest.mark.parametrize(
    "body",
    [
        {"after_ms": -1},
        {"after_ms": 1.5},
        {"after_ms": "10"},
        {"min_local_ledgers": -1},
        {"min_local_ledgers": True},
        [],
    ],
)
async def test_bad_policies_are_400(tiered: httpx.AsyncClient, body: Any) -> None:
    await tiered.put("/v1/topics/t")
    answer = await tiered.put("/v1/topics/t/offload", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_request"


async def test_unknown_topics_are_404(tiered: httpx.AsyncClient) -> None:
    for method, path in (
        ("GET", "/v1/topics/nope/ledgers"),
        ("PUT", "/v1/topics/nope/offload"),
        ("POST", "/v1/topics/nope/offload/run"),
    ):
        answer = await tiered.request(method, path)
        assert answer.status_code == 404, (method, path)
        assert answer.json()["error"]["code"] == "not_found"


async def test_offload_without_an_offload_url_is_409(tmp_path: Path) -> None:
    config = EngineConfig(min_free_bytes=0)
    async with Engine.open(tmp_path / "data", config) as engine, open_client(engine) as http:
        await http.put("/v1/topics/t")
        for method, path in (
            ("PUT", "/v1/topics/t/offload"),
            ("POST", "/v1/topics/t/offload/run"),
        ):
            answer = await http.request(method, path)
            assert answer.status_code == 409
            assert answer.json()["error"]["code"] == "conflict"
        listing = (await http.get("/v1/topics/t/ledgers")).json()
        assert listing["ledgers"][0]["location"] == "local"
