"""T: tiered storage, with the local-directory store and with a real S3 server.

* ``T1-offload``: MB/s (payload bytes) of ``engine.offload`` moving a topic of 100-byte
  entries (1M full, 50k quick; 50,000-entry ledgers) to the store: read, build the
  Parquet object, upload, read back and verify, switch. ``T1-ceiling``: the same rows
  copied straight out of SQLite into Parquet files (zstd) with pyarrow, no engine.
* ``T2-remote-read`` vs ``T2-local-read``: messages/s of a read_committed subscription
  draining a topic from the earliest position (transactions of 10, 10% aborted,
  ``receive(max=1000)``, one cumulative ack per batch), over offloaded ledgers vs the
  same ledgers kept local (two copies of one data directory, engine reopened for each
  pass, the order alternating by run). Target >= 0.7x.
* ``T3-index-fetches``: aborted-index objects a read_committed range fetch from the
  earliest position reads over 100 offloaded ledgers, 3 of which hold aborts: 3
  (KIP-1058: a ledger flagged empty costs nothing; each sidecar is read once).

The ``-s3`` figures run the same against SeaweedFS (``weed`` from the dev extra,
started on loopback ports in a temporary directory and stopped at the end).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from txnstream.api import Engine, EngineConfig

from .core import (
    REPO_ROOT,
    Figure,
    Samples,
    Settings,
    Target,
    collect_garbage,
    fresh_dir,
    group,
    make_values,
    progress,
)

TOPIC = "bench"
TXN_SIZE = 10
ABORT_EVERY = 10
RECEIVE_MAX = 1000
LEDGER_ENTRIES = 50_000
T3_LEDGERS = 100
T3_ABORTED = (17, 50, 83)


def _config(url: str | None, ledger_entries: int = LEDGER_ENTRIES) -> EngineConfig:
    return EngineConfig(offload_url=url, ledger_max_entries=ledger_entries, min_free_bytes=0)


@contextlib.contextmanager
def s3_store() -> Iterator[str]:
    """A SeaweedFS S3 server for the run; yields the base URL prefix to use."""
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    try:
        from objectstore import start_seaweedfs  # the tests' launcher (stdlib + pyarrow)
    finally:
        sys.path.pop(0)
    with fresh_dir("t-s3") as directory:
        server = start_seaweedfs(directory / "weed")
        saved = {k: os.environ.get(k) for k in server.environ()}
        os.environ.update(server.environ())
        try:
            yield f"s3://{server.bucket}"
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            server.stop()


async def _build_plain(path: Path, count: int) -> None:
    values = make_values(1000)
    async with Engine.open(path, _config(None)) as engine:
        await engine.create_topic(TOPIC)
        for start in range(0, count, 1000):
            await engine.send_many(TOPIC, values[: min(1000, count - start)])


def _ceiling(path: Path, out: Path) -> tuple[float, int]:
    """Seconds and payload bytes to copy every ledger's rows into Parquet directly."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    total = 0
    with contextlib.closing(sqlite3.connect(path / "txnstream.db")) as conn:
        ledgers = [r[0] for r in conn.execute("SELECT DISTINCT ledger_id FROM entries")]
        for ledger in ledgers:
            rows = conn.execute(
                "SELECT entry_id, kind, txn, data FROM entries WHERE ledger_id = ?"
                " ORDER BY entry_id",
                (ledger,),
            ).fetchall()
            ids, kinds, txns, data = zip(*rows, strict=True)
            total += sum(map(len, data))
            table = pa.table(
                {
                    "entry_id": pa.array(ids, pa.int64()),
                    "kind": pa.array(kinds, pa.int8()),
                    "txn": pa.array(txns, pa.int64()),
                    "data": pa.array(data, pa.binary()),
                }
            )
            pq.write_table(table, out / f"{ledger:020d}.parquet", compression="zstd")
    return time.perf_counter() - started, total


async def _offload(path: Path, url: str) -> tuple[float, int]:
    async with Engine.open(path, _config(url)) as engine:
        size = sum(i["bytes"] for i in await engine.list_ledgers(TOPIC))
        collect_garbage()
        started = time.perf_counter()
        done = await engine.offload(TOPIC)
        elapsed = time.perf_counter() - started
        moved = sum(i["bytes"] for i in await engine.list_ledgers(TOPIC) if i["ledger"] in done)
    assert moved > 0.9 * size, f"only {moved} of {size} bytes offloaded"
    return elapsed, moved


async def _build_txns(path: Path, count: int, ledger_entries: int) -> int:
    """A topic of transactions of 10 (10% aborted) and a last plain message; returns
    how many messages a read_committed subscription delivers."""
    values = make_values(1000)
    committed = 0
    async with Engine.open(path, _config(None, ledger_entries)) as engine:
        await engine.create_topic(TOPIC)
        for n, start in enumerate(range(0, count, TXN_SIZE)):
            txn = await engine.begin()
            offset = start % len(values)
            await txn.send_many(TOPIC, values[offset : offset + TXN_SIZE])
            if n % ABORT_EVERY == ABORT_EVERY - 1:
                await txn.abort()
            else:
                await txn.commit()
                committed += TXN_SIZE
        await engine.send(TOPIC, b"end")  # the last transaction's ledger gets sealed
    return committed + 1


async def _drain(path: Path, url: str | None, expected: int) -> float:
    async with Engine.open(path, _config(url)) as engine:
        sub = await engine.subscribe(TOPIC, "drain")
        collect_garbage()
        received = 0
        started = time.perf_counter()
        while received < expected:
            messages = await sub.receive(max=RECEIVE_MAX, timeout=5.0)
            if not messages:
                break
            received += len(messages)
            await sub.ack(messages[-1].position, cumulative=True)
        elapsed = time.perf_counter() - started
    if received != expected:
        raise AssertionError(f"received {received}, expected {expected}")
    return received / elapsed


