"""Structured Streaming: reads that never see undecided data, writes that land once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from spark_support import LiveServer, engine_view, wait_for

pytestmark = pytest.mark.timeout(300)

DEADLINE = 90.0


class Collector:
    """A foreachBatch sink that keeps every micro-batch's values (in the driver)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[bytes]]] = []
        self.lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        values = [bytes(r["value"]) for r in df.select("value").collect()]
        with self.lock:
            self.batches.append((batch_id, values))

    def values(self) -> list[bytes]:
        with self.lock:
            return [v for _, batch in self.batches for v in batch]

    def settled(self, checkpoint: Path) -> bool:
        """True once Spark committed the last collected batch in the checkpoint (a
        stop before that makes a restart replay it: foreachBatch is at-least-once)."""
        with self.lock:
            last = max((b for b, _ in self.batches), default=None)
        return last is None or last in _committed_batches(checkpoint)


def start(
    spark: SparkSession, collector: Collector, checkpoint: Path, **options: str
) -> StreamingQuery:
    read = spark.readStream.format("txnstream")
    for key, value in options.items():
        read = read.option(key, value)
    return (
        read.load()
        .writeStream.foreachBatch(collector)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def progress_count(query: StreamingQuery) -> int:
    return len(query.recentProgress)


def wait_idle_cycles(query: StreamingQuery, cycles: int = 3) -> None:
    """Wait until the query has planned ``cycles`` more triggers (it saw the new state)."""
    seen = query.lastProgress["timestamp"] if query.lastProgress else ""

    def moved() -> bool:
        progress = query.recentProgress
        later = [p for p in progress if p["timestamp"] > seen]
        return len(later) >= cycles

    wait_for(moved, DEADLINE, "the stream to plan more triggers")


def stop(query: StreamingQuery) -> None:
    query.stop()
    assert query.exception() is None


def test_stream_never_sees_open_or_aborted_data(
    spark: SparkSession, server: LiveServer, tmp_path: Path
) -> None:
    topic = server.new_topic()
    engine = server.engine
    server.run(engine.send_many(topic, [b"p-0", b"p-1"]))
    c = server.run(engine.begin(label="open-one"))
    server.run(c.send(topic, b"c-0"))
    server.run(engine.send(topic, b"behind-open"))

    collector = Collector()
    query = start(spark, collector, tmp_path / "ck", url=server.url, topic=topic)
    try:
        wait_for(lambda: b"p-1" in collector.values(), DEADLINE, "the first committed rows")
        # An aborted transaction and more of the open one; the stream keeps planning.
        e = server.run(engine.begin())
        server.run(e.send(topic, b"e-aborted"))
        server.run(c.send(topic, b"c-1"))
        server.run(e.abort())
        wait_idle_cycles(query)
        assert collector.values() == [b"p-0", b"p-1"]

        server.run(c.commit())
        wait_for(lambda: b"c-1" in collector.values(), DEADLINE, "the committed transaction")
        server.run(engine.send(topic, b"last"))
        wait_for(lambda: b"last" in collector.values(), DEADLINE, "the last row")
    finally:
        stop(query)
    values = collector.values()
    assert values == [b"p-0", b"p-1", b"c-0", b"behind-open", b"c-1", b"last"]
    assert b"e-aborted" not in values
    expected = [row[2] for row in server.run(engine_view(engine, topic))]
    assert values == expected


def test_stream_restart_resumes_after_checkpoint(
    spark: SparkSession, server: LiveServer, tmp_path: Path
) -> None:
    topic = server.new_topic()
    server.run(server.engine.send_many(topic, [f"one-{i}".encode() for i in range(50)]))
    checkpoint = tmp_path / "ck"
    options = {"path": str(server.data), "topic": topic, "maxEntriesPerTrigger": "20"}

    first = Collector()
    query = start(spark, first, checkpoint, **options)
    try:
        wait_for(lambda: len(first.values()) == 50, DEADLINE, "the first run's rows")
        wait_for(lambda: first.settled(checkpoint), DEADLINE, "the last batch's commit")
    finally:
        stop(query)
    assert len(first.batches) >= 3  # maxEntriesPerTrigger bounds each micro-batch

    server.run(server.engine.send_many(topic, [f"two-{i}".encode() for i in range(7)]))
    second = Collector()
    query = start(spark, second, checkpoint, **options)
    try:
        wait_for(lambda: len(second.values()) >= 7, DEADLINE, "the second run's rows")
        wait_idle_cycles(query, 2)
    finally:
        stop(query)
    assert second.values() == [f"two-{i}".encode() for i in range(7)]
    assert min(b for b, _ in second.batches) > max(b for b, _ in first.batches)


def test_stream_write_replayed_batch_lands_once(
    spark: SparkSession, server: LiveServer, tmp_path: Path
) -> None:
    source, target = server.new_topic(), server.new_topic()
    server.run(server.engine.send_many(source, [f"s-{i}".encode() for i in range(30)]))
    checkpoint = tmp_path / "ck"

    def run_until(count: int, batch: int) -> StreamingQuery:
        query = (
            spark.readStream.format("txnstream")
            .option("path", str(server.data))
            .option("topic", source)
            .load()
            .select("value", "key")
            .writeStream.format("txnstream")
            .option("url", server.url)
            .option("topic", target)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            wait_for(
                lambda: len(server.run(engine_view(server.engine, target))) >= count,
                DEADLINE,
                f"{count} rows in the target",
            )
            wait_for(
                lambda: batch in _committed_batches(checkpoint),
                DEADLINE,
                f"batch {batch} committed",
            )
        except BaseException:
            query.stop()
            raise
        return query

    query = run_until(30, 0)
    query_id = query.id
    stop(query)
    server.run(server.engine.send_many(source, [f"t-{i}".encode() for i in range(5)]))
    query = run_until(35, 1)
    stop(query)

    # Forget that the last micro-batch was committed: a restart replays it.
    last = max(_committed_batches(checkpoint))
    assert last == 1
    (checkpoint / "commits" / str(last)).unlink()
    for crc in (checkpoint / "commits").glob(f".{last}.crc"):
        crc.unlink()
    query = (
        spark.readStream.format("txnstream")
        .option("path", str(server.data))
        .option("topic", source)
        .load()
        .select("value", "key")
        .writeStream.format("txnstream")
        .option("url", server.url)
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        assert query.id == query_id  # the checkpoint keeps the query id
        wait_for(lambda: last in _committed_batches(checkpoint), DEADLINE, "the replayed batch")
    finally:
        stop(query)

    rows = server.run(engine_view(server.engine, target))
    values = sorted(row[2] for row in rows)
    assert values == sorted(
        [f"s-{i}".encode() for i in range(30)] + [f"t-{i}".encode() for i in range(5)]
    )
    # The replay did write again, in a transaction that finish aborted (key reused).
    txns = server.run(server.engine.transactions(label_prefix=f"spark-stream:{query_id}:{last}:"))
    states = sorted(t.state for t in txns)
    assert "committed" in states, states
    assert "aborted" in states, states


def _committed_batches(checkpoint: Path) -> list[int]:
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return []
    return [int(p.name) for p in commits.iterdir() if p.name.isdigit()]
