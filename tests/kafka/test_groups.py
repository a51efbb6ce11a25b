"""Consumer groups: membership and rebalances, durable committed offsets (the group's
subscription, shown as lag in stats), and the exactly-once consume-transform-produce
loop (AddOffsetsToTxn + TxnOffsetCommit: the offsets commit with the transaction)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka_clients import CLIENTS, TIMEOUT, consume, transform_exactly_once
from kafka_support import Kafka, KafkaWire

from txnstream.api import Engine
from txnstream.api.kafka import KafkaListener

pytestmark = pytest.mark.timeout(120)


def _group_consumer(bootstrap: str, group: str, **extra: Any) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            "fetch.wait.max.ms": 100,
            **extra,
        }
    )


def _take(consumer: Any, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while len(values) < count:
        assert time.monotonic() < deadline, f"timed out; got {values}"
        message = consumer.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            values.append(message.value())
    return values


async def test_a_group_resumes_from_its_committed_offset_shown_as_lag(kafka: Kafka) -> None:
    engine = kafka.engine
    await engine.create_topic("orders")
    await engine.send_many("orders", [b"a", b"b", b"c", b"d"])

    def first_member() -> list[bytes]:
        consumer = _group_consumer(kafka.bootstrap, "billing")
        consumer.subscribe(["orders"])
        try:
            taken = _take(consumer, 3)
            consumer.commit(asynchronous=False)
            return taken
        finally:
            consumer.close()

    assert await asyncio.to_thread(first_member) == [b"a", b"b", b"c"]
    assert engine.committed_offset("orders", "billing") == 3
    subscription = (await engine.stats("orders"))["subscriptions"]["billing"]
    assert subscription["backlog"] == 1  # the group's lag

    def second_member() -> list[bytes]:
        consumer = _group_consumer(kafka.bootstrap, "billing")
        consumer.subscribe(["orders"])
        try:
            return _take(consumer, 1)
        finally:
            consumer.close()

    assert await asyncio.to_thread(second_member) == [b"d"]


async def test_committed_offsets_survive_a_restart(tmp_path: Path) -> None:
    async def offset_fetch(port: int) -> int:
        wire = await KafkaWire.open(port)
        request = OffsetFetchRequest(
            group_id="billing",
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
        )
        answer = await wire.call(request, OffsetFetchResponse, 5)
        await wire.close()
        return int(answer.topics[0].partitions[0].committed_offset)

    for round_ in range(2):
        async with Engine.open(tmp_path / "data") as engine:
            listener = KafkaListener(engine, "127.0.0.1", 0)
            await listener.start()
            try:
                if round_ == 0:
                    await engine.create_topic("t")
                    await engine.send_many("t", [b"a", b"b", b"c"])
                    assert await offset_fetch(listener.port) == -1  # nothing committed yet
                    bootstrap = f"127.0.0.1:{listener.port}"

                    def commit(bootstrap: str = bootstrap) -> None:
                        from confluent_kafka import Consumer, TopicPartition

                        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing"})
                        consumer.commit(offsets=[TopicPartition("t", 0, 2)], asynchronous=False)
                        consumer.close()

                    await asyncio.to_thread(commit)
                assert await offset_fetch(listener.port) == 2
            finally:
                await listener.stop()


async def _join(wire: KafkaWire, member_id: str, session_ms: int) -> Any:
    request = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")],
    )
    return await wire.call(request, JoinGroupResponse, 5)


async def test_a_silent_member_is_expired_and_the_group_rebalances(kafka: Kafka) -> None:
    silent = await KafkaWire.open(kafka.listener.port)
    joined = await _join(silent, "", 500)
    assert joined.error_code == 0
    assert joined.leader == joined.member_id
    assert [m.member_id for m in joined.members] == [joined.member_id]
    sync = SyncGroupRequest(
        group_id="g",
        generation_id=joined.generation_id,
        member_id=joined.member_id,
        group_instance_id=None,
        assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=joined.member_id, assignment=b"all"
            )
        ],
    )
    synced = await silent.call(sync, SyncGroupResponse, 3)
    assert (synced.error_code, synced.assignment) == (0, b"all")

    other = await KafkaWire.open(kafka.listener.port)
    started = time.monotonic()
    second = await _join(other, "", 10_000)  # waits for the silent member, then drops it
    assert second.error_code == 0
    assert time.monotonic() - started < 5
    assert second.generation_id == joined.generation_id + 1
    assert second.leader == second.member_id
    assert [m.member_id for m in second.members] == [second.member_id]
    beat = HeartbeatRequest(
        group_id="g", generation_id=joined.generation_id, member_id=joined.member_id
    )
    answer = await silent.call(beat, HeartbeatResponse, 3)
    assert answer.error_code == 25  # UNKNOWN_MEMBER_ID: it has to join again
    await silent.close()
    await other.close()


@pytest.mark.parametrize("client", CLIENTS)
async def test_consume_transform_produce_is_exactly_once_across_a_crash(
    kafka: Kafka, client: str
) -> None:
    """Each input is transformed into exactly one output, committed with its offset
    (send_offsets_to_transaction), though the first worker dies mid-transaction: its
    successor fences it (its output and offsets never commit) and takes over."""
    engine = kafka.engine
    for topic in ("in", "out"):
        await engine.create_topic(topic)
    inputs = [f"n{i}".encode() for i in range(12)]
    await engine.send_many("in", inputs)
    await transform_exactly_once(client, kafka.bootstrap, "in", "out", die_after=2)
    await transform_exactly_once(client, kafka.bootstrap, "in", "out", die_after=None)
    out = await consume("confluent-kafka", kafka.bootstrap, "out", "read_committed", b"N11")
    assert out == [v.upper() for v in inputs]
    assert engine.committed_offset("in", "eos") == 12
    assert not await engine.transactions(state="open")
