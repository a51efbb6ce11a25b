"""docs/http-api.md happy paths against a real uvicorn server (the session server)."""

from __future__ import annotations

import asyncio
import base64
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from support import wait_until

SUB_TYPES = ["exclusive", "failover", "shared", "key_shared"]


async def make_topic(client: httpx.AsyncClient, topic: str) -> None:
    r = await client.put(f"/v1/topics/{topic}")
    assert r.status_code == 201, r.text


async def produce(client: httpx.AsyncClient, topic: str, *messages: Any, **extra: Any) -> Any:
    body = {"messages": [m if isinstance(m, dict) else {"value": m} for m in messages], **extra}
    r = await client.post(f"/v1/topics/{topic}/messages", json=body)
    assert r.status_code == 200, r.text
    return r.json()


async def receive(
    client: httpx.AsyncClient, topic: str, sub: str, **params: Any
) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/topics/{topic}/subscriptions/{sub}/messages", params=params)
    assert r.status_code == 200, r.text
    return list(r.json()["messages"])


async def subscribe(client: httpx.AsyncClient, topic: str, sub: str, **settings: Any) -> None:
    r = await client.put(f"/v1/topics/{topic}/subscriptions/{sub}", json=settings)
    assert r.status_code == 201, r.text


async def begin(client: httpx.AsyncClient, **body: Any) -> str:
    r = await client.post("/v1/transactions", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["txn"])


async def stats(client: httpx.AsyncClient, topic: str) -> dict[str, Any]:
    r = await client.get(f"/v1/topics/{topic}/stats")
    assert r.status_code == 200, r.text
    return dict(r.json())


# -------------------------------------------------------------------------- admin


async def test_health_and_request_id(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}
    assert r.headers["x-request-id"]


async def test_openapi_documents_every_route_without_422(client: httpx.AsyncClient) -> None:
    r = await client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    paths = doc["paths"]
    for path in [
        "/v1/health",
        "/metrics",
        "/v1/topics",
        "/v1/topics/{topic}",
        "/v1/topics/{topic}/stats",
        "/v1/topics/{topic}/messages",
        "/v1/topics/{topic}/fetch",
        "/v1/topics/{topic}/subscriptions/{sub}",
        "/v1/topics/{topic}/subscriptions/{sub}/messages",
        "/v1/topics/{topic}/subscriptions/{sub}/ack",
        "/v1/topics/{topic}/subscriptions/{sub}/nack",
        "/v1/topics/{topic}/subscriptions/{sub}/seek",
        "/v1/transactions",
        "/v1/transactions/finish",
        "/v1/transactions/{txn}",
        "/v1/transactions/{txn}/commit",
        "/v1/transactions/{txn}/abort",
    ]:
        assert path in paths, path
    for item in paths.values():
        for operation in item.values():
            assert "422" not in operation["responses"]
    assert "ErrorResponse" in doc["components"]["schemas"]
    docs = await client.get("/docs")
    assert docs.status_code == 200


async def test_topic_lifecycle(client: httpx.AsyncClient, name: str) -> None:
    r = await client.put(f"/v1/topics/{name}")
    assert (r.status_code, r.json()) == (201, {"topic": name})
    r = await client.put(f"/v1/topics/{name}", json={})
    assert (r.status_code, r.json()) == (200, {"topic": name})
    assert name in (await client.get("/v1/topics")).json()["topics"]

    s = await stats(client, name)
    assert s["topic"] == name
    assert s["last_confirmed"] is None
    assert s["stable_position"] is None
    assert (s["open_txns"], s["aborted_txns"], s["entries"]) == (0, 0, 0)
    assert isinstance(s["ledgers"], int)
    assert s["subscriptions"] == {}
    assert "snapshot" in s

    await subscribe(client, name, "s")
    await produce(client, name, 1)
    r = await client.delete(f"/v1/topics/{name}")
    assert r.status_code == 200
    assert name not in (await client.get("/v1/topics")).json()["topics"]
    assert (await client.get(f"/v1/topics/{name}/stats")).status_code == 404
    # Re-created, it starts empty: data and subscriptions are gone.
    await make_topic(client, name)
    s = await stats(client, name)
    assert s["subscriptions"] == {}
    assert s["entries"] == 0


