"""S1/S2: the Spark data source (issue 5). ``run(quick) -> list[dict]``.

S1, batch read of N committed 100-byte messages (transactions of 1000 messages, every
tenth transaction aborted, so 10 % of the transactions and ~10 % of the data entries
are aborted) into ``df.count()`` and into a parquet write, through ``path`` and through
``url`` (a ``txnstream serve`` subprocess on the same directory), in rows/s. The
baseline ``S1-ceiling`` reads the same committed rows straight out of the SQLite file
with ``sqlite3`` (one thread) into a ``pyarrow`` table of the raw columns (ledger,
entry, txn, payload), without decoding payloads. Target: S1 via path >= 0.5 x ceiling.

S2, exactly-once batch write of N rows of 100-byte values (``spark.range`` in 4
partitions), through ``url`` and through ``path``, in rows/s; the baseline
``S2-ceiling`` appends the same rows with one in-process Engine in transactions of
2000 messages (no Spark).

N is 1,000,000 (quick: 100,000). SparkSession ``local[2]``, started once, outside the
timings; each S1 figure is the median of 3 runs after a warm-up run, and the ceiling
the median of runs interleaved with them (the machine may be shared and drift). Run alone with
``.venv/bin/python benchmarks/spark_bench.py [--quick]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncio
import json
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TXN_SIZE = 1000
VALUE_BYTES = 100
TOPIC = "bench"
WRITE_PARTITIONS = 4
RUNS = 3
"""Timed runs per S1 figure (median); the ceiling takes the best of three."""


def _log(text: str) -> None:
    print(f"[spark-bench] {text}", file=sys.stderr, flush=True)


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


# -- data --------------------------------------------------------------------------------


def populate(path: Path, committed: int) -> int:
    """``committed`` committed messages plus aborted ones (every tenth transaction)."""
    from txnstream.api import Engine, EngineConfig, OutgoingMessage

    async def main() -> int:
        async with Engine.open(path, EngineConfig(durability="normal")) as engine:
            await engine.create_topic(TOPIC)
            value = os.urandom(VALUE_BYTES)
            done, index = 0, 0
            while done < committed:
                size = min(TXN_SIZE, committed - done)
                txn = await engine.begin()
                await txn.send_messages(TOPIC, [OutgoingMessage(value) for _ in range(size)])
                if index % 10 == 9:
                    await txn.abort()
                else:
                    await txn.commit()
                    done += size
                index += 1
            return done

    return asyncio.run(main())


def ceiling_read(path: Path) -> int:
    """Committed data rows straight from SQLite into pyarrow (raw columns, no decoding)."""
    import pyarrow as pa

    from txnstream.ledger import DB_FILE

    conn = sqlite3.connect(f"file:{path / DB_FILE}?mode=ro", uri=True)
    try:
        (topic_id,) = conn.execute(
            "SELECT topic_id FROM topics WHERE name = ?", (TOPIC,)
        ).fetchone()
        aborted = {
            t
            for (t,) in conn.execute("SELECT txn FROM aborted_txns WHERE topic_id = ?", (topic_id,))
        }
        rows = conn.execute(
            "SELECT ledger_id, entry_id, txn, data FROM entries WHERE topic_id = ? AND kind = 0"
            " ORDER BY ledger_id, entry_id",
            (topic_id,),
        ).fetchall()
        rows = [r for r in rows if r[2] not in aborted]
        table = pa.table(
            {
                "ledger_id": pa.array([r[0] for r in rows], pa.int64()),
                "entry_id": pa.array([r[1] for r in rows], pa.int64()),
                "txn": pa.array([r[2] for r in rows], pa.int64()),
                "data": pa.array([r[3] for r in rows], pa.binary()),
            }
        )
        return int(table.num_rows)
    finally:
        conn.close()


def ceiling_write(path: Path, rows: int) -> None:
    from txnstream.api import Engine, EngineConfig, OutgoingMessage

    async def main() -> None:
        async with Engine.open(path, EngineConfig()) as engine:
            await engine.create_topic("s2")
            txn = await engine.begin(timeout=600)
            for start in range(0, rows, 2000):
                chunk = [
                    OutgoingMessage(f"{i:0{VALUE_BYTES}d}".encode())
                    for i in range(start, min(rows, start + 2000))
                ]
                await engine.produce("s2", chunk, txn=txn.id)
            await txn.commit()

    asyncio.run(main())


# -- processes ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def server(path: Path) -> Iterator[str]:
    """``txnstream serve`` on ``path`` in a subprocess; yields its URL."""
    import httpx

    port = _free_port()
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "txnstream", "serve", "--data", str(path), "--port", str(port)),
            *("--log-level", "warning", "--durability", "normal"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from txnstream.api.spark import TxnStreamDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("txnstream-bench")
        # Full JIT here (the tests' -XX:TieredStopAtLevel=1 halves the JVM's throughput).
        .config("spark.driver.extraJavaOptions", "-XX:+UseParallelGC")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TxnStreamDataSource)
    return session


# -- figures -----------------------------------------------------------------------------


def _figure(
    fig_id: str, rows: int, seconds: float, baseline: str | None, base: float | None
) -> dict[str, Any]:
    value = rows / seconds
    figure: dict[str, Any] = {"id": fig_id, "value": round(value, 1), "unit": "rows/s"}
    figure["baseline"] = baseline
    figure["ratio"] = None if not base else round(value / base, 3)
    figure["seconds"] = round(seconds, 3)
    figure["rows"] = rows
    return figure


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure S1 and S2; returns figure dicts (id, value, unit, baseline, ratio, ...)."""
    rows_wanted = 100_000 if quick else 1_000_000
    work = Path(tempfile.mkdtemp(prefix="txnstream-spark-bench-"))
    figures: list[dict[str, Any]] = []
    spark = None
    try:
        data = work / "data"
        seconds, committed = _timed(lambda: populate(data, rows_wanted))
        _log(f"populated {committed} committed rows in {seconds:.1f} s")
        ceiling_runs: list[float] = []

        def sample_ceiling() -> None:
            """One ceiling run before each timed Spark run: a shared machine drifts, so
            the ratio compares medians taken over the same period."""
            elapsed, rows = _timed(lambda: ceiling_read(data))
            if rows != committed:
                raise AssertionError(f"S1 ceiling: read {rows} rows, expected {committed}")
            ceiling_runs.append(elapsed)

        spark = spark_session()

        def read(**options: str) -> Any:
            reader = spark.read.format("txnstream").option("topic", TOPIC)
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load()

        timings = _s1(spark, read, {"path": str(data)}, "path", committed, work, sample_ceiling)
        with server(data) as url:
            timings += _s1(spark, read, {"url": url}, "url", committed, work, sample_ceiling)
        seconds = statistics.median(ceiling_runs)
        ceiling = committed / seconds
        figures.append(_figure("S1-ceiling", committed, seconds, None, None))
        _log(f"S1-ceiling {ceiling:,.0f} rows/s ({seconds:.2f} s)")
        for fig_id, seconds in timings:
            figures.append(_figure(fig_id, committed, seconds, "S1-ceiling", ceiling))
            _log(f"{fig_id} {committed / seconds:,.0f} rows/s ({seconds:.2f} s)")

        seconds, _ = _timed(lambda: ceiling_write(work / "s2-ceiling", rows_wanted))
        s2_base = rows_wanted / seconds
        figures.append(_figure("S2-ceiling", rows_wanted, seconds, None, None))
        _log(f"S2-ceiling {s2_base:,.0f} rows/s")
        figures += _s2(spark, work, rows_wanted, s2_base)
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    return figures


