"""``GET /metrics`` as an operator reads it: flush latency, HTTP requests by route
template, process and build information, file sizes, redeliveries, open transactions,
stable lag across ledgers, and no ``_created`` series."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from txnstream.api import Engine, EngineConfig
from txnstream.api.http import create_app


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    # Small ledgers, so a few messages span several of them.
    config = EngineConfig(ledger_max_entries=3, min_free_bytes=0)
    async with Engine.open(tmp_path / "data", config) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield client


def value(text: str, series: str) -> float:
    """The value of one exact series line (name and labels) of an exposition."""
    for line in text.splitlines():
        name, _, number = line.rpartition(" ")
        if name == series:
            return float(number)
    raise AssertionError(f"no series {series} in:\n{text}")


async def produce(http: httpx.AsyncClient, topic: str, count: int, txn: str | None = None) -> None:
    body: dict[str, object] = {"messages": [{"value": n} for n in range(count)]}
    if txn is not None:
        body["txn"] = txn
    assert (await http.post(f"/v1/topics/{topic}/messages", json=body)).status_code == 200


async def test_metrics_an_operator_needs(http: httpx.AsyncClient) -> None:
    assert (await http.put("/v1/topics/orders")).status_code == 201
    assert (await http.put("/v1/topics/orders/subscriptions/billing")).status_code == 201
    await produce(http, "orders", 2)
    txn = (await http.post("/v1/transactions", json={})).json()["txn"]
    await produce(http, "orders", 1, txn=txn)  # holds the stable position
    await produce(http, "orders", 5)  # the ledgers roll over every 3 entries
    got = (await http.get("/v1/topics/orders/subscriptions/billing/messages")).json()
    assert [m["value"] for m in got["messages"]] == [0, 1]
    nack = {"positions": [got["messages"][0]["position"]]}
    assert (await http.post("/v1/topics/orders/subscriptions/billing/nack", json=nack)).is_success
    assert (await http.get("/v1/topics/missing/stats")).status_code == 404
    assert (await http.get("/no/such/path")).status_code == 404

    text = (await http.get("/metrics")).text

    assert "_created" not in text
    # the store's flushes are timed
    assert value(text, "txnstream_flush_duration_seconds_count") >= 4
    assert 'txnstream_flush_duration_seconds_bucket{le="0.001"}' in text
    # HTTP requests by route template and status, never by raw path
    assert (
        value(
            text,
            'txnstream_http_requests_total{method="POST",route="/v1/topics/{topic}/messages",'
            'status="200"}',
        )
        == 3
    )
    assert (
        value(
            text,
            'txnstream_http_requests_total{method="GET",route="/v1/topics/{topic}/stats",'
            'status="404"}',
        )
        == 1
    )
    assert value(text, 'txnstream_http_requests_total{method="GET",route="unmatched",status="404"}')
    assert "/v1/topics/orders" not in text
    assert "/no/such/path" not in text
    put_latency = '{method="PUT",route="/v1/topics/{topic}"}'
    assert value(text, f"txnstream_http_request_duration_seconds_count{put_latency}") == 1
    assert re.search(
        r'txnstream_http_request_duration_seconds_bucket\{le="\+Inf",method="PUT",'
        r'route="/v1/topics/\{topic\}"\} 1\.0',
        text,
    )
    # process, platform and build information
    assert value(text, "process_resident_memory_bytes") > 0
    assert "python_info{" in text
    assert re.search(r'txnstream_build_info\{python="[0-9.]+",version="[^"]+"\} 1\.0', text)
    # files, open transactions, redeliveries
    assert value(text, "txnstream_database_bytes") > 0
    assert value(text, "txnstream_wal_bytes") >= 0
    assert value(text, "txnstream_open_transactions") == 1
    labels = '{subscription="billing",topic="orders"}'
    assert value(text, f"txnstream_subscription_redeliveries_total{labels}") == 1
    assert value(text, f"txnstream_subscription_unacked_messages{labels}") == 1
    # the stable lag counts every entry above the stable position, across ledgers
    stats = (await http.get("/v1/topics/orders/stats")).json()
    assert stats["ledgers"] >= 3
    assert value(text, 'txnstream_topic_stable_lag_entries{topic="orders"}') == 6
    assert value(text, 'txnstream_topic_bytes{topic="orders"}') > 0
    assert value(text, 'txnstream_topic_oldest_open_transaction_age_seconds{topic="orders"}') >= 0

    assert (await http.post(f"/v1/transactions/{txn}/abort")).status_code == 200
    text = (await http.get("/metrics")).text
    assert value(text, "txnstream_open_transactions") == 0
    assert value(text, 'txnstream_topic_stable_lag_entries{topic="orders"}') == 0
