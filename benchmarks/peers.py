"""``make bench-peers``: the same workload on txnstream and on the stores next door.

Workload (issue 9): 50,000 messages of 100 bytes (quick: 5,000) in transactions of 10,
one producer, durable at every commit (fsync before the commit returns); then one
consumer reads them all. Each system runs in turn inside each run (so a slow phase of
the machine touches all of them); the figures are medians of the runs (default 3).

* raw sqlite3: WAL, ``synchronous=FULL``, ``BEGIN`` + ``executemany`` + ``COMMIT``;
  read by keyset pages of 1,000 rows (the ceiling txnstream stands on);
* aiosqlite: the same SQL, one thread hop per call;
* txnstream ``txn.send``: ``begin``, 10 ``txn.send`` gathered, ``commit``; then
  ``receive(max=1000)`` + cumulative ack (durable) per batch;
* txnstream ``send_many``: ``begin``, one ``txn.send_many`` of 10, ``commit``; the same;
* PostgreSQL: an outbox table, ``synchronous_commit=on`` and ``fsync=on``, a
  transaction per 10 rows; read by id, 1,000 rows a query (:func:`outbox`, which the P
  group of ``make bench`` measures the PostgreSQL store against);
* Redis Streams: ``MULTI`` + 10 ``XADD`` + ``EXEC`` with ``appendfsync always``; read by
  ``XREAD COUNT 1000``.

PostgreSQL and Redis run only when their servers are installed (``apt-get install
postgresql redis-server``) and Redis's Python client too (``pip install -e '.[peers]'``,
which ``make bench-peers`` does); otherwise the row says why it was skipped. Each server
is started for the run from a temporary directory on a free loopback port and stopped
by its pid (PostgreSQL as the tests start theirs: ``tests/pg_support.py``). The table is
printed and written under ``"peers"`` into the results JSON (``bench-results.json``,
other content kept); ``--chart PATH`` also draws a PNG when matplotlib is installed.

Usage: ``.venv/bin/python benchmarks/peers.py [--quick] [--runs N] [--only a,b]
[--output PATH] [--chart PATH]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiosqlite
import psycopg

from benchmarks.core import REPO_ROOT, Skipped, make_values, progress
from tests.pg_support import Cluster, PostgresUnavailable, free_port, start_cluster
from txnstream.api import Engine, EngineConfig

TXN_SIZE = 10
PAGE = 1000
_DDL = (
    "CREATE TABLE entries (seq INTEGER NOT NULL PRIMARY KEY, topic TEXT NOT NULL,"
    " data BLOB NOT NULL) WITHOUT ROWID"
)
_INSERT = "INSERT INTO entries (seq, topic, data) VALUES (?, ?, ?)"
_PAGE_SQL = "SELECT seq, topic, data FROM entries WHERE seq > ? ORDER BY seq LIMIT ?"


@dataclass(frozen=True, slots=True)
class Result:
    """One system's figures of one run: messages/s."""

    produce: float
    consume: float


def _batches(count: int) -> list[list[bytes]]:
    values = make_values(1000)
    return [
        [values[(start + i) % len(values)] for i in range(TXN_SIZE)]
        for start in range(0, count, TXN_SIZE)
    ]


# -- SQLite ----------------------------------------------------------------------------


