"""Producer state expires, as Kafka's does: an idempotent producer idle past
``producer_expiry`` (``producer.id.expiration.ms``) is forgotten, and a real client that
comes back is told UNKNOWN_PRODUCER_ID and starts over, losing and duplicating nothing; a
transactional id idle past ``transactional_id_expiry`` (``transactional.id.expiration.ms``)
is forgotten, so a zombie of it is refused and its next InitProducerId starts at epoch 0."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from kafka.protocol.producer import (
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from kafka_clients import consume
from kafka_support import KafkaWire, serving
from support import wait_until

from txnstream.api import EngineConfig

pytestmark = pytest.mark.timeout(90)


async def test_an_expired_idempotent_producer_starts_over_and_nothing_is_lost_or_doubled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from confluent_kafka import Producer

    caplog.set_level(logging.INFO, logger="txnstream.engine")
    async with serving(tmp_path / "data", EngineConfig(producer_expiry=0.5)) as kafka:
        await kafka.engine.create_topic("t")
        producer = Producer(
            {"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "linger.ms": 1}
        )

        def produce(first: int) -> None:
            for i in range(first, first + 5):
                producer.produce("t", value=f"m{i}".encode())
            assert producer.flush(30) == 0

        await asyncio.to_thread(produce, 0)

        async def forgotten() -> bool:
            return "forgot 1 idempotent producer(s)" in caplog.text

        await wait_until(forgotten, 30, "the producer's state to expire", interval=0.05)
        # its next batch (sequence 5) finds no state: UNKNOWN_PRODUCER_ID, and librdkafka
        # takes a new producer id and sends it again from sequence 0
        await asyncio.to_thread(produce, 5)
        assert (await kafka.engine.stats("t"))["entries"] == 10
        expected = [f"m{i}".encode() for i in range(10)]
        got = await consume("confluent-kafka", kafka.bootstrap, "t", "read_uncommitted", b"m9")
        assert got == expected


async def _init(wire: KafkaWire, transactional_id: str) -> tuple[int, int, int]:
    answer = await wire.call(
        InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=10_000),
        InitProducerIdResponse,
        1,
    )
    return answer.error_code, answer.producer_id, answer.producer_epoch


async def test_an_idle_transactional_id_is_forgotten_and_starts_over_at_epoch_0(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="txnstream.kafka")
    async with serving(tmp_path / "data", EngineConfig(transactional_id_expiry=0.5)) as kafka:
        wire = await KafkaWire.open(kafka.listener.port)
        error, pid, epoch = await _init(wire, "billing")
        assert (error, epoch) == (0, 0)  # a new id: its durable epoch starts at 0
        assert await _init(wire, "billing") == (0, pid, (epoch + 1) % 32767)  # a new one

        async def forgotten() -> bool:
            return "forgot 1 transactional id(s)" in caplog.text

        await wait_until(forgotten, 30, "the transactional id to expire", interval=0.05)
        zombie = await wire.call(
            EndTxnRequest(
                transactional_id="billing",
                producer_id=pid,
                producer_epoch=(epoch + 1) % 32767,
                committed=True,
            ),
            EndTxnResponse,
            1,
        )
        assert zombie.error_code == 49  # INVALID_PRODUCER_ID_MAPPING: unknown now
        assert await _init(wire, "billing") == (0, pid, 0)  # started over
        await wire.close()


async def _bump(wire: KafkaWire, transactional_id: str, pid: int, epoch: int) -> tuple[int, int]:
    """InitProducerId v3 (KIP-360): a producer asking to bump its own epoch."""
    answer = await wire.call(
        InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout_ms=10_000,
            producer_id=pid,
            producer_epoch=epoch,
        ),
        InitProducerIdResponse,
        3,
    )
    return answer.error_code, answer.producer_epoch


def _after(epoch: int, steps: int) -> int:
    """The epoch ``steps`` InitProducerIds after ``epoch`` (int16, wrapping)."""
    return (epoch + steps) % 32767


async def test_init_producer_id_v3_bumps_the_current_epoch_and_refuses_an_older_one(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data") as kafka:
        wire = await KafkaWire.open(kafka.listener.port)
        _, pid, first = await _init(wire, "billing")
        assert first == 0
        one, two, three = (_after(first, n) for n in (1, 2, 3))
        assert await _init(wire, "billing") == (0, pid, one)
        assert await _bump(wire, "billing", pid, one) == (0, two)  # its own epoch: bumped
        assert (await _bump(wire, "billing", pid, one))[0] == 47  # INVALID_PRODUCER_EPOCH
        assert (await _bump(wire, "billing", pid + 1, two))[0] == 49  # not its producer id
        assert await _bump(wire, "billing", -1, -1) == (0, three)  # a fresh start, as before v3
        await wire.close()


async def test_a_bump_of_a_forgotten_transactional_id_goes_past_the_clients_epoch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After an expiry the client's epoch is not known here: its bump must still give it a
    newer one (librdkafka requires it)."""
    caplog.set_level(logging.INFO, logger="txnstream.kafka")
    async with serving(tmp_path / "data", EngineConfig(transactional_id_expiry=0.5)) as kafka:
        wire = await KafkaWire.open(kafka.listener.port)
        _, pid, first = await _init(wire, "billing")
        for n in (1, 2, 3):
            assert await _init(wire, "billing") == (0, pid, _after(first, n))

        async def forgotten() -> bool:
            return "forgot 1 transactional id(s)" in caplog.text

        await wait_until(forgotten, 30, "the transactional id to expire", interval=0.05)
        last = _after(first, 3)
        assert await _bump(wire, "billing", pid, last) == (0, _after(last, 1))
        await wire.close()
