"""One owner per data directory: a second opener fails at once and changes nothing."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from txnstream.api import Engine, EngineError
from txnstream.ledger import LOCK_FILE, DataDirLockedError, DirectoryLock


def _fingerprint(directory: Path) -> dict[str, str]:
    """Content hashes of every database file (the lock file aside)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.name != LOCK_FILE
    }


def _real(path: Path) -> str:
    return str(path.resolve())


@pytest.mark.sqlite_only("the directory lock (the PostgreSQL lease: tests/api/test_pg_engine.py)")
async def test_a_second_engine_in_the_same_process_is_refused(data_dir: Path) -> None:
    where = _real(data_dir)
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        await engine.send("t", {"n": 1})
        await engine._rt.store.flush()
        before = _fingerprint(data_dir)
        with pytest.raises(DataDirLockedError) as caught:
            await Engine.open(data_dir)
        assert isinstance(caught.value, EngineError)
        assert where in str(caught.value)
        assert f"pid {os.getpid()}" in str(caught.value)
        assert _fingerprint(data_dir) == before
        await engine.send("t", {"n": 2})  # the owner is untouched
    async with Engine.open(data_dir) as engine:  # released on close
        assert (await engine.stats("t"))["entries"] == 2


_HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from txnstream.api import Engine, EngineConfig

    async def main():
        config = EngineConfig(writer=sys.argv[2] if len(sys.argv) > 2 else "thread")
        async with Engine.open(sys.argv[1], config) as engine:
            await engine.create_topic("t")
            print("ready", flush=True)
            await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def test_another_process_is_refused_and_kill_9_frees_the_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(data)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "ready"
            with pytest.raises(DataDirLockedError, match=rf"pid {holder.pid}\b"):
                DirectoryLock.acquire(data)
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
    lock = DirectoryLock.acquire(data)  # the kernel dropped the dead holder's lock
    lock.release()
    lock.release()  # idempotent


def _start_holder(data: Path, writer: str) -> subprocess.Popen[str]:
    """The holder script on ``data``, once it has said it is ready."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(data), writer], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "ready"
    return holder


def _children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


async def test_an_orphaned_writer_process_keeps_the_lock_until_it_exits(tmp_path: Path) -> None:
    """kill -9 of an engine whose writer is a process: the child holds the lock while it
    may still commit a flush. It is stopped here so that the moment lasts: a plain acquire
    is refused, a restart waits, and opens as soon as the child has exited."""
    data = tmp_path / "data"
    holder = await asyncio.to_thread(_start_holder, data, "process")
    try:
        (writer,) = _children(holder.pid)
        with pytest.raises(DataDirLockedError):  # a live owner: refused at once
            await DirectoryLock.acquire_when_free(data, wait=30)
        os.kill(writer, signal.SIGSTOP)
    finally:
        holder.send_signal(signal.SIGKILL)
        await asyncio.to_thread(holder.wait, 30)
        assert holder.stdout is not None
        holder.stdout.close()
    try:
        with pytest.raises(DataDirLockedError, match=rf"pid {holder.pid}\b"):
            DirectoryLock.acquire(data)  # the owner is dead, its writer is not
        with pytest.raises(DataDirLockedError):
            await DirectoryLock.acquire_when_free(data, wait=0.2)
        waiting = asyncio.create_task(DirectoryLock.acquire_when_free(data, wait=30))
        await asyncio.sleep(0.1)
        assert not waiting.done()
    finally:
        os.kill(writer, signal.SIGCONT)  # it reads end of file and exits
    lock = await asyncio.wait_for(waiting, timeout=30)
    lock.release()
    async with Engine.open(data) as engine:  # what the dead owner acknowledged is there
        assert (await engine.stats("t"))["entries"] == 0
