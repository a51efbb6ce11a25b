"""The data directory's owner lock: one process (and one engine) per directory.

``flock(LOCK_EX | LOCK_NB)`` on ``<dir>/txnstream.lock``, held for the life of the
store. The kernel drops it when the holder exits, ``kill -9`` included, so a stale file
never blocks a restart; the holder's pid is written into the file only to name it in
the error a second opener gets. Separate opens conflict even within one process, so two
engines in one process are refused too. Advisory: it guards against txnstream processes
(a server, an embedded engine, a drill, a Spark ``path`` writer), not other programs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ._errors import DataDirLockedError

LOCK_FILE = "txnstream.lock"


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
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        """Release the lock (idempotent); the file stays, empty."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)
        self._fd = -1
