"""One engine under both protocols: what HTTP/embedded producers store reaches Kafka
consumers as bytes and the other way round; an open engine transaction holds back Kafka
read_committed consumers until it commits; a long poll waits without holding the loop."""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka_clients import consume
from kafka_support import Kafka, KafkaWire, fetch_request

pytestmark = pytest.mark.timeout(60)


async def test_values_made_by_the_engine_reach_kafka_as_bytes(kafka: Kafka) -> None:
    from confluent_kafka import Consumer, TopicPartition

    engine = kafka.engine
    await engine.create_topic("t")
    await engine.send("t", b"\x00raw", key="k1", properties={"src": "web"})
    await engine.send("t", "text é")
    await engine.send("t", {"id": 1, "tags": ["a", "é"]})
    await engine.send("t", "last")

    def read() -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]] | None]]:
        consumer = Consumer(
            {"bootstrap.servers": kafka.bootstrap, "group.id": "unused", "fetch.wait.max.ms": 100}
        )
        try:
            consumer.assign([TopicPartition("t", 0, 0)])
            out = []
            deadline = time.monotonic() + 20
            while len(out) < 4:
                assert time.monotonic() < deadline
                message = consumer.poll(0.2)
                if message is not None:
                    assert message.error() is None
                    out.append((message.key(), message.value(), message.headers()))
            return out
        finally:
            consumer.close()

    assert await asyncio.to_thread(read) == [
        (b"k1", b"\x00raw", [("src", b"web")]),
        (None, "text é".encode(), None),
        (None, '{"id":1,"tags":["a","é"]}'.encode(), None),
        (None, b"last", None),
    ]


async def test_values_made_over_kafka_reach_the_engine_as_bytes(kafka: Kafka) -> None:
    from confluent_kafka import Producer

    await kafka.engine.create_topic("t")

    def produce() -> None:
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 1})
        producer.produce("t", value=b'{"not": "parsed"}', key=b"user-7", headers=[("h", b"v")])
        producer.produce("t", value=None, key=b"user-7")  # a tombstone
        assert producer.flush(20) == 0

    await asyncio.to_thread(produce)
    result = await kafka.engine.fetch("t", "earliest")
    assert [(e.key, e.value, e.properties) for e in result.entries] == [
        ("user-7", b'{"not": "parsed"}', {"h": "v"}),
        ("user-7", None, {}),
    ]


async def test_an_open_engine_transaction_holds_back_kafka_read_committed(kafka: Kafka) -> None:
    engine = kafka.engine
    await engine.create_topic("t")
    txn = await engine.begin()
    await txn.send("t", "held")
    await engine.send("t", "after")
    open_ = await engine.transactions(state="open")
    assert [t.txn for t in open_] == [txn.id]

    wire = await KafkaWire.open(kafka.listener.port)
    committed = await wire.call(
        fetch_request("t", 0, committed=True, max_wait_ms=200), FetchResponse, 11
    )
    [part] = committed.responses[0].partitions
    assert (part.high_watermark, part.last_stable_offset) == (2, 0)
    assert not part.records  # nothing past the last stable offset
    uncommitted = await wire.call(
        fetch_request("t", 0, committed=False, max_wait_ms=200), FetchResponse, 11
    )
    assert uncommitted.responses[0].partitions[0].records  # read_uncommitted sees both

    reader = asyncio.create_task(
        consume("confluent-kafka", kafka.bootstrap, "t", "read_committed", b"after")
    )
    await asyncio.sleep(0)  # let the reader's thread start polling
    assert not reader.done()
    await txn.commit()
    assert await asyncio.wait_for(reader, 30) == [b"held", b"after"]
    await wire.close()


async def test_a_long_poll_wakes_on_new_data_and_does_not_hold_the_loop(kafka: Kafka) -> None:
    await kafka.engine.create_topic("t")
    polling = await KafkaWire.open(kafka.listener.port)
    other = await KafkaWire.open(kafka.listener.port)
    started = time.monotonic()
    fetch = asyncio.create_task(
        polling.call(fetch_request("t", 0, committed=True, max_wait_ms=10_000), FetchResponse, 11)
    )
    # another connection is answered while the long poll waits
    answer = await other.call(ApiVersionsRequest(), ApiVersionsResponse, 2)
    assert answer.error_code == 0
    assert not fetch.done()
    await kafka.engine.send("t", "wake up")
    response = await asyncio.wait_for(fetch, 5)
    assert time.monotonic() - started < 5  # woken by the append, not the 10 s wait
    assert response.responses[0].partitions[0].records
    await polling.close()
    await other.close()