def run_sqlite(work: Path, batches: list[list[bytes]]) -> Result:
    """Raw stdlib sqlite3: the ceiling txnstream stands on."""
    conn = sqlite3.connect(work / "raw.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(_DDL)
        seq = 0
        started = time.perf_counter()
        for batch in batches:
            rows = [(seq + i, "peers", value) for i, value in enumerate(batch)]
            seq += len(batch)
            conn.execute("BEGIN")
            conn.executemany(_INSERT, rows)
            conn.execute("COMMIT")
        produce = seq / (time.perf_counter() - started)
    finally:
        conn.close()
    reader = sqlite3.connect(work / "raw.db", isolation_level=None)
    try:
        read, last = 0, -1
        started = time.perf_counter()
        while page := reader.execute(_PAGE_SQL, (last, PAGE)).fetchall():
            read += len(page)
            last = page[-1][0]
        consume = read / (time.perf_counter() - started)
    finally:
        reader.close()
    _check("sqlite3", read, seq)
    return Result(produce, consume)


def run_aiosqlite(work: Path, batches: list[list[bytes]]) -> Result:
    """The same SQL through aiosqlite: one thread hop per call."""

    async def main() -> Result:
        async with aiosqlite.connect(work / "aio.db", isolation_level=None) as conn:
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute("PRAGMA synchronous=FULL")
            await conn.execute(_DDL)
            seq = 0
            started = time.perf_counter()
            for batch in batches:
                rows = [(seq + i, "peers", value) for i, value in enumerate(batch)]
                seq += len(batch)
                await conn.execute("BEGIN")
                await conn.executemany(_INSERT, rows)
                await conn.execute("COMMIT")
            produce = seq / (time.perf_counter() - started)
        async with aiosqlite.connect(work / "aio.db", isolation_level=None) as reader:
            read, last = 0, -1
            started = time.perf_counter()
            while page := list(await reader.execute_fetchall(_PAGE_SQL, (last, PAGE))):
                read += len(page)
                last = page[-1][0]
            consume = read / (time.perf_counter() - started)
        _check("aiosqlite", read, seq)
        return Result(produce, consume)

    return asyncio.run(main())


# -- txnstream -------------------------------------------------------------------------


async def drain(engine: Engine, topic: str, count: int, subscription: str = "peers") -> float:
    """Messages/s of a new subscription reading ``topic``'s ``count`` messages from the
    earliest: ``receive(max=PAGE)`` and a cumulative (durable) ack per batch."""
    sub = await engine.subscribe(topic, subscription, initial_position="earliest")
    read = 0
    started = time.perf_counter()
    while read < count:
        messages = await sub.receive(max=PAGE, timeout=5.0)
        if not messages:
            break
        read += len(messages)
        await sub.ack(messages[-1].position, cumulative=True)
    consume = read / (time.perf_counter() - started)
    _check("txnstream", read, count)
    return consume


def run_txnstream(work: Path, batches: list[list[bytes]], *, send_many: bool) -> Result:
    """The embedded engine, default (durable) configuration."""

    async def main() -> Result:
        count = sum(map(len, batches))
        async with Engine.open(work / "txnstream", EngineConfig()) as engine:
            await engine.create_topic("peers")
            started = time.perf_counter()
            for batch in batches:
                txn = await engine.begin()
                if send_many:
                    await txn.send_many("peers", batch)
                else:
                    await asyncio.gather(*(txn.send("peers", value) for value in batch))
                await txn.commit()
            produce = count / (time.perf_counter() - started)
            consume = await drain(engine, "peers", count)
        return Result(produce, consume)

    return asyncio.run(main())


# -- servers ---------------------------------------------------------------------------


@contextlib.contextmanager
def _server(argv: list[str], *, ready: Callable[[], bool]) -> Iterator[int]:
    """Start ``argv``, wait until ``ready``; stop it by pid."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while not ready():
                if proc.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise Skipped(
                        f"{argv[0]} did not start: {log.read()[-500:].decode(errors='replace')}"
                    )
                time.sleep(0.1)
            yield proc.pid
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGINT)  # Redis: shutdown
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    proc.wait()


# -- PostgreSQL ------------------------------------------------------------------------

BENCH_CLUSTER_SETTINGS = {
    "fsync": "on",
    "full_page_writes": "on",
    "synchronous_commit": "on",
    "shared_buffers": "'128MB'",
}
"""The benchmarks' PostgreSQL: durable as in production (the tests' clusters run with
``fsync=off``), so a COMMIT returns once its WAL is flushed to disk."""


def start_bench_cluster() -> Cluster:
    """A new PostgreSQL cluster started as the tests start theirs
    (:func:`tests.pg_support.start_cluster`) with :data:`BENCH_CLUSTER_SETTINGS`; raises
    :class:`Skipped` when PostgreSQL is not installed."""
    try:
        return start_cluster(**BENCH_CLUSTER_SETTINGS)
    except PostgresUnavailable as why:
        raise Skipped(str(why)) from None


_OUTBOX_DDL = (
    "CREATE TABLE outbox (id bigserial PRIMARY KEY, topic text NOT NULL, payload bytea NOT NULL)"
)
_OUTBOX_INSERT = "INSERT INTO outbox (topic, payload) VALUES (%s, %s)"
_OUTBOX_PAGE = "SELECT id, topic, payload FROM outbox WHERE id > %s ORDER BY id LIMIT %s"


def outbox(url: str, batches: list[list[bytes]], reads: int = 1) -> Result:
    """The outbox peer on the (empty) database at ``url``: :func:`outbox_produce`, then
    :func:`outbox_read` ``reads`` times over (timed together); messages/s of each.
    Durable as the server's ``synchronous_commit`` says."""
    with psycopg.connect(url) as conn:
        produce = outbox_produce(conn, batches)
        count = sum(map(len, batches))
        took = sum(outbox_read(conn, count) for _ in range(reads))
    return Result(produce, reads * count / took)


