"""A full disk, for real: a small tmpfs mounted for the test (the suite runs as root in CI).

Two ways a disk fills: gradually, where the free-space reserve refuses new data before
SQLite ever sees ENOSPC (reads go on, health is ``degraded``, writes resume once space
is freed); and all at once in the middle of a flush, where the flush waits for space
(health ``degraded``, new writes refused, reads go on) and lands once space is back,
with nothing acknowledged lost and no reopening.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import drain, mounted_tmpfs, wait_until

from txnstream.api import (
    Engine,
    EngineConfig,
    EngineError,
    EngineFailedError,
    InsufficientStorageError,
    Position,
)
from txnstream.api.cli.drills._workload import fill_file_system
from txnstream.ledger import DirectoryLock

MiB = 1024 * 1024
VALUE = b"v" * (64 * 1024)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs, unmounted afterwards."""
    with mounted_tmpfs(tmp_path / "fs", "48m") as mount:
        yield mount


def _free(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def _fill(mount: Path, leave: int) -> Path:
    """A filler file that leaves about ``leave`` bytes free."""
    filler = mount / "filler"
    with filler.open("wb") as out:
        out.truncate(0)
        chunk = b"\0" * MiB
        while _free(mount) > leave + MiB:
            out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    return filler


async def test_a_full_disk_refuses_writes_serves_reads_and_resumes(small_fs: Path) -> None:
    data = small_fs / "data"
    config = EngineConfig(min_free_bytes=8 * MiB)
    acked: list[Position] = []
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        sub = await engine.subscribe("t", "s")
        acked.append(await engine.send("t", VALUE))
        filler = _fill(small_fs, leave=12 * MiB)
        refused = None
        for _ in range(200):  # ~4 MiB above the reserve, then refused
            try:
                acked.append(await engine.send("t", VALUE))
            except InsufficientStorageError as exc:
                refused = exc
                break
        assert refused is not None
        assert "not enough disk space" in str(refused)
        assert len(acked) > 1
        assert engine.health().status == "degraded"
        assert "writes refused" in (engine.health().reason or "")
        before = await engine.stats("t")
        with pytest.raises(InsufficientStorageError):
            await engine.send_many("t", [VALUE, VALUE])  # all or nothing: nothing
        assert await engine.stats("t") == before
        # reads go on: delivery, acks, stats, fetch
        got = await drain(sub)
        assert [m.position for m in got] == acked
        await sub.ack([m.position for m in got])
        assert (await engine.fetch("t", max=10_000)).entries[-1].position == acked[-1]
        filler.unlink()
        acked.append(await engine.send("t", b"after"))  # writes resume, no restart
        assert engine.health().status == "ok"
    async with Engine.open(data, config) as engine:
        fetched = await engine.fetch("t", max=10_000)
        assert [e.position for e in fetched.entries] == acked


def _fill_all(mount: Path) -> Path:
    """A filler file that takes every free byte (the last ones too: a write then fails)."""
    filler = mount / "filler"
    fill_file_system(filler)  # (the crash drill's disk-full phase fills the same way)
    return filler


@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_a_flush_that_hits_enospc_waits_for_space_while_reads_go_on(
    small_fs: Path, writer: str
) -> None:
    """No reserve: SQLite itself meets the full disk. The flush is held (not failed), the
    engine stays open: health ``degraded`` naming the disk, new writes 507 at once, reads
    go on; once space is freed the held write lands and writes resume, nothing lost.
    With the writer in a process, its SQLite error crosses the pipe and must still read
    as a full disk."""
    data = small_fs / "data"
    config = EngineConfig(min_free_bytes=0, writer=writer)  # type: ignore[arg-type]
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        sub = await engine.subscribe("t", "s")
        acked = [await engine.send("t", VALUE)]
        filler = _fill(small_fs, leave=2 * MiB)
        held = None
        for _ in range(200):
            sending = asyncio.create_task(engine.send("t", VALUE))
            await asyncio.wait([sending], timeout=2.0)
            if not sending.done():
                held = sending  # it met the full disk: it waits for space
                break
            acked.append(sending.result())
        assert held is not None
        health = engine.health()
        assert health.status == "degraded", health
        assert _names_a_full_disk(health.reason), health
        assert str(data) in (health.reason or "")
        with pytest.raises(InsufficientStorageError, match="the disk is full"):
            await engine.send("t", b"refused")
        # reads go on: fetch and delivery of everything acknowledged
        fetched = await engine.fetch("t", max=10_000)
        assert [e.position for e in fetched.entries if e.kind == "data"] == acked
        got = await drain(sub)
        assert [m.position for m in got] == acked
        filler.unlink()
        acked.append(await asyncio.wait_for(held, 30))
        await wait_until(lambda: _async(engine.health().status == "ok"), 10, "ok again")
        acked.append(await engine.send("t", b"after"))
        fetched = await engine.fetch("t", max=10_000)
        assert [e.position for e in fetched.entries if e.kind == "data"] == acked
        assert engine.recovery is not None
    async with Engine.open(data, config) as engine:
        fetched = await engine.fetch("t", max=10_000)
        assert [e.position for e in fetched.entries if e.kind == "data"] == acked


async def test_closing_while_a_write_waits_for_space_answers_it_and_writes_nothing(
    small_fs: Path,
) -> None:
    data = small_fs / "data"
    config = EngineConfig(min_free_bytes=0)
    engine = await Engine.open(data, config)
    await engine.create_topic("t")
    acked = [await engine.send("t", b"first")]
    filler = _fill_all(small_fs)
    held = asyncio.create_task(engine.send("t", VALUE))
    await wait_until(lambda: _async(engine._rt.store.disk_full is not None), 10, "held")
    await asyncio.wait_for(engine.close(), 10)  # does not wait for space
    with pytest.raises(InsufficientStorageError):
        await held
    filler.unlink()
    async with Engine.open(data, config) as engine:
        fetched = await engine.fetch("t", max=10_000)
        assert [e.position for e in fetched.entries if e.kind == "data"] == acked


async def test_a_reserve_larger_than_the_disk_warns_at_start_and_in_health(
    small_fs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = EngineConfig(min_free_bytes=64 * MiB)  # the default, on a 48 MiB disk
    with caplog.at_level(logging.WARNING, logger="txnstream.engine"):
        async with Engine.open(small_fs / "data", config) as engine:
            health = engine.health()
            assert health.status == "degraded"
            assert "larger than the whole file system" in (health.reason or ""), health
            with pytest.raises(InsufficientStorageError):
                await engine.create_topic("t")
    assert any("larger than the whole file system" in r.getMessage() for r in caplog.records)


async def test_transactions_across_a_disk_full_spell_end_and_writes_resume(
    small_fs: Path,
) -> None:
    """With the default reserve, something else fills the disk to the last byte while
    transactions commit, abort and time out: their decisions wait for space instead of
    failing the store, the engine never reopens, and once space is back every decision
    is durable, nothing acknowledged is lost and writes resume by themselves."""
    data = small_fs / "data"
    config = EngineConfig(min_free_bytes=4 * MiB)
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        sub = await engine.subscribe("t", "s")
        committed: list[Position] = []
        for _ in range(3):
            async with engine.transaction() as txn:
                committed.append(await txn.send("t", b"early"))
        open_txns = []
        for i in range(6):
            txn = await engine.begin(timeout=1.0 if i == 5 else 60.0)
            pos = await txn.send("t", f"open-{i}".encode())
            open_txns.append((txn, pos))
        filler = _fill_all(small_fs)
        # decisions while the disk is full: commit, abort, and one that times out
        deciding = [
            asyncio.create_task(open_txns[i][0].commit() if i % 2 else open_txns[i][0].abort())
            for i in range(5)
        ]
        await wait_until(lambda: _async(engine._rt.store.disk_full is not None), 10, "disk full")
        assert engine.health().status == "degraded"
        with pytest.raises(InsufficientStorageError):
            await engine.send("t", b"refused")
        got = await drain(sub)  # reads go on
        assert [m.position for m in got] == committed
        await wait_until(  # the timeout abort is decided, and waits behind the held flush
            lambda: _async(engine._rt.coordinator.get(open_txns[5][0].txn_id).state == "aborting"),
            10,
            "the timeout abort",
        )
        filler.unlink()
        await asyncio.wait_for(asyncio.gather(*deciding), 30)
        committed += [open_txns[i][1] for i in range(5) if i % 2]
        await wait_until(lambda: _async(engine.health().status == "ok"), 10, "ok again")
        await wait_until(
            lambda: _txn_ended(engine, open_txns[5][0].id), 10, "the timed-out transaction"
        )
        async with engine.transaction() as txn:
            committed.append(await txn.send("t", b"after"))
        got = await drain(sub)
        assert sorted(m.position for m in got) == sorted(committed[3:])
        assert engine.state.value == "open"
    async with Engine.open(data, config) as engine:
        sub = await engine.subscribe("t", "s2")
        got = await drain(sub)
        assert [m.position for m in got] == sorted(committed)


async def test_recovery_with_the_disk_still_full_waits_then_resumes(small_fs: Path) -> None:
    """An in-place recovery that starts while the disk is full cannot write the lock's
    pid: the lock must not stay taken (all or nothing), so once space is freed the
    recovery succeeds instead of meeting its own lock forever."""
    data = small_fs / "data"
    config = EngineConfig(min_free_bytes=0)
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        acked = [await engine.send("t", b"before")]
        filler = _fill_all(small_fs)
        engine._lifecycle.fail(RuntimeError("a background task failed"))  # recovery starts now
        await wait_until(lambda: _async(engine.health().status == "recovering"), 10, "recovering")
        with pytest.raises(EngineError):
            await engine.receive("t", "nobody", timeout=0.5)
        await wait_until(
            lambda: _async(_names_a_full_disk(engine.health().reason)), 10, "the reason"
        )
        filler.unlink()
        await wait_until(lambda: _async(engine.health().status == "ok"), 30, "recovered")
        acked.append(await engine.send("t", b"after"))
        fetched = await engine.fetch("t", max=100)
        assert [e.position for e in fetched.entries if e.kind == "data"] == acked


async def test_a_receive_during_recovery_answers_unavailable_never_empty_at_once(
    tmp_path: Path,
) -> None:
    """A long poll waiting when recovery begins, and one made while recovering, answer
    "recovering" (503), not an empty list at once that a consumer would spin on."""
    engine = await Engine.open(tmp_path / "data", EngineConfig(min_free_bytes=0))
    try:
        await engine.create_topic("t")
        await engine.create_subscription("t", "s")
        waiting = asyncio.create_task(engine.receive("t", "s", consumer="c", timeout=30.0))
        await wait_until(lambda: _async(_polling(engine)), 10, "the poll to wait")
        loads = 0

        async def stuck_load() -> None:  # recovery cannot finish (a disk still full)
            nonlocal loads
            loads += 1
            raise OSError(errno.ENOSPC, "No space left on device")

        engine._lifecycle.load = stuck_load  # type: ignore[method-assign]
        engine._lifecycle.fail(RuntimeError("a flush failed"))
        with pytest.raises(EngineFailedError, match="recovering"):
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(EngineFailedError, match="recovering"):
            await engine.receive("t", "s", consumer="c", timeout=1.0)
        assert engine.health().status == "recovering"
    finally:
        await engine.close()


def _polling(engine: Engine) -> bool:
    consumer = engine._rt.subscriptions.get("t", "s").consumers.get("c")
    return consumer is not None and consumer.polling > 0


def test_lock_acquisition_on_a_full_disk_is_all_or_nothing(small_fs: Path) -> None:
    directory = small_fs / "data"
    directory.mkdir()
    DirectoryLock.acquire(directory).release()  # the lock file exists, empty
    filler = _fill_all(small_fs)
    with pytest.raises(OSError, match="No space"):
        DirectoryLock.acquire(directory)
    filler.unlink()
    DirectoryLock.acquire(directory).release()  # not held by a leaked descriptor


def _names_a_full_disk(reason: str | None) -> bool:
    reason = (reason or "").lower()
    return "no space" in reason or ("disk" in reason and "full" in reason)


async def _txn_ended(engine: Engine, txn_id: object) -> bool:
    info = await engine.get_transaction(str(txn_id))
    return info.state != "open"


async def _async(value: bool) -> bool:
    return value