async def test_metrics_exposes_counters_and_topic_gauges(
    client: httpx.AsyncClient, name: str
) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    await produce(client, name, 1, 2)
    txn = await begin(client)
    await produce(client, name, 3, txn=txn)
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    text = r.text
    for metric in [
        "txnstream_messages_in_total",
        "txnstream_transactions_committed_total",
        "txnstream_append_batch_size_bucket",
        "txnstream_commit_latency_seconds_bucket",
        "txnstream_receive_wait_seconds_bucket",
    ]:
        assert metric in text, metric
    assert f'txnstream_topic_open_transactions{{topic="{name}"}} 1.0' in text
    assert f'txnstream_subscription_backlog_entries{{subscription="s",topic="{name}"}}' in text
    assert f'txnstream_topic_stable_lag_entries{{topic="{name}"}} 1.0' in text
    await client.post(f"/v1/transactions/{txn}/abort")


# ------------------------------------------------------------------- produce/consume


@pytest.mark.parametrize("sub_type", SUB_TYPES)
async def test_round_trip_per_subscription_type(
    client: httpx.AsyncClient, name: str, sub_type: str
) -> None:
    await make_topic(client, name)
    r = await client.put(f"/v1/topics/{name}/subscriptions/s", json={"type": sub_type})
    assert r.status_code == 201
    assert r.json()["type"] == sub_type
    again = await client.put(f"/v1/topics/{name}/subscriptions/s", json={"type": sub_type})
    assert again.status_code == 200

    sent = [
        {"value": {"order": 1}, "key": "k1", "properties": {"a": "b"}},
        {"value_b64": base64.b64encode(b"\x00\xffraw").decode()},
        {"value": None, "key": "k2"},
        {"value": "text"},
    ]
    before = datetime.now(UTC)
    result = await produce(client, name, *sent)
    assert result["duplicate"] is False
    positions = result["positions"]
    assert len(positions) == 4
    assert all(isinstance(p, str) and ":" in p for p in positions)

    got = await receive(client, name, "s", max=10, wait_ms=1000)
    if sub_type in ("exclusive", "failover"):
        assert [m["position"] for m in got] == positions
    got_by_pos = {m["position"]: m for m in got}
    while len(got_by_pos) < 4:  # shared types may deliver in several receives
        more = await receive(client, name, "s", max=10, wait_ms=1000)
        assert more, "messages went missing"
        got_by_pos.update({m["position"]: m for m in more})
    first, raw, null, text = (got_by_pos[p] for p in positions)
    assert first["value"] == {"order": 1}
    assert "value_b64" not in first
    assert first["key"] == "k1"
    assert first["properties"] == {"a": "b"}
    assert first["txn"] is None
    assert first["redelivery_count"] == 0
    published = datetime.fromisoformat(first["publish_time"].replace("Z", "+00:00"))
    assert published.tzinfo is not None
    assert abs((published - before).total_seconds()) < 60
    assert base64.b64decode(raw["value_b64"]) == b"\x00\xffraw"
    assert "value" not in raw
    assert "value" in null
    assert null["value"] is None
    assert text["value"] == "text"

    r = await client.post(f"/v1/topics/{name}/subscriptions/s/ack", json={"positions": positions})
    assert (r.status_code, r.json()) == (200, {"acked": 4})
    assert await receive(client, name, "s", wait_ms=0) == []
    assert (await stats(client, name))["subscriptions"]["s"]["backlog"] == 0


async def test_receive_respects_max_and_consumer_default(
    client: httpx.AsyncClient, name: str
) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    await produce(client, name, *range(5))
    got = await receive(client, name, "s", max=2)
    assert [m["value"] for m in got] == [0, 1]
    sub_stats = (await stats(client, name))["subscriptions"]["s"]
    assert sub_stats["consumers"] == ["default"]
    assert sub_stats["type"] == "exclusive"
    assert sub_stats["isolation"] == "read_committed"