def outbox_produce(conn: psycopg.Connection[Any], batches: list[list[bytes]]) -> float:
    """Create the outbox table on ``conn``'s (empty) database and fill it: a transaction
    of ``executemany`` + ``COMMIT`` per batch; messages/s."""
    conn.execute(_OUTBOX_DDL)
    conn.commit()
    count = 0
    started = time.perf_counter()
    with conn.cursor() as cur:
        for batch in batches:
            cur.executemany(_OUTBOX_INSERT, [("peers", value) for value in batch])
            conn.commit()
            count += len(batch)
    return count / (time.perf_counter() - started)


def outbox_read(conn: psycopg.Connection[Any], count: int) -> float:
    """Seconds to read the outbox's ``count`` rows back by id, ``PAGE`` rows a query."""
    read, last = 0, 0
    started = time.perf_counter()
    with conn.cursor() as cur:
        while True:
            cur.execute(_OUTBOX_PAGE, (last, PAGE))
            page = cur.fetchall()
            if not page:
                break
            read += len(page)
            last = page[-1][0]
        conn.commit()
    took = time.perf_counter() - started
    _check("postgres", read, count)
    return took


def run_postgres(work: Path, batches: list[list[bytes]]) -> Result:
    """An outbox table in PostgreSQL, ``synchronous_commit=on``."""
    with start_bench_cluster() as cluster:
        return outbox(cluster.url(), batches)


def run_redis(work: Path, batches: list[list[bytes]]) -> Result:
    """Redis Streams: ``MULTI``/``EXEC`` of 10 ``XADD``, ``appendfsync always``."""
    try:
        import redis
    except ImportError:
        raise Skipped("no redis client (pip install -e '.[peers]')") from None
    server = shutil.which("redis-server")
    if server is None:
        raise Skipped("Redis is not installed (apt-get install redis-server)")
    port = free_port()
    client = redis.Redis(host="127.0.0.1", port=port)

    def ready() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    argv = [
        server,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(work),
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
        "--save",
        "",
    ]
    with _server(argv, ready=ready):
        count = 0
        started = time.perf_counter()
        for batch in batches:
            pipe = client.pipeline(transaction=True)  # MULTI ... EXEC
            for value in batch:
                pipe.xadd("peers", {"v": value})
            pipe.execute()
            count += len(batch)
        produce = count / (time.perf_counter() - started)
        read, last = 0, "0-0"
        started = time.perf_counter()
        while True:
            found = client.xread({"peers": last}, count=PAGE)
            if not found:
                break
            entries = found[0][1]
            read += len(entries)
            last = entries[-1][0]
        consume = read / (time.perf_counter() - started)
        client.close()
    _check("redis", read, count)
    return Result(produce, consume)


def _check(system: str, read: int, written: int) -> None:
    if read != written:
        raise AssertionError(f"{system}: read {read} of {written} messages")


# -- the table -------------------------------------------------------------------------

SYSTEMS: dict[str, tuple[str, Callable[[Path, list[list[bytes]]], Result]]] = {
    "sqlite3": ("raw sqlite3, BEGIN + executemany + COMMIT, FULL", run_sqlite),
    "aiosqlite": ("aiosqlite, same SQL (one thread hop per call)", run_aiosqlite),
    "txnstream": (
        "txnstream embedded, txn.send x10 gathered + commit",
        lambda w, b: run_txnstream(w, b, send_many=False),
    ),
    "txnstream-many": (
        "txnstream embedded, txn.send_many(10) + commit",
        lambda w, b: run_txnstream(w, b, send_many=True),
    ),
    "postgres": ("PostgreSQL outbox, synchronous_commit=on", run_postgres),
    "redis": ("Redis Streams MULTI/EXEC, appendfsync always", run_redis),
}


