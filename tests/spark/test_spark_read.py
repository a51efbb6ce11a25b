"""Batch reads through a real SparkSession: the committed view, via url and via path."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from spark_support import LiveServer, engine_view, populate_mixed, reader, spark_rows

pytestmark = pytest.mark.timeout(300)


def test_committed_view_through_url_and_path(spark: SparkSession, server: LiveServer) -> None:
    topic = server.new_topic()
    open_txn = server.run(populate_mixed(server.engine, topic))
    expected = server.run(engine_view(server.engine, topic))

    via_url = reader(spark, topic, url=server.url).load()
    via_path = reader(spark, topic, path=str(server.data)).load()
    url_rows, path_rows = spark_rows(via_url), spark_rows(via_path)

    assert url_rows == expected
    assert path_rows == expected
    values = [row[2] for row in expected]
    assert b"a-0" in values
    assert b"a-24" in values
    assert not any(v and v.startswith(b"b-") for v in values)  # aborted
    assert b"c-0" not in values  # open
    # Behind the open transaction's first entry nothing is readable yet, not even
    # committed or plain data.
    assert b"d-0" not in values
    assert b"after-open" not in values
    assert via_url.rdd.getNumPartitions() >= 2  # several ledgers

    server.run(open_txn.commit())
    now = reader(spark, topic, path=str(server.data)).load()
    rows = spark_rows(now)
    assert rows == server.run(engine_view(server.engine, topic))
    values = [row[2] for row in rows]
    for wanted in (b"c-0", b"c-1", b"d-0", b"d-1", b"after-open"):
        assert wanted in values
    assert spark_rows(reader(spark, topic, url=server.url).load()) == rows


def test_positions_isolation_and_columns(spark: SparkSession, server: LiveServer) -> None:
    topic = server.new_topic()
    open_txn = server.run(populate_mixed(server.engine, topic))
    committed = server.run(engine_view(server.engine, topic))
    uncommitted = server.run(engine_view(server.engine, topic, "read_uncommitted"))
    start, end = committed[3][0], committed[10][0]

    for source in ({"url": server.url}, {"path": str(server.data)}):
        window = reader(spark, topic, startingPosition=start, endingPosition=end, **source).load()
        assert spark_rows(window) == committed[3:10]
        dirty = reader(spark, topic, isolation="read_uncommitted", **source).load()
        dirty_rows = spark_rows(dirty)
        assert dirty_rows == uncommitted
        assert any(row[2] == b"b-3" for row in dirty_rows)
        assert any(row[2] == b"c-0" for row in dirty_rows)
        latest = reader(spark, topic, startingPosition="latest", **source).load()
        assert latest.count() == 0

    df = reader(spark, topic, path=str(server.data)).load()
    first = df.orderBy("ledger_id", "entry_id").first()
    assert first is not None
    assert first["key"] == "k0"
    assert first["properties"] == {"src": "test"}
    assert first["publish_time"] is not None
    assert first["txn"] is None
    assert df.where('value_json = \'{"order":1,"items":[1,2]}\'').count() == 1
    assert df.where("txn IS NOT NULL").count() == 25 + 0  # A only (D is behind C)
    assert df.selectExpr("count(distinct txn)").first()[0] == 1
    server.run(open_txn.abort())


def test_clear_errors(spark: SparkSession, server: LiveServer, tmp_path: Path) -> None:
    topic = server.new_topic()
    with pytest.raises(Exception, match="topic 'nope' not found"):
        reader(spark, "nope", url=server.url).load().collect()
    with pytest.raises(Exception, match="topic 'nope' not found"):
        reader(spark, "nope", path=str(server.data)).load().collect()
    with pytest.raises(Exception, match="cannot reach the txnstream server"):
        reader(spark, topic, url="http://127.0.0.1:9").load().collect()
    with pytest.raises(Exception, match="invalid startingPosition 'x:1'"):
        reader(spark, topic, url=server.url, startingPosition="x:1").load().collect()
    with pytest.raises(Exception, match="invalid endingPosition '3-4'"):
        reader(spark, topic, path=str(server.data), endingPosition="3-4").load().collect()
    with pytest.raises(Exception, match="not a txnstream data directory"):
        reader(spark, topic, path=str(tmp_path)).load().collect()
    (tmp_path / "txnstream.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(Exception, match="not a txnstream data directory"):
        reader(spark, topic, path=str(tmp_path)).load().collect()
    with pytest.raises(Exception, match="exactly one of the options 'url'"):
        reader(spark, topic).load().collect()
