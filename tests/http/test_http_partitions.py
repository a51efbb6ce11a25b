"""Partitioned topics over HTTP (issue 29): ``PUT /v1/topics/{topic}`` with
``{"partitions": N}``, produce routed by key with Kafka's partitioner, a subscription on
the parent that covers every partition (positions ``L:E:P``), stats listing the
partitions with their Kafka offsets, and deletion of the whole."""

from __future__ import annotations

from typing import Any

import httpx


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


async def subscribe(client: httpx.AsyncClient, topic: str, sub: str) -> None:
    r = await client.put(f"/v1/topics/{topic}/subscriptions/{sub}", json={})
    assert r.status_code == 201, r.text


async def begin(client: httpx.AsyncClient) -> str:
    r = await client.post("/v1/transactions", json={})
    assert r.status_code == 201, r.text
    return str(r.json()["txn"])


# toPositive(murmur2(key)) % 4, Kafka's default partitioner (the Java client's
# Utils.murmur2 vectors: "21" -> -973932308, "foobar" -> -790332482, "abc" -> 479470107)
KNOWN = {"21": (-973932308 & 0x7FFFFFFF) % 4, "foobar": (-790332482 & 0x7FFFFFFF) % 4}
KNOWN["abc"] = 479470107 % 4


async def test_create_a_partitioned_topic(client: httpx.AsyncClient, name: str) -> None:
    r = await client.put(f"/v1/topics/{name}", json={"partitions": 4})
    assert r.status_code == 201, r.text
    assert r.json() == {"topic": name, "partitions": 4}
    r = await client.put(f"/v1/topics/{name}", json={"partitions": 4})
    assert r.status_code == 200  # it existed, with the same count
    for other in ({"partitions": 3}, None):  # another count, or not partitioned
        r = await client.put(f"/v1/topics/{name}", json=other)
        assert r.status_code == 409, r.text
    for bad in (0, -1, 1025, "4", 2.5, True):
        r = await client.put(f"/v1/topics/{name}x", json={"partitions": bad})
        assert r.status_code == 400, (bad, r.text)
    topics = (await client.get("/v1/topics")).json()["topics"]
    assert name in topics
    assert {f"{name}-partition-{i}" for i in range(4)} <= set(topics)
    assert f"{name}x" not in topics  # nothing was stored by the refused bodies
    # a partition is an ordinary topic: its stats say whose it is
    stats = (await client.get(f"/v1/topics/{name}-partition-2/stats")).json()
    assert stats["partition_of"] == {"topic": name, "index": 2}


async def test_produce_routes_by_key_with_kafkas_partitioner(
    client: httpx.AsyncClient, name: str
) -> None:
    await client.put(f"/v1/topics/{name}", json={"partitions": 4})
    answer = await produce(client, name, *({"value": k, "key": k} for k in KNOWN))
    assert answer["partitions"] == [f"{name}-partition-{p}" for p in KNOWN.values()]
    assert answer["duplicate"] is False
    # each position is the message's in its partition: read it back there
    for key, partition, position in zip(
        KNOWN, answer["partitions"], answer["positions"], strict=True
    ):
        r = await client.get(f"/v1/topics/{partition}/fetch", params={"from": position})
        assert r.status_code == 200, r.text
        assert r.json()["entries"][0]["key"] == key
    # without a key: round-robin, each partition in turn
    answer = await produce(client, name, *range(8))
    assert sorted(answer["partitions"]) == sorted(
        f"{name}-partition-{i}" for i in [*range(4), *range(4)]
    )
    # an idempotent producer's sequence numbers are per partition: name one
    r = await client.post(
        f"/v1/topics/{name}/messages",
        json={"messages": [{"value": 1}], "producer": "p", "sequence": 0},
    )
    assert r.status_code == 400, r.text


