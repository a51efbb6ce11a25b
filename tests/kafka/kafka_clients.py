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


async def transform_exactly_once(
    client: str, bootstrap: str, source: str, sink: str, *, die_after: int | None
) -> None:
    """A consume-transform-produce worker of group ``eos`` and transactional id
    ``eos-worker``: batches of up to 3 from ``source``, upper-cased into ``sink``, the
    input offsets sent to each transaction. With ``die_after``, it stops after that many
    committed batches in the middle of the next transaction (records produced and offsets
    sent, never committed) and drops its clients; without, it ends once ``source`` is
    drained."""
    if client == "aiokafka":
        await _aiokafka_transform(bootstrap, source, sink, die_after)
    elif client == "kafka-python":
        await asyncio.to_thread(_kafka_python_transform, bootstrap, source, sink, die_after)
    else:
        await asyncio.to_thread(_confluent_transform, bootstrap, source, sink, die_after)


_GROUP = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
}


def _confluent_transform(bootstrap: str, source: str, sink: str, die_after: int | None) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos",
            "heartbeat.interval.ms": 200,
            "fetch.wait.max.ms": 100,
            **_GROUP,
        }
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "eos-worker", "linger.ms": 1}
    )
    producer.init_transactions(TIMEOUT)
    consumer.subscribe([source])
    done = 0
    try:
        while True:
            batch: list[tuple[int, bytes]] = []
            idle = time.monotonic() + 3
            while len(batch) < 3 and time.monotonic() < idle:
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    batch.append((message.offset(), message.value()))
            if not batch:
                return
            producer.begin_transaction()
            for _, value in batch:
                producer.produce(sink, value=value.upper())
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, batch[-1][0] + 1)],
                consumer.consumer_group_metadata(),
                TIMEOUT,
            )
            if die_after is not None and done == die_after:
                assert producer.flush(TIMEOUT) == 0
                return  # "killed": never committed
            producer.commit_transaction(TIMEOUT)
            done += 1
    finally:
        consumer.close()


def _kafka_python_transform(bootstrap: str, source: str, sink: str, die_after: int | None) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id="eos",
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=200,
        fetch_max_wait_ms=100,
        request_timeout_ms=10_000,
    )
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id="eos-worker", request_timeout_ms=10_000
    )
    producer.init_transactions()
    done = 0
    try:
        while True:
            batch: list[tuple[int, bytes]] = []
            idle = time.monotonic() + 3
            while len(batch) < 3 and time.monotonic() < idle:
                for records in consumer.poll(timeout_ms=200, max_records=3 - len(batch)).values():
                    batch += [(r.offset, r.value) for r in records]
            if not batch:
                return
            producer.begin_transaction()
            for _, value in batch:
                producer.send(sink, value.upper())
            producer.send_offsets_to_transaction(
                {TopicPartition(source, 0): OffsetAndMetadata(batch[-1][0] + 1, "", -1)},
                "eos",
            )
            if die_after is not None and done == die_after:
                producer.flush(timeout=TIMEOUT)
                return  # "killed": never committed
            producer.commit_transaction()
            done += 1
    finally:
        consumer.close()
        producer.close(timeout=TIMEOUT)  # (it closes; it does not end the transaction)


async def _aiokafka_transform(
    bootstrap: str, source: str, sink: str, die_after: int | None
) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id="eos",
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        heartbeat_interval_ms=200,
        fetch_max_wait_ms=100,
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="eos-worker")
    await consumer.start()
    await producer.start()
    done = 0
    try:
        while True:
            batch: list[tuple[int, bytes]] = []
            idle = time.monotonic() + 3
            while len(batch) < 3 and time.monotonic() < idle:
                fetched = await consumer.getmany(timeout_ms=200, max_records=3 - len(batch))
                for records in fetched.values():
                    batch += [(r.offset, r.value) for r in records]
            if not batch:
                return
            await producer.begin_transaction()
            for _, value in batch:
                await producer.send_and_wait(sink, value.upper())
            await producer.send_offsets_to_transaction(
                {TopicPartition(source, 0): batch[-1][0] + 1}, "eos"
            )
            if die_after is not None and done == die_after:
                return  # "killed": never committed (stop() closes, it does not abort)
            await producer.commit_transaction()
            done += 1
    finally:
        await consumer.stop()
        await producer.stop()
