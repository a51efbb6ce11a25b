"""Fixtures of the Spark data source tests.

- ``spark``: ONE SparkSession for the whole test session (startup costs 10-20 s and
  ~1.4 GiB), local mode ``local[2,3]``: two cores, and a failed task is retried (up to 3
  attempts), which the exactly-once write tests need. Python workers run this
  interpreter (``PYSPARK_PYTHON``), where txnstream is installed.
- ``server``: a real uvicorn server over ``create_app(engine)`` on a free loopback port,
  in a background thread with its own event loop and a fresh data directory; tests use
  ``server.run(coro)`` to drive its engine directly and unique topic names.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from pyspark.sql import SparkSession
from spark_support import LEDGER_ENTRIES, LiveServer, engine_in_thread

from txnstream.api import EngineConfig
from txnstream.api.spark import TxnStreamDataSource


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,3]")
        .appName("txnstream-tests")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.sql.streaming.noDataProgressEventInterval", "100ms")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TxnStreamDataSource)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("spark-server-data")
    config = EngineConfig(
        durability="normal",
        ledger_max_entries=LEDGER_ENTRIES,
        offload_url=(data.parent / "objects").as_uri(),
    )
    with engine_in_thread(data, config, http=True) as live:
        yield live


@pytest.fixture
def fresh_dir(tmp_path: Path) -> Path:
    """A data directory with no server on it (for path-mode writes)."""
    return tmp_path / "data"
