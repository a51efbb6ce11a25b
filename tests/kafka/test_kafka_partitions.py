"""Partitioned topics through Kafka clients (issue 29): CreateTopics with
``num_partitions``, Metadata with N partitions (partition i = topic
``{topic}-partition-{i}``), a keyed producer landing each key where Kafka's partitioner
puts it (and where the engine's own routing, HTTP's too, puts it), a group consumer
reading every partition, and a transaction across partitions."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from kafka_clients import TIMEOUT
from kafka_support import Kafka

from txnstream.api import OutgoingMessage, partition_for_key

pytestmark = pytest.mark.timeout(90)

KEYS = [f"user-{i}" for i in range(40)]


async def test_create_topics_makes_a_partitioned_topic(kafka: Kafka) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    def create_and_describe() -> dict[str, int]:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        futures = admin.create_topics([NewTopic("clicks", 4, 1)], operation_timeout=10)
        futures["clicks"].result(TIMEOUT)
        metadata = admin.list_topics(timeout=TIMEOUT)
        return {name: len(topic.partitions) for name, topic in metadata.topics.items()}

    described = await asyncio.to_thread(create_and_describe)
    assert described == {"clicks": 4}  # its partitions are listed under it only
    assert await kafka.engine.partitioned_topics() == {"clicks": 4}
    assert await kafka.engine.list_topics() == [f"clicks-partition-{i}" for i in range(4)]


async def test_a_keyed_producer_lands_where_kafkas_partitioner_says(kafka: Kafka) -> None:
    """librdkafka's ``murmur2_random`` is the Java client's default partitioner: the
    partition it picks for each key is where the message is stored, and where the
    engine routes the same key when it is produced without a partition (embedded or
    HTTP: one code path)."""
    from confluent_kafka import Consumer, Producer

    await kafka.engine.create_topic("orders", partitions=5)

    def produce() -> dict[str, int]:
        producer = Producer(
            {
                "bootstrap.servers": kafka.bootstrap,
                "partitioner": "murmur2_random",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": int(TIMEOUT * 1000),
            }
        )
        picked: dict[str, int] = {}

        def report(error: Any, message: Any) -> None:
            assert error is None, error
            picked[message.key().decode()] = message.partition()

        for key in KEYS:
            producer.produce("orders", key=key.encode(), value=key.encode(), on_delivery=report)
        assert producer.flush(TIMEOUT) == 0
        return picked

    picked = await asyncio.to_thread(produce)
    assert len(set(picked.values())) == 5  # 40 keys spread over every partition
    # stored in the partition the client picked
    for index in range(5):
        fetched = await kafka.engine.fetch(f"orders-partition-{index}", max=100)
        keys = {entry.key for entry in fetched.entries if entry.kind == "data"}
        assert keys == {key for key, p in picked.items() if p == index}
    # the engine routes each key to the same partition
    result = await kafka.engine.produce("orders", [OutgoingMessage(k, key=k) for k in KEYS])
    assert result.topics == [f"orders-partition-{picked[k]}" for k in KEYS]

    def consume_all() -> list[tuple[int, bytes]]:
        consumer = Consumer(
            {
                "bootstrap.servers": kafka.bootstrap,
                "group.id": "readers",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 100,
                "session.timeout.ms": 6000,
            }
        )
        got: list[tuple[int, bytes]] = []
        try:
            consumer.subscribe(["orders"])
            deadline = time.monotonic() + TIMEOUT
            while len(got) < 2 * len(KEYS):
                assert time.monotonic() < deadline, f"timed out; got {len(got)}"
                message = consumer.poll(0.2)
                if message is None:
                    continue
                assert message.error() is None, message.error()
                got.append((message.partition(), message.key()))
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return got

    got = await asyncio.to_thread(consume_all)
    assert sorted(got) == sorted((picked[k], k.encode()) for k in KEYS for _ in range(2))
    # the group's committed offsets are each partition's subscription cursor
    for index in range(5):
        offsets = kafka.engine.offsets(f"orders-partition-{index}")
        committed = kafka.engine.committed_offset(f"orders-partition-{index}", "readers")
        assert committed == offsets.high_watermark


async def test_a_transaction_across_partitions(kafka: Kafka) -> None:
    from confluent_kafka import Producer

    await kafka.engine.create_topic("events", partitions=3)
    sub = await kafka.engine.subscribe("events", "watch")

    def produce(commit: bool, tag: str) -> None:
        producer = Producer(
            {
                "bootstrap.servers": kafka.bootstrap,
                "transactional.id": "spread",
                "partitioner": "murmur2_random",
                "message.timeout.ms": int(TIMEOUT * 1000),
            }
        )
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        for key in KEYS[:12]:
            producer.produce("events", key=key.encode(), value=f"{tag}{key}".encode())
        assert producer.flush(TIMEOUT) == 0
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)

    await asyncio.to_thread(produce, False, "aborted-")
    await asyncio.to_thread(produce, True, "")
    values: list[Any] = []
    deadline = time.monotonic() + TIMEOUT
    while len(values) < 12:
        assert time.monotonic() < deadline
        messages = await sub.receive(max=100, timeout=1.0)
        values.extend(m.value for m in messages)
        await sub.ack([m.position for m in messages])
    assert sorted(values) == sorted(k.encode() for k in KEYS[:12])  # none aborted
    assert await sub.receive(timeout=0.3) == []


async def test_a_fetch_long_polls_a_partition_and_wakes_for_it(kafka: Kafka) -> None:
    from kafka.protocol.consumer import FetchResponse
    from kafka_support import KafkaWire, fetch_request

    await kafka.engine.create_topic("waits", partitions=2)
    wire = await KafkaWire.open(kafka.listener.port)
    try:
        started = time.monotonic()
        answer = await wire.call(
            fetch_request("waits", 0, committed=True, max_wait_ms=600), FetchResponse, 11
        )
        assert time.monotonic() - started >= 0.5  # it waited: partition 0 is watched
        [topic] = answer.responses
        assert [(p.partition_index, p.error_code) for p in topic.partitions] == [(0, 0)]
        # a record for partition 0 ends the wait early
        home = next(k for k in KEYS if partition_for_key(k, 2) == 0)
        call = asyncio.ensure_future(
            wire.call(
                fetch_request("waits", 0, committed=True, max_wait_ms=4000), FetchResponse, 11
            )
        )
        await asyncio.sleep(0.3)  # (the fetch is waiting; a later produce still wakes it)
        started = time.monotonic()
        await kafka.engine.produce("waits", [OutgoingMessage("v", key=home)])
        answer = await asyncio.wait_for(call, 5)
        assert time.monotonic() - started < 3
        [topic] = answer.responses
        assert topic.partitions[0].records
    finally:
        await wire.close()
