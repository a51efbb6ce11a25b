"""Kafka offsets over the ledgers: contiguous from 0, markers included, durable across
rollover, restarts (clean and crashed), retention, offload and the schema migration."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from support import store_sql

from txnstream.api import Engine, EngineConfig, Position
from txnstream.ledger import DB_FILE

pytestmark = pytest.mark.timeout(60)

SMALL = EngineConfig(ledger_max_entries=3)


async def _all_offsets(engine: Engine, topic: str) -> list[tuple[int, str]]:
    """(offset, kind) of every retained entry, read back through the raw fetch."""
    result = await engine.fetch(topic, "earliest", max=1000, isolation="read_uncommitted")
    return [(engine.offset_of(topic, e.position), e.kind) for e in result.entries]


async def test_every_entry_takes_the_next_offset_markers_and_rollovers_included(
    data_dir: Path,
) -> None:
    async with Engine.open(data_dir, SMALL) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", ["a", "b", "c", "d"])  # ledger 0 full, then ledger 1
        async with engine.transaction() as txn:
            await txn.send("t", "e")
            await txn.send("t", "f")
        txn = await engine.begin()
        await txn.send("t", "g")
        await txn.abort()
        offsets = await _all_offsets(engine, "t")
        assert [o for o, _ in offsets] == list(range(9))
        assert [k for _, k in offsets] == ["data"] * 6 + ["commit", "data", "abort"]
        assert engine.offsets("t").high_watermark == 9
        assert engine.offsets("t").last_stable == 9
        for offset in range(9):  # position_at is offset_of's inverse
            position = engine.position_at("t", offset)
            assert position is not None
            assert engine.offset_of("t", position) == offset
        assert engine.position_at("t", 9) is None


async def test_offsets_continue_across_clean_and_crashed_restarts(data_dir: Path) -> None:
    async with Engine.open(data_dir, SMALL) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", ["a", "b"])
    # a new ledger starts on every open: the offsets go on where they stopped
    async with Engine.open(data_dir, SMALL) as engine:
        [position] = (await engine.produce_values("t", ["c"])).positions
        assert position.ledger_id == 1
        assert engine.offset_of("t", position) == 2
    # the last ledger left open, as by a crash
    store_sql(data_dir, "UPDATE ledgers SET entries = NULL, bytes = NULL WHERE ledger_id = 1")
    async with Engine.open(data_dir, SMALL) as engine:
        [position] = (await engine.produce_values("t", ["d"])).positions
        assert engine.offset_of("t", position) == 3
        assert [o for o, _ in await _all_offsets(engine, "t")] == [0, 1, 2, 3]
    # an empty ledger dropped on open keeps no offset for itself but loses none either
    async with Engine.open(data_dir, SMALL) as engine:
        pass
    async with Engine.open(data_dir, SMALL) as engine:
        [position] = (await engine.produce_values("t", ["e"])).positions
        assert engine.offset_of("t", position) == 4


async def test_retention_moves_the_log_start_and_keeps_the_other_offsets(
    data_dir: Path,
) -> None:
    async with Engine.open(data_dir, SMALL) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", [f"m{i}" for i in range(7)])  # ledgers 0, 1 full; 2 open
        sub = await engine.subscribe("t", "s")
        msgs = await sub.receive(max=7, timeout=5)
        await sub.ack(msgs[-1].position, cumulative=True)
        await engine.set_retention("t", max_bytes=1)
        assert await engine.apply_retention("t") == 2
        assert engine.offsets("t").log_start == 6
        assert await _all_offsets(engine, "t") == [(6, "data")]
    async with Engine.open(data_dir, SMALL) as engine:  # and after a restart
        assert engine.offsets("t").log_start == 6
        [position] = (await engine.produce_values("t", ["x"])).positions
        assert engine.offset_of("t", position) == 7


@pytest.mark.sqlite_only("migrates a SQLite file an older txnstream wrote")
async def test_a_version_4_data_directory_gets_its_offsets_on_migration(data_dir: Path) -> None:
    async with Engine.open(data_dir, SMALL) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", [f"m{i}" for i in range(5)])
        before = await _all_offsets(engine, "t")
    with sqlite3.connect(data_dir / DB_FILE) as db:  # as an older txnstream left it
        db.execute("ALTER TABLE ledgers DROP COLUMN base_offset")
        # (and what schemas 6 and 7 added: partitioned topics, consumer policies)
        db.execute("DROP TABLE partitioned_topics")
        db.execute("ALTER TABLE topics DROP COLUMN ttl_ms")
        db.execute("ALTER TABLE subscriptions DROP COLUMN policy")
        db.execute("DROP TABLE redeliveries")
        db.execute("DROP TABLE delivery_times")
        db.execute("PRAGMA user_version = 4")
    db.close()
    async with Engine.open(data_dir, SMALL) as engine:
        assert await _all_offsets(engine, "t") == before == [(i, "data") for i in range(5)]
        [position] = (await engine.produce_values("t", ["y"])).positions
        assert engine.offset_of("t", position) == 5


async def test_offsets_survive_offload(tmp_path: Path) -> None:
    config = EngineConfig(ledger_max_entries=3, offload_url=(tmp_path / "remote").as_uri())
    async with Engine.open(tmp_path / "data", config) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", [f"m{i}" for i in range(7)])
        before = await _all_offsets(engine, "t")
        await engine.set_offload("t", after=0, min_local_ledgers=1)
        assert await engine.offload("t") == [0, 1]
        assert await _all_offsets(engine, "t") == before
    async with Engine.open(tmp_path / "data", config) as engine:
        assert await _all_offsets(engine, "t") == before
        assert engine.position_at("t", 4) == Position(1, 1)


async def test_list_offsets_by_time_finds_the_first_entry_stored_at_or_after_it(
    tmp_path: Path,
) -> None:
    from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
    from kafka_support import KafkaWire

    from txnstream.api.kafka import KafkaListener

    async with Engine.open(tmp_path / "data", SMALL) as engine:
        await engine.create_topic("t")
        for i in range(7):  # across ledgers of 3
            await engine.send("t", f"m{i}")
        entries = (await engine.fetch("t", "earliest")).entries
        times = [int(e.publish_time.timestamp() * 1000) for e in entries]
        listener = KafkaListener(engine, "127.0.0.1", 0)
        await listener.start()
        wire = await KafkaWire.open(listener.port)
        try:

            async def at(timestamp: int) -> tuple[int, int]:
                request = ListOffsetsRequest(
                    replica_id=-1,
                    isolation_level=1,
                    topics=[
                        ListOffsetsRequest.ListOffsetsTopic(
                            name="t",
                            partitions=[
                                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                                    partition_index=0, current_leader_epoch=-1, timestamp=timestamp
                                )
                            ],
                        )
                    ],
                )
                answer = await wire.call(request, ListOffsetsResponse, 5)
                part = answer.topics[0].partitions[0]
                assert part.error_code == 0
                return int(part.offset), int(part.timestamp)

            assert await at(0) == (0, times[0])
            for wanted in sorted(set(times)):
                first = next(i for i, t in enumerate(times) if t >= wanted)
                assert await at(wanted) == (first, times[first])
            assert await at(times[-1] + 1) == (-1, -1)  # nothing stored that late
        finally:
            await wire.close()
            await listener.stop()