async def test_nack_redelivers_with_count(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s", type="shared")
    [pos] = (await produce(client, name, "x"))["positions"]
    [msg] = await receive(client, name, "s", wait_ms=1000)
    assert msg["redelivery_count"] == 0
    r = await client.post(f"/v1/topics/{name}/subscriptions/s/nack", json={"positions": [pos]})
    assert r.status_code == 200
    [again] = await receive(client, name, "s", wait_ms=2000)
    assert again["position"] == pos
    assert again["redelivery_count"] == 1


async def test_cumulative_ack_and_seek(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    positions = (await produce(client, name, *range(4)))["positions"]
    await receive(client, name, "s", max=4)
    r = await client.post(
        f"/v1/topics/{name}/subscriptions/s/ack",
        json={"positions": [positions[2]], "cumulative": True},
    )
    assert r.json() == {"acked": 1}
    s = (await stats(client, name))["subscriptions"]["s"]
    assert s["mark_delete"] == positions[2]
    assert s["backlog"] == 1

    r = await client.post(f"/v1/topics/{name}/subscriptions/s/seek", json={"position": "earliest"})
    assert r.status_code == 200
    assert [m["value"] for m in await receive(client, name, "s", max=10)] == [0, 1, 2, 3]

    r = await client.post(
        f"/v1/topics/{name}/subscriptions/s/seek", json={"position": positions[2]}
    )
    assert r.status_code == 200
    assert [m["value"] for m in await receive(client, name, "s", max=10)] == [2, 3]
    assert (await stats(client, name))["subscriptions"]["s"]["backlog"] == 2

    r = await client.post(f"/v1/topics/{name}/subscriptions/s/seek", json={"position": "latest"})
    assert r.status_code == 200
    assert await receive(client, name, "s") == []


async def test_initial_position_latest(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await produce(client, name, "old")
    await subscribe(client, name, "s", initial_position="latest")
    await produce(client, name, "new")
    assert [m["value"] for m in await receive(client, name, "s", wait_ms=1000)] == ["new"]


async def test_latest_waits_for_an_open_transaction(client: httpx.AsyncClient, name: str) -> None:
    """A read_committed subscription created or seeked at ``latest`` while a transaction
    is open starts at the stable position: the transaction's messages come once it
    commits."""
    await make_topic(client, name)
    await produce(client, name, "old")
    txn = await begin(client)
    await produce(client, name, "in-txn", txn=txn)
    await subscribe(client, name, "created", initial_position="latest")
    await subscribe(client, name, "seeked")
    r = await client.post(
        f"/v1/topics/{name}/subscriptions/seeked/seek", json={"position": "latest"}
    )
    assert r.status_code == 200
    assert (await client.post(f"/v1/transactions/{txn}/commit")).status_code == 200
    for sub in ("created", "seeked"):
        got = await receive(client, name, sub, wait_ms=1000)
        assert [m["value"] for m in got] == ["in-txn"]


async def test_seek_past_the_end_of_an_empty_topic(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    r = await client.post(
        f"/v1/topics/{name}/subscriptions/s/seek", json={"position": "999999999999999999:0"}
    )
    assert r.status_code == 200
    await produce(client, name, "first")
    assert [m["value"] for m in await receive(client, name, "s", wait_ms=2000)] == ["first"]


@pytest.mark.parametrize("wait_ms", [0, 5000])
async def test_a_poll_on_an_unknown_topic_or_subscription_is_404_at_once(
    client: httpx.AsyncClient, name: str, wait_ms: int
) -> None:
    await make_topic(client, name)
    for path in (f"/v1/topics/{name}-x/subscriptions/s", f"/v1/topics/{name}/subscriptions/x"):
        started = time.monotonic()
        r = await client.get(f"{path}/messages", params={"wait_ms": wait_ms})
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "not_found"
        assert time.monotonic() - started < 2.0


async def test_delete_subscription(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    assert (await client.delete(f"/v1/topics/{name}/subscriptions/s")).status_code == 200
    assert (await stats(client, name))["subscriptions"] == {}
    assert (await client.delete(f"/v1/topics/{name}/subscriptions/s")).status_code == 404


async def test_empty_bodies_allowed(client: httpx.AsyncClient, name: str) -> None:
    r = await client.put(f"/v1/topics/{name}")
    assert r.status_code == 201
    r = await client.put(f"/v1/topics/{name}/subscriptions/a")
    assert r.status_code == 201
    assert r.json()["type"] == "exclusive"
    r = await client.put(f"/v1/topics/{name}/subscriptions/b", json={})
    assert r.status_code == 201
    r = await client.post("/v1/transactions")
    assert r.status_code == 201
    assert r.json()["state"] == "open"
    assert r.json()["timeout_ms"] == 60000
    r2 = await client.post("/v1/transactions", json={})
    assert r2.status_code == 201
    for txn in (r.json()["txn"], r2.json()["txn"]):
        await client.post(f"/v1/transactions/{txn}/abort")


async def test_body_without_content_type_is_json(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    r = await client.post(
        f"/v1/topics/{name}/messages", content=b'{"messages": [{"value": 7}]}', headers={}
    )
    assert r.status_code == 200, r.text


# --------------------------------------------------------------------- transactions


async def test_transaction_over_two_topics(client: httpx.AsyncClient, name: str) -> None:
    a, b = f"{name}-a", f"{name}-b"
    for topic in (a, b):
        await make_topic(client, topic)
        await subscribe(client, topic, "s")
    txn = await begin(client, timeout_ms=60000, label="job:1")
    pa = (await produce(client, a, "a1", "a2", txn=txn))["positions"]
    pb = (await produce(client, b, {"value": {"b": 1}}, txn=txn))["positions"]

    info = (await client.get(f"/v1/transactions/{txn}")).json()
    assert info["state"] == "open"
    assert info["label"] == "job:1"
    assert sorted(info["topics"]) == sorted([a, b])
    assert info["fenced"] is False

    # Nothing is visible to read_committed readers before the commit.
    assert await receive(client, a, "s") == []
    assert await receive(client, b, "s") == []
    fetched = (await client.get(f"/v1/topics/{a}/fetch")).json()
    assert fetched["entries"] == []
    assert (await stats(client, a))["open_txns"] == 1
    uncommitted = (
        await client.get(f"/v1/topics/{a}/fetch", params={"isolation": "read_uncommitted"})
    ).json()
    assert [e["position"] for e in uncommitted["entries"]] == pa

    r = await client.post(f"/v1/transactions/{txn}/commit")
    assert (r.status_code, r.json()["state"]) == (200, "committed")
    # Visible right after the 200, on both topics.
    got_a = await receive(client, a, "s")
    got_b = await receive(client, b, "s")
    assert [m["position"] for m in got_a] == pa
    assert [m["value"] for m in got_a] == ["a1", "a2"]
    assert all(m["txn"] == txn for m in got_a)
    assert [m["position"] for m in got_b] == pb

    # Committing again is idempotent; aborting a committed one is not allowed.
    assert (await client.post(f"/v1/transactions/{txn}/commit")).status_code == 200
    r = await client.post(f"/v1/transactions/{txn}/abort")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "txn_not_open")


async def test_abort_hides_data_and_fetch_lists_it(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    txn = await begin(client)
    [aborted_pos] = (await produce(client, name, "gone", txn=txn))["positions"]
    [plain_pos] = (await produce(client, name, "kept"))["positions"]
    r = await client.post(f"/v1/transactions/{txn}/abort")
    assert (r.status_code, r.json()["state"]) == (200, "aborted")
    assert (await client.post(f"/v1/transactions/{txn}/abort")).status_code == 200
    r = await client.post(f"/v1/transactions/{txn}/commit")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "txn_not_open")
    r = await client.post(
        f"/v1/topics/{name}/messages", json={"messages": [{"value": 1}], "txn": txn}
    )
    assert (r.status_code, r.json()["error"]["code"]) == (409, "txn_not_open")

    assert [m["value"] for m in await receive(client, name, "s")] == ["kept"]
    fetched = (await client.get(f"/v1/topics/{name}/fetch", params={"from": "earliest"})).json()
    kinds = {e["position"]: e["kind"] for e in fetched["entries"]}
    assert kinds[aborted_pos] == "data"
    assert kinds[plain_pos] == "data"
    assert "abort" in kinds.values()
    assert fetched["aborted"] == [{"txn": txn, "first_position": aborted_pos}]
    assert fetched["stable_position"] == fetched["last_confirmed"]
    s = await stats(client, name)
    assert s["aborted_txns"] == 1
    assert s["entries"] == 3


async def test_fetch_pages_with_next(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    positions = (await produce(client, name, *range(5)))["positions"]
    page = (await client.get(f"/v1/topics/{name}/fetch", params={"max": 2})).json()
    assert [e["position"] for e in page["entries"]] == positions[:2]
    seen = list(page["entries"])
    while True:
        page = (
            await client.get(f"/v1/topics/{name}/fetch", params={"from": page["next"], "max": 2})
        ).json()
        if not page["entries"]:
            break
        seen.extend(page["entries"])
    assert [e["value"] for e in seen] == [0, 1, 2, 3, 4]
    assert page["next"] == page["next"]
    again = (await client.get(f"/v1/topics/{name}/fetch", params={"from": page["next"]})).json()
    assert again["entries"] == []
    assert again["next"] == page["next"]


async def test_fencing_by_transactional_id(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    old = await begin(client, transactional_id=f"{name}-writer")
    await produce(client, name, "old", txn=old)
    new = await begin(client, transactional_id=f"{name}-writer")
    assert new != old
    for method, path, body in [
        ("POST", f"/v1/topics/{name}/messages", {"messages": [{"value": 1}], "txn": old}),
        ("POST", f"/v1/transactions/{old}/commit", None),
        ("POST", f"/v1/transactions/{old}/abort", None),
    ]:
        r = await client.request(method, path, json=body)
        assert (r.status_code, r.json()["error"]["code"]) == (409, "fenced"), path
    assert (await client.get(f"/v1/transactions/{old}")).json()["fenced"] is True

    async def aborted() -> bool:  # see test_fenced_transaction_reads_aborted_at_once
        info = (await client.get(f"/v1/transactions/{old}")).json()
        assert info["state"] in ("aborting", "aborted"), info
        return bool(info["state"] == "aborted")

    await wait_until(aborted, 5, "the fenced transaction to be aborted")
    assert (await client.post(f"/v1/transactions/{new}/commit")).status_code == 200


async def test_fenced_transaction_reads_aborted_at_once(
    client: httpx.AsyncClient, name: str
) -> None:
    await make_topic(client, name)
    for _ in range(20):
        old = await begin(client, transactional_id=f"{name}-w")
        await produce(client, name, "x", txn=old)
        await begin(client, transactional_id=f"{name}-w")
        info = (await client.get(f"/v1/transactions/{old}")).json()
        assert (info["state"], info["fenced"]) == ("aborted", True)


async def test_transaction_timeout_aborts(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    txn = await begin(client, timeout_ms=1)

    async def aborted() -> bool:
        return bool((await client.get(f"/v1/transactions/{txn}")).json()["state"] == "aborted")

    await wait_until(aborted, 10, "the timeout to abort the transaction", interval=0.05)
    r = await client.post(f"/v1/transactions/{txn}/commit")
    assert (r.status_code, r.json()["error"]["code"]) == (409, "txn_not_open")


async def test_list_transactions_by_state_and_label(client: httpx.AsyncClient, name: str) -> None:
    t1 = await begin(client, label=f"{name}:part-0")
    t2 = await begin(client, label=f"{name}:part-1")
    await begin(client, label=f"other-{name}")
    await client.post(f"/v1/transactions/{t2}/abort")
    r = await client.get("/v1/transactions", params={"label_prefix": f"{name}:"})
    assert r.status_code == 200
    listed = {t["txn"]: t for t in r.json()["transactions"]}
    assert set(listed) == {t1, t2}
    assert listed[t1]["label"] == f"{name}:part-0"
    r = await client.get("/v1/transactions", params={"label_prefix": f"{name}:", "state": "open"})
    assert [t["txn"] for t in r.json()["transactions"]] == [t1]
    await client.post(f"/v1/transactions/{t1}/abort")


async def test_finish_with_idempotence_key(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    a, b, c = (await begin(client), await begin(client), await begin(client))
    for txn in (a, b, c):
        await produce(client, name, txn, txn=txn)
    r = await client.post(
        "/v1/transactions/finish", json={"commit": [a, b], "abort": [c], "idempotence_key": name}
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"committed": [a, b], "aborted": [c], "duplicate": False}
    assert sorted(m["value"] for m in await receive(client, name, "s")) == sorted([a, b])

    # A replay with the same key aborts everything it lists.
    d = await begin(client)
    await produce(client, name, d, txn=d)
    r = await client.post("/v1/transactions/finish", json={"commit": [d], "idempotence_key": name})
    assert r.status_code == 200
    assert r.json()["duplicate"] is True
    assert r.json()["aborted"] == [d]
    assert (await client.get(f"/v1/transactions/{d}")).json()["state"] == "aborted"


async def test_finish_is_all_or_nothing(client: httpx.AsyncClient) -> None:
    ok = await begin(client)
    ended = await begin(client)
    await client.post(f"/v1/transactions/{ended}/abort")
    r = await client.post("/v1/transactions/finish", json={"commit": [ok, ended]})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "txn_not_open")
    assert (await client.get(f"/v1/transactions/{ok}")).json()["state"] == "open"
    await client.post(f"/v1/transactions/{ok}/abort")


async def test_transactional_ack(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s", type="shared")
    [pos] = (await produce(client, name, "m"))["positions"]
    await receive(client, name, "s")
    t1, t2 = await begin(client), await begin(client)
    ack = f"/v1/topics/{name}/subscriptions/s/ack"
    r = await client.post(ack, json={"positions": [pos], "txn": t1})
    assert (r.status_code, r.json()) == (200, {"acked": 1})
    r = await client.post(ack, json={"positions": [pos], "txn": t2})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "conflict")
    r = await client.post(ack, json={"positions": [pos]})
    assert (r.status_code, r.json()["error"]["code"]) == (409, "conflict")
    await client.post(f"/v1/transactions/{t1}/commit")
    await client.post(f"/v1/transactions/{t2}/abort")
    assert (await stats(client, name))["subscriptions"]["s"]["backlog"] == 0


async def test_idempotent_producer(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    first = await produce(client, name, "a", "b", producer="p1", sequence=0)
    assert first["duplicate"] is False
    entries = (await stats(client, name))["entries"]
    again = await produce(client, name, "a", "b", producer="p1", sequence=0)
    assert again["duplicate"] is True
    assert again["positions"] in (first["positions"], [])
    lower = await produce(client, name, "b", producer="p1", sequence=1)
    assert lower["duplicate"] is True
    assert (await stats(client, name))["entries"] == entries
    gap = await produce(client, name, "c", producer="p1", sequence=5)
    assert gap["duplicate"] is False
    other = await produce(client, name, "a", producer="p2", sequence=0)
    assert other["duplicate"] is False
    assert (await stats(client, name))["entries"] == entries + 2


# ------------------------------------------------------------------------ long poll


async def test_long_poll_wakes_on_commit(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    txn = await begin(client)
    await produce(client, name, "late", txn=txn)

    started = time.monotonic()
    poll = asyncio.create_task(receive(client, name, "s", consumer="c1", wait_ms=5000))

    async def attached() -> bool:  # the poll is waiting once its consumer is attached
        assert not poll.done(), poll
        return "c1" in (await stats(client, name))["subscriptions"]["s"]["consumers"]

    await wait_until(attached, 5, "the long poll to attach")
    assert not poll.done()
    committed_at = time.monotonic()
    assert (await client.post(f"/v1/transactions/{txn}/commit")).status_code == 200
    got = await asyncio.wait_for(poll, timeout=10)
    woke_after = time.monotonic() - committed_at
    assert [m["value"] for m in got] == ["late"]
    assert woke_after < 2.0, woke_after
    assert time.monotonic() - started < 4.9


async def test_long_poll_times_out_empty(client: httpx.AsyncClient, name: str) -> None:
    await make_topic(client, name)
    await subscribe(client, name, "s")
    started = time.monotonic()
    assert await receive(client, name, "s", wait_ms=300) == []
    assert time.monotonic() - started >= 0.25


# ----------------------------------------------------------- hanging transactions


async def test_transaction_bodies_show_age_deadline_and_reason(
    client: httpx.AsyncClient, name: str
) -> None:
    await make_topic(client, name)
    txn = await begin(client, timeout_ms=60000, label=f"{name}:a")
    body = (await client.get(f"/v1/transactions/{txn}")).json()
    created = datetime.fromisoformat(body["created_at"].replace("Z", "+00:00"))
    deadline = datetime.fromisoformat(body["deadline"].replace("Z", "+00:00"))
    assert (deadline - created).total_seconds() == pytest.approx(60, abs=0.01)
    assert body["timeout_ms"] == 60000
    assert body["reason"] is None
    await produce(client, name, "held", txn=txn)
    blocking = (await stats(client, name))["blocking_txn"]
    assert blocking["txn"] == txn
    assert blocking["deadline"] is not None
    listed = await client.get(
        "/v1/transactions",
        params={"state": "open", "label_prefix": f"{name}:", "older_than_ms": 0},
    )
    assert [t["txn"] for t in listed.json()["transactions"]] == [txn]
    recent = await client.get(
        "/v1/transactions", params={"label_prefix": f"{name}:", "older_than_ms": 3600000}
    )
    assert recent.json()["transactions"] == []
    bad = await client.get("/v1/transactions", params={"older_than_ms": -1})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "invalid_request"
    ended = await client.post(f"/v1/transactions/{txn}/abort")
    assert ended.json()["reason"] == "client"
    assert (await stats(client, name))["blocking_txn"] is None
