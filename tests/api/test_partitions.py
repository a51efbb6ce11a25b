"""Partitioned topics in the embedded engine (issue 29): ``create_topic(name,
partitions=N)``, routing by key with Kafka's partitioner, the subscription fan-out with
``L:E:P`` positions, transactions across partitions, durability of the partition count,
and deletion."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from txnstream.api import (
    ConflictError,
    Engine,
    InvalidArgumentError,
    OutgoingMessage,
    PartitionMessage,
    PartitionPosition,
    TopicNotFoundError,
    partition_for_key,
)
from txnstream.ledger import DB_FILE
from txnstream.ledger._schema import SCHEMA_VERSION

pytestmark = pytest.mark.timeout(60)


def test_the_partitioner_is_kafkas() -> None:
    """``toPositive(murmur2(utf8(key))) % n`` with the Java client's own test vectors
    (``org.apache.kafka.common.utils.UtilsTest.testMurmur2``)."""
    vectors = {
        "21": -973932308,
        "foobar": -790332482,
        "a-little-bit-long-string": -985981536,
        "a-little-bit-longer-string": -1486304829,
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        "abc": 479470107,
    }
    for key, hashed in vectors.items():
        for n in (1, 2, 3, 7, 12, 1024):
            assert partition_for_key(key, n) == (hashed & 0x7FFFFFFF) % n, (key, n)
    assert partition_for_key("é", 1000) == partition_for_key("\u00e9", 1000)  # UTF-8 bytes


async def test_produce_routes_by_key_and_round_robin(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        assert await engine.create_topic("orders", partitions=4) is True
        keys = [f"customer-{i}" for i in range(20)]
        result = await engine.produce("orders", [OutgoingMessage(k, key=k) for k in keys])
        assert result.topics == [f"orders-partition-{partition_for_key(k, 4)}" for k in keys]
        # each position is in its partition, holding that key
        for key, topic, position in zip(keys, result.topics, result.positions, strict=True):
            fetched = await engine.fetch(topic, position, max=1)
            assert fetched.entries[0].key == key
        # without a key: round-robin over the partitions
        plain = await engine.produce_values("orders", list(range(8)))
        assert plain.topics is not None
        assert sorted(plain.topics) == sorted(f"orders-partition-{i}" for i in [*range(4)] * 2)
        # send, send_batch and a transaction route the same way
        await engine.send("orders", "x", key="customer-3")
        positions = await engine.send_batch([("orders", OutgoingMessage("y", "customer-3"))])
        assert len(positions) == 1
        async with engine.transaction() as txn:
            await txn.send("orders", "z", key="customer-3")
        home = f"orders-partition-{partition_for_key('customer-3', 4)}"
        fetched = await engine.fetch(home, max=100)
        assert [e.value for e in fetched.entries if e.key == "customer-3"] == [
            "customer-3",
            "x",
            "y",
            "z",
        ]
        with pytest.raises(InvalidArgumentError):  # sequences are per partition
            await engine.produce("orders", [OutgoingMessage(1)], producer="p", sequence=0)


async def test_create_conflicts_and_limits(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        assert await engine.create_topic("p", partitions=2) is True
        assert await engine.create_topic("p", partitions=2) is False
        with pytest.raises(ConflictError):
            await engine.create_topic("p", partitions=3)
        with pytest.raises(ConflictError):
            await engine.create_topic("p")
        await engine.create_topic("plain")
        with pytest.raises(ConflictError):
            await engine.create_topic("plain", partitions=2)
        await engine.create_topic("q-partition-1")
        with pytest.raises(ConflictError):  # a partition's name is taken
            await engine.create_topic("q", partitions=2)
        for bad in (0, -1, 1025, True, "2", 1.0):
            with pytest.raises(InvalidArgumentError):
                await engine.create_topic("r", partitions=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):  # its partitions' names are too long
            await engine.create_topic("n" * 195, partitions=2)
        assert await engine.partitioned_topics() == {"p": 2}
        with pytest.raises(ConflictError):
            await engine.delete_topic("p-partition-0")


async def test_a_subscription_on_the_parent_covers_every_partition(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("events", partitions=3)
        sub = await engine.subscribe("events", "audit")
        sent = await engine.produce("events", [OutgoingMessage(i, key=f"k{i}") for i in range(30)])
        got = await sub.receive(max=100, timeout=2)
        while len(got) < 30:
            more = await sub.receive(max=100, timeout=2)
            assert more
            got.extend(more)
        assert sorted(m.value for m in got) == list(range(30))
        for message in got:
            assert isinstance(message, PartitionMessage)
            assert isinstance(message.position, PartitionPosition)
            assert message.topic == f"events-partition-{message.partition}"
            assert sent.topics is not None
            assert sent.topics[message.value] == message.topic
            assert str(message.position) == f"{sent.positions[message.value]}:{message.partition}"
        # nack one, ack the others (as the "L:E:P" strings HTTP carries, for half)
        await sub.nack([got[0].position])
        await sub.ack([str(m.position) for m in got[1:15]] + [m.position for m in got[15:]])
        again = await sub.receive(max=10, timeout=2)
        assert [(m.position, m.redelivery_count) for m in again] == [(got[0].position, 1)]
        with pytest.raises(InvalidArgumentError):  # a plain position names no partition
            await sub.ack(["0:0"])
        with pytest.raises(InvalidArgumentError):
            await sub.ack([PartitionPosition(0, 0, 3)])  # no partition 3
        # a long poll wakes for a message in any partition
        waiting = sub.receive(max=10, timeout=5)
        late = await engine.produce("events", [OutgoingMessage("late", key="k2")])
        assert [m.value for m in await waiting] == ["late"]
        assert late.topics is not None
        # seek every partition back to the start
        await sub.seek("earliest")
        replay = await sub.receive(max=100, timeout=2)
        while len(replay) < 31:
            more = await sub.receive(max=100, timeout=2)
            assert more
            replay.extend(more)
        stats = await engine.stats("events")
        assert stats["subscriptions"]["audit"]["unacked"] == 31
        await engine.delete_subscription("events", "audit")
        assert (await engine.stats("events"))["subscriptions"] == {}


async def test_the_partition_count_survives_a_restart_and_delete_takes_all(
    data_dir: Path,
) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("clicks", partitions=3)
        await engine.create_topic("other")
        await engine.produce("clicks", [OutgoingMessage(1, key="a")])
    async with Engine.open(data_dir) as engine:
        assert await engine.partitioned_topics() == {"clicks": 3}
        stats = await engine.stats("clicks")
        assert stats["partition_count"] == 3
        assert stats["entries"] == 1
        assert [p["topic"] for p in stats["partitions"]] == [
            f"clicks-partition-{i}" for i in range(3)
        ]
        home = partition_for_key("a", 3)
        assert stats["partitions"][home]["offsets"] == {
            "log_start": 0,
            "high_watermark": 1,
            "last_stable": 1,
        }
        await engine.delete_topic("clicks")
        assert await engine.list_topics() == ["other"]
    async with Engine.open(data_dir) as engine:
        assert await engine.partitioned_topics() == {}
        assert await engine.list_topics() == ["other"]
        with pytest.raises(TopicNotFoundError):
            await engine.stats("clicks-partition-0")
        assert await engine.create_topic("clicks", partitions=2) is True  # free again


@pytest.mark.sqlite_only("migrates a SQLite file an older txnstream wrote")
async def test_a_version_5_data_directory_migrates(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("old")
        await engine.send("old", 1)
    with sqlite3.connect(data_dir / DB_FILE) as db:  # as the previous txnstream left it
        db.execute("DROP TABLE partitioned_topics")
        # (and what schema 7 added: consumer policies)
        db.execute("ALTER TABLE topics DROP COLUMN ttl_ms")
        db.execute("ALTER TABLE subscriptions DROP COLUMN policy")
        db.execute("DROP TABLE redeliveries")
        db.execute("DROP TABLE delivery_times")
        db.execute("PRAGMA user_version = 5")
    db.close()
    async with Engine.open(data_dir) as engine:
        assert await engine.list_topics() == ["old"]
        assert await engine.create_topic("new", partitions=2) is True
    async with Engine.open(data_dir) as engine:
        assert await engine.partitioned_topics() == {"new": 2}
    with sqlite3.connect(data_dir / DB_FILE) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    db.close()
