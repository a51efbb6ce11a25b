"""The data directory's owner lock: one process (and one engine) per directory.

``flock(LOCK_EX | LOCK_NB)`` on ``<dir>/txnstream.lock``, held for the life of the
store. The kernel drops it when the holder exits, ``kill -9`` included, so a stale file
never blocks a restart; the holder's pid is written into the file to name it in the
error a second opener gets. A store's writer process inherits the lock (see
:mod:`txnstream.ledger._writer_process`), so after a ``kill -9`` of the owner the lock lives on
for the moment the child takes to finish its flush and exit: a restart waits for that
(:meth:`DirectoryLock.acquire_when_free`) when the pid in the file has no process.
Separate opens conflict even within one process, so two engines in one process are
refused too. Advisory: it guards against txnstream processes
(a server, an embedded engine, a drill, a Spark ``path`` writer), not other programs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from pathlib import Path

from ._errors import DataDirLockedError

LOCK_FILE = "txnstream.lock"
ORPHAN_WAIT = 10.0
"""Seconds an opener waits for a lock whose recorded holder has exited (its writer
process finishing a flush; a flush takes milliseconds, a busy disk can take seconds)."""


class DirectoryLock:
    """An exclusive lock on a data directory; :meth:`acquire` it, :meth:`release` it."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd = fd
        self.path = path

    @classmethod
    def acquire(cls, directory: str | Path) -> DirectoryLock:
        """Lock ``directory`` now or raise :class:`DataDirLockedError` (never waits)."""
        path = Path(directory) / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirLockedError(
                f"data directory {Path(directory).resolve()} is locked: in use by another"
                f" txnstream process (pid {holder})"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            # All or nothing: if the pid cannot be written (a full disk), the lock goes
            # with the descriptor, or every later open would meet a lock held by nobody.
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    @classmethod
    async def acquire_when_free(
        cls, directory: str | Path, wait: float = ORPHAN_WAIT
    ) -> DirectoryLock:
        """:meth:`acquire`, but while the pid in the lock file names no process (the
        lock is held by the writer process of an owner that died), retry for up to
        ``wait`` seconds. A live holder is refused at once, as by :meth:`acquire`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            try:
                return cls.acquire(directory)
            except DataDirLockedError:
                if _holder_alive(Path(directory) / LOCK_FILE) or loop.time() >= deadline:
                    raise
            await asyncio.sleep(0.01)

    def fileno(self) -> int:
        """The lock's descriptor (a child that inherits it holds the lock too)."""
        return self._fd

    def release(self) -> None:
        """Release the lock (idempotent); the file stays, empty."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = -1


def _holder_alive(path: Path) -> bool:
    """Whether the pid recorded in the lock file names a process (True if unknown)."""
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
