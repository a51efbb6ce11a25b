"""Every error of docs/http-api.md: status, contract code, error body, and nothing stored."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest

MiB = 1024 * 1024


def assert_error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]


@pytest.fixture
async def topic(client: httpx.AsyncClient, name: str) -> str:
    """A topic with subscription ``s``, one message, and a committed-state baseline."""
    assert (await client.put(f"/v1/topics/{name}")).status_code == 201
    assert (await client.put(f"/v1/topics/{name}/subscriptions/s")).status_code == 201
    r = await client.post(f"/v1/topics/{name}/messages", json={"messages": [{"value": 0}]})
    assert r.status_code == 200
    return name


async def snapshot(client: httpx.AsyncClient, topic: str) -> Any:
    stats = (await client.get(f"/v1/topics/{topic}/stats")).json()
    entries = (
        await client.get(f"/v1/topics/{topic}/fetch", params={"isolation": "read_uncommitted"})
    ).json()["entries"]
    topics = (await client.get("/v1/topics")).json()["topics"]
    return stats, entries, sorted(topics)


BAD_NAMES = ["__reserved", "a" * 201, "bad name", "sp@ce", "ü", "a:b"]


@pytest.mark.parametrize("bad", BAD_NAMES)
async def test_bad_topic_names(client: httpx.AsyncClient, topic: str, bad: str) -> None:
    before = await snapshot(client, topic)
    for method, path in [
        ("PUT", f"/v1/topics/{bad}"),
        ("DELETE", f"/v1/topics/{bad}"),
        ("GET", f"/v1/topics/{bad}/stats"),
        ("GET", f"/v1/topics/{bad}/fetch"),
        ("PUT", f"/v1/topics/{topic}/subscriptions/{bad}"),
        ("GET", f"/v1/topics/{topic}/subscriptions/{bad}/messages"),
        ("DELETE", f"/v1/topics/{topic}/subscriptions/{bad}"),
    ]:
        assert_error(await client.request(method, path), 400, "invalid_request")
    r = await client.post(f"/v1/topics/{bad}/messages", json={"messages": [{"value": 1}]})
    assert_error(r, 400, "invalid_request")
    assert await snapshot(client, topic) == before


MESSAGES_BAD_BODIES: list[tuple[str, Any]] = [
    ("malformed json", b'{"messages": [{"value": 1}'),
    ("not json at all", b"hello"),
    ("json array", b"[1, 2]"),
    ("messages missing", {}),
    ("messages not a list", {"messages": {"value": 1}}),
    ("messages empty", {"messages": []}),
    ("message not an object", {"messages": [1]}),
    ("neither value", {"messages": [{"key": "k"}]}),
    ("both values", {"messages": [{"value": 1, "value_b64": "AA=="}]}),
    ("both values, null", {"messages": [{"value": None, "value_b64": "AA=="}]}),
    ("one bad of two", {"messages": [{"value": 1}, {"key": "k"}]}),
    ("bad base64", {"messages": [{"value_b64": "not base64!"}]}),
    ("bad base64 padding", {"messages": [{"value_b64": "AAA"}]}),
    ("base64 null", {"messages": [{"value_b64": None}]}),
    ("key not a string", {"messages": [{"value": 1, "key": 5}]}),
    ("properties not strings", {"messages": [{"value": 1, "properties": {"a": 1}}]}),
    ("properties a list", {"messages": [{"value": 1, "properties": ["a"]}]}),
    ("txn not a string", {"messages": [{"value": 1}], "txn": 17}),
    ("sequence without producer", {"messages": [{"value": 1}], "sequence": 0}),
    ("producer without sequence", {"messages": [{"value": 1}], "producer": "p"}),
    ("negative sequence", {"messages": [{"value": 1}], "producer": "p", "sequence": -1}),
    ("string sequence", {"messages": [{"value": 1}], "producer": "p", "sequence": "1"}),
    ("huge sequence", {"messages": [{"value": 1}], "producer": "p", "sequence": 2**64}),
    ("integer beyond msgpack", {"messages": [{"value": 2**70}]}),
    ("NaN", b'{"messages": [{"value": NaN}]}'),
    ("Infinity nested", b'{"messages": [{"value": {"a": [1, Infinity]}}]}'),
    ("deep nesting", b'{"messages": [{"value": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}"),
]


@pytest.mark.parametrize(
    "body", [b for _, b in MESSAGES_BAD_BODIES], ids=[i for i, _ in MESSAGES_BAD_BODIES]
)
async def test_bad_produce_bodies(client: httpx.AsyncClient, topic: str, body: Any) -> None:
    before = await snapshot(client, topic)
    path = f"/v1/topics/{topic}/messages"
    if isinstance(body, bytes):
        r = await client.post(path, content=body, headers={"content-type": "application/json"})
    else:
        r = await client.post(path, json=body)
    assert_error(r, 400, "invalid_request")
    assert await snapshot(client, topic) == before


async def test_moderately_deep_value_is_a_client_error_or_stored(
    client: httpx.AsyncClient, topic: str
) -> None:
    deep = b'{"messages": [{"value": ' + b"[" * 2000 + b"]" * 2000 + b"}]}"
    r = await client.post(
        f"/v1/topics/{topic}/messages", content=deep, headers={"content-type": "application/json"}
    )
    assert r.status_code in (200, 400), r.text


BAD_QUERIES = [
    {"max": 0},
    {"max": 10001},
    {"max": "ten"},
    {"wait_ms": -1},
    {"wait_ms": 30001},
    {"wait_ms": 1.5},
    {"consumer": ""},
]


@pytest.mark.parametrize("params", BAD_QUERIES, ids=[str(p) for p in BAD_QUERIES])
async def test_bad_receive_queries(client: httpx.AsyncClient, topic: str, params: Any) -> None:
    r = await client.get(f"/v1/topics/{topic}/subscriptions/s/messages", params=params)
    assert_error(r, 400, "invalid_request")


@pytest.mark.parametrize(
    "params",
    [{"from": "x"}, {"from": "1:"}, {"from": "-1:0"}, {"max": 0}, {"isolation": "dirty"}],
    ids=str,
)
async def test_bad_fetch_queries(client: httpx.AsyncClient, topic: str, params: Any) -> None:
    assert_error(
        await client.get(f"/v1/topics/{topic}/fetch", params=params), 400, "invalid_request"
    )


@pytest.mark.parametrize(
    "body",
    [
        {"timeout_ms": 0},
        {"timeout_ms": 900001},
        {"timeout_ms": "1000"},
        {"timeout_ms": 1.5},
        {"label": "x" * 201},
        {"label": 5},
        {"transactional_id": ""},
        [],
    ],
    ids=str,
)
async def test_bad_begin_bodies(client: httpx.AsyncClient, body: Any) -> None:
    assert_error(await client.post("/v1/transactions", json=body), 400, "invalid_request")


async def test_bad_transaction_list_query(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/transactions", params={"state": "sleeping"})
    assert_error(r, 400, "invalid_request")


@pytest.mark.parametrize(
    "body",
    [
        {"type": "broadcast"},
        {"initial_position": "middle"},
        {"isolation": "serializable"},
        {"type": 1},
        "exclusive",
    ],
    ids=str,
)
async def test_bad_subscription_settings(client: httpx.AsyncClient, topic: str, body: Any) -> None:
    r = await client.put(f"/v1/topics/{topic}/subscriptions/new", json=body)
    assert_error(r, 400, "invalid_request")
    stats = (await client.get(f"/v1/topics/{topic}/stats")).json()
    assert "new" not in stats["subscriptions"]


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("ack", {"positions": ["x"]}),
        ("ack", {"positions": "0:0"}),
        ("ack", {"positions": ["0:0"], "cumulative": "yes"}),
        ("ack", {}),
        ("nack", {"positions": ["01:0"]}),
        ("nack", {"positions": [0]}),
        ("seek", {"position": "somewhere"}),
        ("seek", {}),
    ],
    ids=str,
)
async def test_bad_cursor_bodies(
    client: httpx.AsyncClient, topic: str, action: str, body: Any
) -> None:
    before = await snapshot(client, topic)
    r = await client.post(f"/v1/topics/{topic}/subscriptions/s/{action}", json=body)
    assert_error(r, 400, "invalid_request")
    assert await snapshot(client, topic) == before


@pytest.mark.parametrize(
    "body",
    [{"commit": "txn-1"}, {"commit": [1]}, {"abort": None}, {"idempotence_key": ""}],
    ids=str,
)
async def test_bad_finish_bodies(client: httpx.AsyncClient, body: Any) -> None:
    assert_error(await client.post("/v1/transactions/finish", json=body), 400, "invalid_request")


async def test_unknown_things_are_404(client: httpx.AsyncClient, topic: str, name: str) -> None:
    missing = f"{name}-missing"
    sub = f"/v1/topics/{topic}/subscriptions/nosub"
    for method, path, body in [
        ("DELETE", f"/v1/topics/{missing}", None),
        ("GET", f"/v1/topics/{missing}/stats", None),
        ("GET", f"/v1/topics/{missing}/fetch", None),
        ("POST", f"/v1/topics/{missing}/messages", {"messages": [{"value": 1}]}),
        ("PUT", f"/v1/topics/{missing}/subscriptions/s", {}),
        ("GET", f"/v1/topics/{missing}/subscriptions/s/messages", None),
        ("GET", f"{sub}/messages", None),
        ("POST", f"{sub}/ack", {"positions": ["0:0"]}),
        ("POST", f"{sub}/nack", {"positions": ["0:0"]}),
        ("POST", f"{sub}/seek", {"position": "earliest"}),
        ("DELETE", sub, None),
        ("GET", "/v1/transactions/txn-999999999", None),
        ("POST", "/v1/transactions/txn-999999999/commit", None),
        ("POST", "/v1/transactions/txn-999999999/abort", None),
        ("GET", "/v1/transactions/not-a-txn-id", None),
        ("POST", "/v1/transactions/not-a-txn-id/commit", None),
        ("POST", f"/v1/topics/{topic}/messages", {"messages": [{"value": 1}], "txn": "txn-99999"}),
        ("POST", f"/v1/topics/{topic}/messages", {"messages": [{"value": 1}], "txn": "bogus"}),
        ("GET", "/v1/no-such-route", None),
        ("GET", "/v1/topics/", None),
    ]:
        r = await client.request(method, path, json=body)
        assert_error(r, 404, "not_found")
    assert missing not in (await client.get("/v1/topics")).json()["topics"]


async def test_exclusive_second_consumer_conflict(client: httpx.AsyncClient, topic: str) -> None:
    path = f"/v1/topics/{topic}/subscriptions/s/messages"
    assert (await client.get(path, params={"consumer": "c1"})).status_code == 200
    assert_error(await client.get(path, params={"consumer": "c2"}), 409, "conflict")


async def test_subscription_settings_conflict(client: httpx.AsyncClient, topic: str) -> None:
    path = f"/v1/topics/{topic}/subscriptions/s"
    assert_error(await client.put(path, json={"type": "shared"}), 409, "conflict")
    assert_error(await client.put(path, json={"isolation": "read_uncommitted"}), 409, "conflict")
    # initial_position is not compared.
    assert (await client.put(path, json={"initial_position": "latest"})).status_code == 200


async def test_request_body_too_large(client: httpx.AsyncClient, topic: str) -> None:
    before = await snapshot(client, topic)
    filler = "x" * (32 * MiB)
    body = ('{"messages": [{"value": "' + filler + '"}]}').encode()
    r = await client.post(
        f"/v1/topics/{topic}/messages", content=body, headers={"content-type": "application/json"}
    )
    assert_error(r, 413, "too_large")

    async def chunks() -> Any:  # no Content-Length: counted as it streams
        for start in range(0, len(body), MiB):
            yield body[start : start + MiB]

    r = await client.post(f"/v1/topics/{topic}/messages", content=chunks())
    assert_error(r, 413, "too_large")
    assert await snapshot(client, topic) == before


async def test_message_value_too_large(client: httpx.AsyncClient, topic: str) -> None:
    before = await snapshot(client, topic)
    raw = base64.b64encode(b"\0" * (5 * MiB + 1)).decode()
    r = await client.post(
        f"/v1/topics/{topic}/messages",
        json={"messages": [{"value": 1}, {"value_b64": raw}]},
    )
    assert_error(r, 413, "too_large")
    r = await client.post(
        f"/v1/topics/{topic}/messages", json={"messages": [{"value": "y" * (5 * MiB + 1)}]}
    )
    assert_error(r, 413, "too_large")
    assert await snapshot(client, topic) == before
    # Just under the limit is fine.
    ok = base64.b64encode(b"\1" * (5 * MiB - 64)).decode()
    r = await client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value_b64": ok}]})
    assert r.status_code == 200, r.text


async def test_method_not_allowed_has_error_body(client: httpx.AsyncClient) -> None:
    r = await client.delete("/v1/health")
    assert r.status_code == 405
    assert "error" in r.json()


async def test_non_json_content_type_is_rejected(client: httpx.AsyncClient, topic: str) -> None:
    before = await snapshot(client, topic)
    r = await client.post(
        f"/v1/topics/{topic}/messages",
        content=b'{"messages": [{"value": 1}]}',
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert_error(r, 400, "invalid_request")
    assert "application/json" in r.json()["error"]["message"]
    assert await snapshot(client, topic) == before
