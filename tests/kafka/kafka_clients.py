"""The three Kafka clients behind one small interface (each bounded by short timeouts).

``produce_transactions(client, bootstrap, transactional_id, plan)`` runs ``plan``: a list
of ``(commit, [(topic, value), ...])``, each one transaction, committed or aborted after
its records reached the broker. ``consume(client, bootstrap, topic, isolation, until)``
reads partition 0 from the start until a value equal to ``until`` arrives; it returns
every value in order.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

Plan = Sequence[tuple[bool, Sequence[tuple[str, bytes]]]]
CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")
TIMEOUT = 20.0


async def produce_transactions(client: str, bootstrap: str, txn_id: str, plan: Plan) -> None:
    if client == "aiokafka":
        await _aiokafka_produce(bootstrap, txn_id, plan)
    elif client == "kafka-python":
        await asyncio.to_thread(_kafka_python_produce, bootstrap, txn_id, plan)
    else:
        await asyncio.to_thread(_confluent_produce, bootstrap, txn_id, plan)


async def consume(
    client: str, bootstrap: str, topic: str, isolation: str, until: bytes
) -> list[bytes]:
    if client == "aiokafka":
        return await _aiokafka_consume(bootstrap, topic, isolation, until)
    if client == "kafka-python":
        return await asyncio.to_thread(_kafka_python_consume, bootstrap, topic, isolation, until)
    return await asyncio.to_thread(_confluent_consume, bootstrap, topic, isolation, until)


def _confluent_produce(bootstrap: str, txn_id: str, plan: Plan) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "message.timeout.ms": int(TIMEOUT * 1000),
        }
    )
    producer.init_transactions(TIMEOUT)
    for commit, records in plan:
        producer.begin_transaction()
        for topic, value in records:
            producer.produce(topic, value=value)
        assert producer.flush(TIMEOUT) == 0  # stored before the decision
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)


def _confluent_consume(bootstrap: str, topic: str, isolation: str, until: bytes) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",  # assign() only: no group calls
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while until not in values:
            assert time.monotonic() < deadline, f"timed out; got {values}"
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is None, message.error()
            values.append(message.value())
        return values
    finally:
        consumer.close()


def _kafka_python_produce(bootstrap: str, txn_id: str, plan: Plan) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=txn_id, request_timeout_ms=10_000
    )
    try:
        producer.init_transactions()
        for commit, records in plan:
            producer.begin_transaction()
            for topic, value in records:
                producer.send(topic, value)
            producer.flush(timeout=TIMEOUT)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(timeout=TIMEOUT)


def _kafka_python_consume(bootstrap: str, topic: str, isolation: str, until: bytes) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        request_timeout_ms=10_000,
        fetch_max_wait_ms=100,
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while until not in values:
            assert time.monotonic() < deadline, f"timed out; got {values}"
            for records in consumer.poll(timeout_ms=200).values():
                values += [r.value for r in records]
        return values
    finally:
        consumer.close()


async def _aiokafka_produce(bootstrap: str, txn_id: str, plan: Plan) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=txn_id, request_timeout_ms=10_000
    )
    await producer.start()
    try:
        for commit, records in plan:
            await producer.begin_transaction()
            for topic, value in records:
                await producer.send_and_wait(topic, value)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()


async def _aiokafka_consume(
    bootstrap: str, topic: str, isolation: str, until: bytes
) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        request_timeout_ms=10_000,
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while until not in values:
            assert time.monotonic() < deadline, f"timed out; got {values}"
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values += [r.value for r in records]
        return values
    finally:
        await consumer.stop()
