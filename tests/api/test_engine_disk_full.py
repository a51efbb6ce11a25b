"""A full disk, for real: a small tmpfs mounted for the test (the suite runs as root in CI).

Two ways a disk fills: gradually, where the free-space reserve refuses new data before
SQLite ever sees ENOSPC (reads go on, health is ``degraded``, writes resume once space
is freed); and all at once in the middle of a flush, where the flush fails, the engine
recovers in place once space is back, and nothing acknowledged is lost.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import drain, wait_until

from txnstream.api import Engine, EngineConfig, EngineError, InsufficientStorageError, Position

MiB = 1024 * 1024
VALUE = b"v" * (64 * 1024)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs, unmounted afterwards."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


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


@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_a_flush_that_hits_enospc_recovers_in_place_once_space_is_back(
    small_fs: Path, writer: str
) -> None:
    """With the writer in a process, its SQLite error crosses the pipe and must still
    read as a full disk (507), not as a generic failure."""
    data = small_fs / "data"
    # no reserve: SQLite itself meets the full disk
    config = EngineConfig(min_free_bytes=0, writer=writer)  # type: ignore[arg-type]
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        acked = [await engine.send("t", VALUE)]
        filler = _fill(small_fs, leave=2 * MiB)
        refused = None
        for _ in range(200):
            try:
                acked.append(await engine.send("t", VALUE))
            except EngineError as exc:
                refused = exc
                break
        assert isinstance(refused, InsufficientStorageError), refused
        await wait_until(lambda: _async(engine.health().status == "recovering"), 10, "recovering")
        filler.unlink()
        await wait_until(lambda: _async(engine.health().status == "ok"), 30, "recovery")
        acked.append(await engine.send("t", b"after"))
        fetched = await engine.fetch("t", max=10_000)
        assert [e.position for e in fetched.entries if e.kind == "data"] == acked
    async with Engine.open(data, config) as engine:
        fetched = await engine.fetch("t", max=10_000)
        assert [e.position for e in fetched.entries if e.kind == "data"] == acked


async def _async(value: bool) -> bool:
    return value
