"""Spark over offloaded ledgers: both modes read them straight from the object store
(one partition per offloaded ledger), committed data only, and see one log."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession
from spark_support import LiveServer, engine_view, populate_mixed, reader, spark_rows

pytestmark = pytest.mark.timeout(300)


def test_url_and_path_read_offloaded_ledgers(spark: SparkSession, server: LiveServer) -> None:
    topic = server.new_topic()
    engine = server.engine
    open_txn = server.run(populate_mixed(engine, topic))
    assert server.run(engine.offload(topic)) == [0]  # ledger 1 holds the open transaction
    server.run(open_txn.commit())
    server.run(engine.send_many(topic, [b"more-%d" % i for i in range(100)]))
    offloaded = server.run(engine.offload(topic))
    assert offloaded == [1, 2, 3]
    expected = server.run(engine_view(engine, topic))
    assert not any(row[2] and row[2].startswith(b"b-") for row in expected)  # aborted

    server.run(engine.fetch(topic, None, max=1, isolation="read_committed"))  # as a planner does
    fetches = engine.metrics.offload_data_fetches._value.get()
    via_url = reader(spark, topic, url=server.url).load()
    assert spark_rows(via_url) == expected
    # the offloaded ledgers came from the object store, not through the server
    assert engine.metrics.offload_data_fetches._value.get() == fetches
    assert via_url.rdd.getNumPartitions() >= 5  # 4 offloaded ledgers alone + local ones

    via_path = reader(spark, topic, path=str(server.data)).load()
    assert spark_rows(via_path) == expected
    objects = str(server.data.parent / "objects")
    with_option = reader(spark, topic, path=str(server.data), offloadUrl=objects).load()
    assert spark_rows(with_option) == expected
    uncommitted = reader(spark, topic, url=server.url, isolation="read_uncommitted").load()
    assert spark_rows(uncommitted) == server.run(engine_view(engine, topic, "read_uncommitted"))