async def test_a_subscription_on_the_parent_reads_every_partition(
    client: httpx.AsyncClient, name: str
) -> None:
    await client.put(f"/v1/topics/{name}", json={"partitions": 3})
    await subscribe(client, name, "s")
    sent = await produce(client, name, *({"value": i, "key": f"k{i}"} for i in range(30)))
    got: list[dict[str, Any]] = []
    while len(got) < 30:
        batch = await receive(client, name, "s", max=7, wait_ms=2000)
        assert batch, "every message arrives"
        got.extend(batch)
    assert sorted(m["value"] for m in got) == list(range(30))
    for message in got:  # L:E:P, beside the partition's topic
        ledger_entry, _, index = message["position"].rpartition(":")
        assert message["topic"] == f"{name}-partition-{index}"
        value = message["value"]
        assert sent["partitions"][value] == message["topic"]
        assert sent["positions"][value] == ledger_entry
    # nack one, ack the rest: only the nacked one comes back
    r = await client.post(
        f"/v1/topics/{name}/subscriptions/s/nack", json={"positions": [got[0]["position"]]}
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        f"/v1/topics/{name}/subscriptions/s/ack",
        json={"positions": [m["position"] for m in got[1:]]},
    )
    assert r.json() == {"acked": 29}
    again = await receive(client, name, "s", wait_ms=2000)
    assert [(m["position"], m["redelivery_count"]) for m in again] == [(got[0]["position"], 1)]
    r = await client.post(
        f"/v1/topics/{name}/subscriptions/s/ack", json={"positions": [got[0]["position"]]}
    )
    assert r.status_code == 200
    # a plain L:E names no partition: refused, nothing acknowledged
    r = await client.post(f"/v1/topics/{name}/subscriptions/s/ack", json={"positions": ["0:0"]})
    assert r.status_code == 400, r.text
    stats = (await client.get(f"/v1/topics/{name}/stats")).json()
    assert stats["partitioned"] is True
    assert stats["partition_count"] == 3
    assert [p["topic"] for p in stats["partitions"]] == [f"{name}-partition-{i}" for i in range(3)]
    assert stats["subscriptions"]["s"]["backlog"] == 0
    assert stats["entries"] == 30
    assert sum(p["offsets"]["high_watermark"] for p in stats["partitions"]) == 30


async def test_a_transaction_spans_partitions(client: httpx.AsyncClient, name: str) -> None:
    await client.put(f"/v1/topics/{name}", json={"partitions": 2})
    await subscribe(client, name, "s")
    txn = await begin(client)
    await produce(client, name, *({"value": i, "key": f"k{i}"} for i in range(6)), txn=txn)
    assert await receive(client, name, "s") == []  # read_committed: held back
    stats = (await client.get(f"/v1/topics/{name}/stats")).json()
    assert stats["open_txns"] == 2  # open on both partitions
    assert (await client.post(f"/v1/transactions/{txn}/commit")).status_code == 200
    # one receive merges what every partition holds (its byte limit included)
    got = await receive(client, name, "s", wait_ms=2000, max=100)
    assert sorted(m["value"] for m in got) == list(range(6))
    assert len({m["topic"] for m in got}) == 2


async def test_delete_the_parent_deletes_its_partitions(
    client: httpx.AsyncClient, name: str
) -> None:
    await client.put(f"/v1/topics/{name}", json={"partitions": 2})
    r = await client.delete(f"/v1/topics/{name}-partition-0")
    assert r.status_code == 409, r.text  # a partition goes with its topic only
    assert (await client.delete(f"/v1/topics/{name}")).status_code == 200
    topics = (await client.get("/v1/topics")).json()["topics"]
    assert not [t for t in topics if t.startswith(name)]
    r = await client.get(f"/v1/topics/{name}-partition-0/stats")
    assert r.status_code == 404
    # the name is free again, for either kind
    assert (await client.put(f"/v1/topics/{name}")).status_code == 201


async def test_stats_show_kafka_offsets(client: httpx.AsyncClient, name: str) -> None:
    await client.put(f"/v1/topics/{name}")
    assert (await client.get(f"/v1/topics/{name}/stats")).json()["offsets"] == {
        "log_start": 0,
        "high_watermark": 0,
        "last_stable": 0,
    }
    await produce(client, name, 1, 2, 3)
    txn = await begin(client)
    await produce(client, name, 4, txn=txn)
    offsets = (await client.get(f"/v1/topics/{name}/stats")).json()["offsets"]
    # the open transaction's entry is written (high watermark) but not stable
    assert offsets == {"log_start": 0, "high_watermark": 4, "last_stable": 3}
    await client.post(f"/v1/transactions/{txn}/commit")
    offsets = (await client.get(f"/v1/topics/{name}/stats")).json()["offsets"]
    assert offsets == {"log_start": 0, "high_watermark": 5, "last_stable": 5}  # + marker