def measure(count: int, runs: int, only: list[str]) -> dict[str, Any]:
    """Run every selected system ``runs`` times, in turn; medians and samples."""
    batches = _batches(count)
    samples: dict[str, list[Result]] = {name: [] for name in only}
    skipped: dict[str, str] = {}
    for run in range(runs):
        for name in only:
            if name in skipped:
                continue
            with tempfile.TemporaryDirectory(prefix=f"txnstream-peers-{name}-") as tmp:
                try:
                    result = SYSTEMS[name][1](Path(tmp), batches)
                except Skipped as why:
                    skipped[name] = str(why)
                    progress(f"peers: {name} skipped: {why}")
                    continue
            samples[name].append(result)
            progress(
                f"peers run {run + 1}/{runs} {name}: produce {result.produce:,.0f} msg/s,"
                f" consume {result.consume:,.0f} msg/s"
            )
    rows = []
    for name in only:
        label = SYSTEMS[name][0]
        got = samples[name]
        if not got:
            rows.append({"system": name, "label": label, "skipped": skipped.get(name)})
            continue
        rows.append(
            {
                "system": name,
                "label": label,
                "produce": statistics.median(r.produce for r in got),
                "consume": statistics.median(r.consume for r in got),
                "samples": [[r.produce, r.consume] for r in got],
            }
        )
    return {"messages": count, "txn_size": TXN_SIZE, "runs": runs, "rows": rows}


def table(peers: dict[str, Any]) -> str:
    """The markdown table of the issue: produce and consume msg/s, vs raw sqlite3."""
    rows = peers["rows"]
    ceiling = next((r for r in rows if r["system"] == "sqlite3" and "produce" in r), None)
    lines = ["| system | produce msg/s | consume msg/s |", "|---|---|---|"]
    for row in rows:
        if "produce" not in row:
            lines.append(f"| {row['label']} | skipped: {row['skipped']} | |")
            continue
        produce, consume = f"{row['produce']:,.0f}", f"{row['consume']:,.0f}"
        if ceiling is not None and row is not ceiling:
            produce += f" ({row['produce'] / ceiling['produce']:.2f}x)"
            consume += f" ({row['consume'] / ceiling['consume']:.2f}x)"
        lines.append(f"| {row['label']} | {produce} | {consume} |")
    return "\n".join(lines)


def chart(peers: dict[str, Any], path: Path) -> bool:
    """A bar chart of the table as PNG (False when matplotlib is not installed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [r for r in peers["rows"] if "produce" in r]
    fig, axes = plt.subplots(1, 2, figsize=(11, 0.6 * len(rows) + 1.5))
    for ax, key in zip(axes, ("produce", "consume"), strict=True):
        ax.barh([r["system"] for r in rows], [r[key] for r in rows])
        ax.set_title(f"{key}, msg/s ({peers['messages']:,} x 100 B, txns of {TXN_SIZE})")
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path)
    return True


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table, merge it into the results JSON."""
    parser = argparse.ArgumentParser(description="txnstream vs the stores next door")
    parser.add_argument("--quick", action="store_true", help="5,000 messages, 1 run")
    parser.add_argument("--runs", type=int, default=None, help="runs (median; default 3)")
    parser.add_argument("--only", default="", help=f"some of {','.join(SYSTEMS)}")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "bench-results.json")
    parser.add_argument("--chart", type=Path, default=None, help="also draw a PNG here")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()] or list(SYSTEMS)
    unknown = [s for s in only if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system(s) {unknown}; known: {', '.join(SYSTEMS)}")
    runs = args.runs or (1 if args.quick else 3)
    count = 5_000 if args.quick else 50_000
    peers = measure(count, runs, only)
    peers["machine"] = {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
    }
    print()
    print(f"{count:,} x 100-byte messages, transactions of {TXN_SIZE}, median of {runs}")
    print(table(peers))
    document: dict[str, Any] = {}
    if args.output.exists():
        with contextlib.suppress(ValueError):
            document = json.loads(args.output.read_text())
    document["peers"] = peers
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    print(f"written to {args.output} (under 'peers')")
    if args.chart is not None:
        print(f"chart: {args.chart}" if chart(peers, args.chart) else "chart: no matplotlib")
    return 0


if __name__ == "__main__":
    sys.exit(main())
