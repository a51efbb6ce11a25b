"""Transactional ids: a new producer with the same id fences the old one, whose open
transaction is aborted in the engine's coordinator (one transaction model for both)."""

from __future__ import annotations

import asyncio

import pytest
from kafka_clients import consume
from kafka_support import Kafka, drop_refused

pytestmark = pytest.mark.timeout(90)


def _producer(bootstrap: str) -> object:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "billing-worker",
            "linger.ms": 1,
            "transaction.timeout.ms": 30_000,
        }
    )


async def test_a_new_epoch_fences_the_zombie_and_aborts_its_transaction(kafka: Kafka) -> None:
    from confluent_kafka import KafkaException, Producer

    engine = kafka.engine
    await engine.create_topic("t")

    def zombie_starts() -> Producer:
        zombie = _producer(kafka.bootstrap)
        assert isinstance(zombie, Producer)
        zombie.init_transactions(20)
        zombie.begin_transaction()
        zombie.produce("t", value=b"zombie")
        assert zombie.flush(20) == 0
        return zombie

    zombie = await asyncio.to_thread(zombie_starts)
    [open_txn] = await engine.transactions(state="open")  # one transaction in our coordinator
    assert open_txn.label == "kafka:billing-worker"
    assert open_txn.topics == ["t"]
    assert open_txn.timeout_ms == 30_000

    def successor_commits() -> None:
        successor = _producer(kafka.bootstrap)
        assert isinstance(successor, Producer)
        successor.init_transactions(20)
        successor.begin_transaction()
        successor.produce("t", value=b"fresh")
        assert successor.flush(20) == 0
        successor.commit_transaction(20)

    await asyncio.to_thread(successor_commits)
    zombie_txn = next(t for t in await engine.transactions() if t.txn == open_txn.txn)
    assert zombie_txn.state == "aborted"

    def zombie_commits(zombie: Producer) -> None:
        zombie.produce("t", value=b"late")
        zombie.commit_transaction(20)

    with pytest.raises(KafkaException) as refused:
        await asyncio.to_thread(zombie_commits, zombie)
    error = refused.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    drop_refused(zombie)
    del zombie, refused
    assert await consume("confluent-kafka", kafka.bootstrap, "t", "read_committed", b"fresh") == [
        b"fresh"
    ]