async def _index_fetches(path: Path, url: str, per_ledger: int) -> int:
    async with Engine.open(path, _config(url, per_ledger)) as engine:
        await engine.create_topic(TOPIC)
        for ledger in range(T3_LEDGERS):
            txn = await engine.begin()
            await txn.send_many(TOPIC, [b"x"] * (per_ledger - 1))
            await (txn.abort() if ledger in T3_ABORTED else txn.commit())
        await engine.send(TOPIC, b"end")
        assert len(await engine.offload(TOPIC)) == T3_LEDGERS
        before = engine.metrics.offload_index_fetches._value.get()
        position = None
        while True:
            result = await engine.fetch(TOPIC, position, max=10_000, isolation="read_committed")
            if not result.entries:
                break
            position = result.next
        return int(engine.metrics.offload_index_fetches._value.get() - before)


def _run_store(settings: Settings, url_of: str | None, suffix: str, samples: Samples) -> None:
    count = settings.size(1_000_000, 50_000)
    read_count = settings.size(200_000, 20_000)
    read_ledger = settings.size(20_000, 2_000)
    for run in range(settings.runs):
        base = url_of
        with fresh_dir("t") as path:
            url = base + f"/{uuid.uuid4().hex[:8]}" if base else (path / "objects").as_uri()
            data = path / "data"
            asyncio.run(_build_plain(data, count))
            if not suffix:  # the ceiling does not depend on the store
                seconds, size = _ceiling(data, path / "ceiling")
                samples.add("T1-ceiling", size / seconds / 1e6)
            seconds, moved = asyncio.run(_offload(data, url))
            samples.add(f"T1-offload{suffix}", moved / seconds / 1e6)
            progress(f"T{suffix} run {run + 1}: offload {moved / seconds / 1e6:.1f} MB/s")
        with fresh_dir("t2") as path:
            url = base + f"/{uuid.uuid4().hex[:8]}" if base else (path / "objects").as_uri()
            local, remote = path / "local", path / "remote"
            expected = asyncio.run(_build_txns(local, read_count, read_ledger))
            assert expected == _committed(read_count)
            shutil.copytree(local, remote)
            asyncio.run(_offload_all(remote, url, read_ledger))
            passes = [("remote", remote, url)]
            if not suffix:  # the local baseline does not depend on the store
                passes.append(("local", local, None))
            if run % 2:
                passes.reverse()
            for kind, where, store in passes:
                rate = asyncio.run(_drain(where, store, expected))
                samples.add(f"T2-{kind}-read{suffix if kind == 'remote' else ''}", rate)
                progress(f"T{suffix} run {run + 1}: {kind} read {rate:,.0f} msg/s")
        with fresh_dir("t3") as path:
            url = base + f"/{uuid.uuid4().hex[:8]}" if base else (path / "objects").as_uri()
            fetches = asyncio.run(_index_fetches(path / "data", url, settings.size(100, 20)))
            samples.add(f"T3-index-fetches{suffix}", fetches)
            if fetches != len(T3_ABORTED):
                raise AssertionError(f"T3{suffix}: {fetches} index fetches, expected 3")


def _committed(count: int) -> int:
    """Deliverable messages of :func:`_build_txns`: 90% of ``count``, plus the last one."""
    transactions = count // TXN_SIZE
    aborted = transactions // ABORT_EVERY
    return (transactions - aborted) * TXN_SIZE + 1


async def _offload_all(path: Path, url: str, ledger_entries: int) -> None:
    async with Engine.open(path, _config(url, ledger_entries)) as engine:
        await engine.offload(TOPIC)
        remote = [i for i in await engine.list_ledgers(TOPIC) if i["location"] == "remote"]
        assert len(remote) >= 2, "nothing offloaded"


FIGURES = (
    "T1-offload",
    "T1-ceiling",
    "T1-offload-s3",
    "T2-remote-read",
    "T2-local-read",
    "T2-remote-read-s3",
    "T3-index-fetches",
    "T3-index-fetches-s3",
)


@group("T", "tiered storage: offload MB/s, remote reads, KIP-1058 index fetches", FIGURES)
def tiers(settings: Settings) -> list[Figure]:
    """T figures with the local-directory store, then with SeaweedFS."""
    samples = Samples()
    _run_store(settings, None, "", samples)
    with s3_store() as base:
        _run_store(settings, base, "-s3", samples)
    local = "T2-local-read"
    return [
        Figure.of("T1-offload", samples["T1-offload"], "MB/s", baseline="T1-ceiling"),
        Figure.of("T1-ceiling", samples["T1-ceiling"], "MB/s"),
        Figure.of("T1-offload-s3", samples["T1-offload-s3"], "MB/s", baseline="T1-ceiling"),
        Figure.of(
            "T2-remote-read",
            samples["T2-remote-read"],
            "msg/s",
            baseline=local,
            target=Target(">=", 0.7, local),
        ),
        Figure.of(local, samples[local], "msg/s"),
        Figure.of(
            "T2-remote-read-s3",
            samples["T2-remote-read-s3"],
            "msg/s",
            baseline=local,
            target=Target(">=", 0.7, local),
        ),
        Figure.of(
            "T3-index-fetches",
            samples["T3-index-fetches"],
            "fetches",
            target=Target("<=", 3),
        ),
        Figure.of(
            "T3-index-fetches-s3",
            samples["T3-index-fetches-s3"],
            "fetches",
            target=Target("<=", 3),
        ),
    ]
