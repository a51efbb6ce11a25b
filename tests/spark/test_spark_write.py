"""Exactly-once batch writes: task retries (raise, killed worker), failing jobs, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import spark_faults
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_faults import FaultyDataSource
from spark_support import LiveServer, engine_view, run_engine

from txnstream.api import Engine

pytestmark = pytest.mark.timeout(300)

ROWS = 400
PARTITIONS = 4


@pytest.fixture(scope="module")
def faulty(spark: SparkSession) -> str:
    cloudpickle.register_pickle_by_value(spark_faults)
    spark.dataSource.register(FaultyDataSource)
    return FaultyDataSource.name()


def frame(spark: SparkSession) -> DataFrame:
    """ROWS deterministic rows in PARTITIONS partitions (a retry recomputes the same)."""
    return spark.range(0, ROWS, numPartitions=PARTITIONS).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.col("id").cast("string").alias("key"),
        F.create_map(F.lit("n"), F.col("id").cast("string")).alias("properties"),
    )


def expected_values() -> list[bytes]:
    return sorted(f"row-{i}".encode() for i in range(ROWS))


def written(rows: list[tuple[object, ...]]) -> list[bytes]:
    return sorted(row[2] for row in rows)  # type: ignore[misc]


def test_retried_task_writes_once_url(spark: SparkSession, server: LiveServer, faulty: str) -> None:
    topic = server.new_topic()
    (
        frame(spark)
        .write.format(faulty)
        .option("url", server.url)
        .option("topic", topic)
        .option("failMode", "raise")
        .option("failPartition", "1")
        .mode("append")
        .save()
    )
    rows = server.run(engine_view(server.engine, topic))
    assert written(rows) == expected_values()
    assert {row[1] for row in rows} == {str(i) for i in range(ROWS)}
    assert all(row[4] == {"n": row[1]} for row in rows)
    # The failed first attempt had appended a batch in its own transaction: aborted.
    stats = server.run(server.engine.stats(topic))
    assert stats["aborted_txns"] == 1
    assert stats["open_txns"] == 0
    txns = {row[5] for row in rows}
    assert len(txns) == PARTITIONS  # one transaction per winning attempt
    labels = server.run(server.engine.transactions(label_prefix="spark:"))
    assert not [t for t in labels if t.state == "open" and topic in t.topics]


def test_killed_worker_writes_once_path(spark: SparkSession, fresh_dir: Path, faulty: str) -> None:
    async def setup(engine: Engine) -> None:
        await engine.create_topic("target")
        await engine.send("target", b"already there")

    run_engine(fresh_dir, setup)
    (
        frame(spark)
        .write.format(faulty)
        .option("path", str(fresh_dir))
        .option("topic", "target")
        .option("failMode", "exit")
        .option("failPartition", "2")
        .mode("append")
        .save()
    )

    async def check(engine: Engine) -> tuple[list[tuple[object, ...]], dict[str, object]]:
        return await engine_view(engine, "target"), await engine.stats("target")

    rows, stats = run_engine(fresh_dir, check)
    assert written(rows) == sorted([b"already there", *expected_values()])
    assert stats["aborted_txns"] == 1
    assert stats["open_txns"] == 0


def test_failing_job_leaves_nothing(spark: SparkSession, server: LiveServer, faulty: str) -> None:
    topic = server.new_topic()
    write = (
        frame(spark)
        .write.format(faulty)
        .option("url", server.url)
        .option("topic", topic)
        .option("failMode", "always")
        .option("failPartition", "3")
        .mode("append")
    )
    with pytest.raises(Exception, match="injected failure"):
        write.save()
    assert server.run(engine_view(server.engine, topic)) == []
    assert server.run(engine_view(server.engine, topic, "read_uncommitted")) != []  # it wrote
    stats = server.run(server.engine.stats(topic))
    assert stats["open_txns"] == 0
    assert stats["aborted_txns"] >= 1
    df = spark.read.format("txnstream").option("url", server.url).option("topic", topic).load()
    assert df.count() == 0


def test_round_trip_path_with_json_values(spark: SparkSession, fresh_dir: Path) -> None:
    async def setup(engine: Engine) -> None:
        await engine.create_topic("source")
        await engine.create_topic("copy")
        await engine.send("source", {"order": 1, "tags": ["a", "b"]}, key="k1")
        await engine.send("source", "just text", properties={"p": "q"})
        await engine.send("source", [1, 2.5, None, True])

    run_engine(fresh_dir, setup)
    source = (
        spark.read.format("txnstream")
        .option("path", str(fresh_dir))
        .option("topic", "source")
        .load()
    )
    (
        source.select(F.col("value_json").alias("value"), "key", "properties")
        .write.format("txnstream")
        .option("path", str(fresh_dir))
        .option("topic", "copy")
        .option("valueFormat", "json")
        .mode("append")
        .save()
    )

    async def values(engine: Engine) -> list[object]:
        out = []
        for entry in (await engine.fetch("copy")).entries:
            if entry.kind == "data":
                out.append((entry.key, entry.value, entry.properties))
        return out

    got = run_engine(fresh_dir, values)
    assert sorted(got, key=json.dumps) == sorted(
        [
            ("k1", {"order": 1, "tags": ["a", "b"]}, {}),
            (None, "just text", {"p": "q"}),
            (None, [1, 2.5, None, True], {}),
        ],
        key=json.dumps,
    )


def test_write_errors(spark: SparkSession, server: LiveServer, tmp_path: Path) -> None:
    topic = server.new_topic()
    no_value = spark.range(3).select(F.col("id").cast("string").alias("payload"))
    with pytest.raises(Exception, match="no 'value' column"):
        no_value.write.format("txnstream").option("url", server.url).option("topic", topic).mode(
            "append"
        ).save()
    ints = spark.range(3).select(F.col("id").alias("value"))
    with pytest.raises(Exception, match="'value' column must be binary or string"):
        ints.write.format("txnstream").option("url", server.url).option("topic", topic).mode(
            "append"
        ).save()
    good = spark.range(3).select(F.col("id").cast("string").alias("value"))
    with pytest.raises(Exception, match="topic 'missing' not found"):
        good.write.format("txnstream").option("url", server.url).option("topic", "missing").mode(
            "append"
        ).save()
    with pytest.raises(Exception, match="not a txnstream data directory"):
        good.write.format("txnstream").option("path", str(tmp_path)).option("topic", topic).mode(
            "append"
        ).save()
    with pytest.raises(Exception, match="cannot reach the txnstream server"):
        good.write.format("txnstream").option("url", "http://127.0.0.1:9").option(
            "topic", topic
        ).mode("append").save()
    with pytest.raises(Exception, match="only appends"):
        good.write.format("txnstream").option("url", server.url).option("topic", topic).mode(
            "overwrite"
        ).save()
    assert not (tmp_path / "txnstream.db").exists()
    assert server.run(engine_view(server.engine, topic)) == []
