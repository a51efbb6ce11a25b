"""Idempotent producers on the wire: a retried batch is answered with its original
offsets and stores nothing; a sequence gap is refused and stores nothing."""

from __future__ import annotations

import pytest
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka_support import Kafka, KafkaWire, produce_request, record_batch

pytestmark = pytest.mark.timeout(30)


async def _produce(wire: KafkaWire, topic: str, records: bytes) -> tuple[int, int]:
    answer = await wire.call(produce_request(topic, records), ProduceResponse, 8)
    [part] = answer.responses[0].partition_responses
    return part.error_code, part.base_offset


async def test_a_retried_batch_gets_its_offsets_and_a_gap_is_refused(kafka: Kafka) -> None:
    await kafka.engine.create_topic("t")
    wire = await KafkaWire.open(kafka.listener.port)
    init = await wire.call(
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1),
        InitProducerIdResponse,
        1,
    )
    assert init.error_code == 0
    pid, epoch = init.producer_id, init.producer_epoch
    await kafka.engine.send("t", "from elsewhere")  # offset 0

    first = record_batch(pid, epoch, 0, [b"a", b"b", b"c"])
    assert await _produce(wire, "t", first) == (0, 1)
    assert await _produce(wire, "t", first) == (0, 1)  # the retry: same offsets
    assert kafka.engine.offsets("t").high_watermark == 4  # stored once

    assert await _produce(wire, "t", record_batch(pid, epoch, 3, [b"d"])) == (0, 4)
    assert await _produce(wire, "t", record_batch(pid, epoch, 9, [b"z"])) == (45, -1)  # a gap
    assert await _produce(wire, "t", record_batch(pid, epoch, 0, [b"a", b"b", b"c"])) == (46, -1)
    assert kafka.engine.offsets("t").high_watermark == 5
    result = await kafka.engine.fetch("t", "earliest", isolation="read_uncommitted")
    assert [e.value for e in result.entries] == ["from elsewhere", b"a", b"b", b"c", b"d"]
    # a producer the engine holds no state of must start at sequence 0
    assert await _produce(wire, "t", record_batch(pid + 1, 0, 5, [b"y"])) == (
        59,
        -1,
    )  # UNKNOWN_PRODUCER_ID
    await wire.close()


async def test_corrupt_records_are_refused_and_nothing_is_stored(kafka: Kafka) -> None:
    await kafka.engine.create_topic("t")
    wire = await KafkaWire.open(kafka.listener.port)
    good = bytearray(record_batch(-1, -1, -1, [b"a"]))
    good[-1] ^= 0xFF  # the CRC no longer matches
    assert await _produce(wire, "t", bytes(good)) == (2, -1)  # CORRUPT_MESSAGE
    assert await _produce(wire, "missing", record_batch(-1, -1, -1, [b"a"])) == (3, -1)
    assert kafka.engine.offsets("t").high_watermark == 0
    await wire.close()


async def test_pipelined_produce_requests_keep_their_order(
    kafka: Kafka,
) -> None:
    """Ten requests sent back to back on one connection (as librdkafka's in-flight
    requests): each starts once the previous one's records have offsets, so the sequence
    numbers never see a gap, and the answers come back in order."""
    await kafka.engine.create_topic("t")
    wire = await KafkaWire.open(kafka.listener.port)
    init = await wire.call(
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1),
        InitProducerIdResponse,
        1,
    )
    pid, epoch = init.producer_id, init.producer_epoch
    frames = []
    for i in range(10):
        request = ProduceRequest(
            transactional_id=None,
            acks=-1,
            timeout_ms=5000,
            topic_data=[
                ProduceRequest.TopicProduceData(
                    name="t",
                    partition_data=[
                        ProduceRequest.TopicProduceData.PartitionProduceData(
                            index=0, records=record_batch(pid, epoch, 2 * i, [b"x", b"y"])
                        )
                    ],
                )
            ],
        )
        request.API_VERSION = 8
        request.with_header(correlation_id=100 + i, client_id="pipelined")
        frames.append(bytes(request.encode(header=True, framed=True)))
    flushes = _flushes(kafka)
    await wire.send_raw(b"".join(frames))
    answers = []
    for _ in range(10):
        frame = await wire.read_frame()
        answer = ProduceResponse.decode(frame[4:], version=8)
        part = answer.responses[0].partition_responses[0]
        answers.append((int.from_bytes(frame[:4], "big"), part.error_code, part.base_offset))
    assert answers == [(100 + i, 0, 2 * i) for i in range(10)]
    assert kafka.engine.offsets("t").high_watermark == 20
    # never more than one flush per request. (Whether pipelined requests share a flush
    # depends on when each flush ends: a fast disk can end each before the next request
    # is read, so sharing is not asserted; it failed a clean-clone run that way.)
    assert _flushes(kafka) - flushes <= 10
    await wire.close()


def _flushes(kafka: Kafka) -> float:
    [metric] = kafka.engine.metrics.flush_duration.collect()
    return next(s.value for s in metric.samples if s.name.endswith("_count"))