def _s1(
    spark: Any,
    read: Callable[..., Any],
    options: dict[str, str],
    mode: str,
    committed: int,
    work: Path,
    sample_ceiling: Callable[[], None],
) -> list[tuple[str, float]]:
    """``[(figure id, median seconds)]`` of the count and parquet reads through ``mode``."""
    runs = []
    for attempt in range(RUNS + 1):  # the first run warms the JVM and the Python workers up
        if attempt:
            sample_ceiling()
        seconds, count = _timed(lambda: read(**options).count())
        if count != committed:
            raise AssertionError(f"S1 {mode}: counted {count}, expected {committed}")
        runs.append(seconds)
    timings = [(f"S1-{mode}-count", statistics.median(runs[1:]))]
    target = work / f"parquet-{mode}"
    runs = []
    for _ in range(RUNS):
        sample_ceiling()
        elapsed, _ = _timed(lambda: read(**options).write.mode("overwrite").parquet(str(target)))
        runs.append(elapsed)
    timings.append((f"S1-{mode}-parquet", statistics.median(runs)))
    written = spark.read.parquet(str(target)).count()
    if written != committed:
        raise AssertionError(f"S1 {mode}: parquet has {written} rows, expected {committed}")
    return timings


def _s2(spark: Any, work: Path, rows: int, base: float) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    from txnstream.api import Engine, EngineConfig

    out = []
    frame = spark.range(0, rows, numPartitions=WRITE_PARTITIONS).select(
        F.lpad(F.col("id").cast("string"), VALUE_BYTES, "0").cast("binary").alias("value")
    )
    for mode in ("url", "path"):
        data = work / f"s2-{mode}"

        async def create(path: Path = data) -> None:
            async with Engine.open(path, EngineConfig()) as engine:
                await engine.create_topic("s2")

        asyncio.run(create())

        def write(options: dict[str, str]) -> None:
            writer = frame.write.format("txnstream").option("topic", "s2").mode("append")
            for key, value in options.items():
                writer = writer.option(key, value)
            writer.save()

        if mode == "url":
            with server(data) as url:
                seconds, _ = _timed(lambda: write({"url": url}))
        else:
            seconds, _ = _timed(lambda: write({"path": str(data)}))  # noqa: B023
        count = (
            spark.read.format("txnstream").option("path", str(data)).option("topic", "s2").load()
        ).count()
        if count != rows:
            raise AssertionError(f"S2 {mode}: the topic has {count} rows, expected {rows}")
        out.append(_figure(f"S2-{mode}-write", rows, seconds, "S2-ceiling", base))
        _log(f"S2-{mode}-write {rows / seconds:,.0f} rows/s ({seconds:.2f} s)")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    figures = run(quick="--quick" in args)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
