"""Spark over a PostgreSQL store (issue 28): the ``path`` mode takes the store's URL, its
executors read the database directly, split by ledger, and offloaded ledgers straight from
the object store, while the engine that owns the store keeps serving; no server in between.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from spark_support import (
    LEDGER_ENTRIES,
    LiveServer,
    engine_view,
    populate_mixed,
    reader,
    spark_rows,
    wait_for,
)

from txnstream.api import Engine, EngineConfig

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def pg_engine(pg_url: str, tmp_path: Path) -> Iterator[LiveServer]:
    """An engine on a fresh PostgreSQL database, in a thread with its own event loop
    (``url`` is unused: this store is read through ``path``)."""
    state: dict[str, Any] = {}

    async def own() -> None:
        config = EngineConfig(
            ledger_max_entries=LEDGER_ENTRIES, offload_url=(tmp_path / "objects").as_uri()
        )
        async with Engine.open(pg_url, config) as engine:
            done = asyncio.Event()
            state.update(engine=engine, loop=asyncio.get_running_loop(), done=done)
            await done.wait()

    def main() -> None:
        try:
            asyncio.run(own())
        except Exception as exc:  # noqa: BLE001 - reported by the wait below
            state["error"] = exc

    thread = threading.Thread(target=main, name="spark-pg-engine", daemon=True)
    thread.start()
    wait_for(lambda: "error" in state or "engine" in state, 60, "the engine to open")
    assert "error" not in state, state.get("error")
    try:
        yield LiveServer("", Path(pg_url), state["engine"], state["loop"])
    finally:
        state["loop"].call_soon_threadsafe(state["done"].set)
        thread.join(timeout=30)
        assert not thread.is_alive()


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
