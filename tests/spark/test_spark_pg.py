"""Spark over a PostgreSQL store (issue 28): the ``path`` mode takes the store's URL, its
executors read the database directly, split by ledger, and offloaded ledgers straight from
the object store, while the engine that owns the store keeps serving; no server in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from spark_support import (
    LEDGER_ENTRIES,
    LiveServer,
    engine_in_thread,
    engine_view,
    populate_mixed,
    reader,
    spark_rows,
)

from txnstream.api import EngineConfig

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def pg_engine(pg_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """An engine on a fresh PostgreSQL database (no HTTP: this store is read through
    ``path``)."""
    config = EngineConfig(
        ledger_max_entries=LEDGER_ENTRIES, offload_url=(tmp_path / "objects").as_uri()
    )
    with engine_in_thread(pg_url, config, http=False) as live:
        yield live


def test_path_mode_reads_a_postgresql_store_and_its_offloaded_ledgers(
    spark: SparkSession, pg_engine: LiveServer, pg_url: str
) -> None:
    server, engine = pg_engine, pg_engine.engine
    topic = server.new_topic()
    open_txn = server.run(populate_mixed(engine, topic))

    # While a transaction is open, only what is below the stable position is read.
    expected = server.run(engine_view(engine, topic))
    via_store = reader(spark, topic, path=pg_url, maxEntriesPerPartition=str(LEDGER_ENTRIES)).load()
    assert spark_rows(via_store) == expected
    values = [row[2] for row in expected]
    assert b"a-24" in values
    assert not any(v and v.startswith(b"b-") for v in values)  # aborted
    assert b"c-0" not in values  # open
    assert b"after-open" not in values  # behind the open transaction
    assert via_store.rdd.getNumPartitions() >= 2  # split by ledger

    # Offloaded ledgers come from the object store; the rest from PostgreSQL.
    assert server.run(engine.offload(topic)) == [0]  # ledger 1 holds the open transaction
    server.run(open_txn.commit())
    server.run(engine.send_many(topic, [b"more-%d" % i for i in range(100)]))
    assert server.run(engine.offload(topic)) == [1, 2, 3]
    expected = server.run(engine_view(engine, topic))
    whole = reader(spark, topic, path=pg_url).load()
    rows = spark_rows(whole)
    assert rows == expected
    assert whole.rdd.getNumPartitions() >= 5  # one per offloaded ledger, then the local rest
    assert b"c-1" in [row[2] for row in rows]
    uncommitted = reader(spark, topic, path=pg_url, isolation="read_uncommitted").load()
    assert spark_rows(uncommitted) == server.run(engine_view(engine, topic, "read_uncommitted"))


def test_a_missing_topic_or_database_is_a_clear_error(
    spark: SparkSession, pg_engine: LiveServer, pg_url: str
) -> None:
    with pytest.raises(Exception, match="topic 'nope' not found"):
        reader(spark, "nope", path=pg_url).load().collect()
    missing = pg_url.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(Exception, match="no_such_database"):
        reader(spark, "t", path=missing).load().collect()
