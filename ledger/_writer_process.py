"""The writer process: a store's flushes applied by a child process (``writer="process"``).

Why: with the writer in a thread, SQLite's work and the event loop share one GIL. Each
statement the thread runs gives the GIL back around ``sqlite3_step`` and must wait to
take it again while the loop is busy, and binding a flush's parameters holds it. An HTTP
server, whose loop is busy parsing requests, measured here 13-19 ms per flush of ~1,550
rows against ~4.4 ms of SQLite work, most of it waiting; with the writer in a process
the loop and SQLite run on separate cores (HTTP produce +10-35% in A/B runs here). An
embedded engine whose loop is mostly idle gains nothing and pays for packing each flush,
so the thread stays the default there.

The child runs :mod:`txnstream.ledger._sqlwriter` (its protocol is described there): one frame per
flush, one reply each, in order; a store has at most one flush in flight, so a reply
always answers the oldest frame sent.

Safety:

* The child inherits the directory lock's descriptor, and a ``flock`` lives until every
  descriptor of it is closed: while the child may still commit, no other process can
  open the directory. After a ``kill -9`` of the owner the child finishes the flush it
  has (never acknowledged, but durable: recovery treats it like a flush that reached
  disk just before a crash), sees end of file on its stdin and exits; a restart waits
  for that (see :meth:`DirectoryLock.acquire_when_free`).
* The child ignores SIGINT and SIGTERM: only its owner stops it, by closing its stdin
  once the last flush is durable.
* If the child dies, the flush in flight fails and so does the store
  (:class:`EngineFailedError`; an engine with ``auto_recover`` reopens and recovers).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import msgpack
import msgspec

from . import _sqlwriter
from ._codec import PACK_ERRORS
from ._errors import EngineFailedError
from ._sqlwriter import FAILED, HEADER, OK, Statements

log = logging.getLogger("txnstream.store")

# A flush of a busy server is ~200 KB. Through a 64 KB pipe the loop would send it in
# pieces, waiting for the child to drain each: one piece at a time, each a loop wake-up.
_PIPE_SIZE = 1 << 20  # Linux's default pipe-max-size for unprivileged processes
# Packing copies every payload: a 32 MB produce request takes ~14 ms here (~0.5 ms a MB).
# From this many payload bytes on, a flush is packed in a worker thread, not on the loop.
_PACK_IN_THREAD = 1 << 20
_pack = msgspec.msgpack.encode
"""Packs a flush for the child, which reads it with msgpack: the same MessagePack (bytes
as bin, str as str, tuples as arrays) at a quarter of ``msgpack.packb``'s time (3.5 against
14 us for a flush of 100 entries, 4% of an HTTP server's loop before). Its errors for what
msgpack refuses too are the same ``TypeError`` and ``OverflowError``; it is stateless,
so the large flushes pack in a worker thread as before."""
_STOP_TIMEOUT = 30.0  # seconds the child may take to exit after its stdin closes

Reply = Callable[[BaseException | None], None]
Lost = Callable[[BaseException], None]


def _rebuild(name: str, message: str, errno: int | None) -> BaseException:
    """The child's exception as the one the writer thread would have raised (the store
    tells transient errors and a full disk apart by type and message)."""
    kind = getattr(sqlite3, name, None)
    if isinstance(kind, type) and issubclass(kind, sqlite3.Error):
        return kind(message)
    if errno is not None:
        return OSError(errno, message)
    return EngineFailedError(f"the writer process failed: {name}: {message}")


class _Replies(asyncio.Protocol):
    """Parses the child's stdout into replies."""

    def __init__(self, owner: WriterProcess) -> None:
        self._owner = owner
        self._buffer = bytearray()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while buffer:
            kind = buffer[:1]
            if kind == OK:
                del buffer[:1]
                self._owner._replied(None)
                continue
            if kind != FAILED:
                self._owner._lost(f"sent a malformed reply ({bytes(buffer[:16])!r})")
                buffer.clear()
                return
            if len(buffer) < 1 + HEADER.size:
                return  # the rest of the failure comes with the next read
            end = 1 + HEADER.size + HEADER.unpack_from(buffer, 1)[0]
            if len(buffer) < end:
                return
            name, message, errno = msgpack.unpackb(bytes(buffer[1 + HEADER.size : end]))
            del buffer[:end]
            self._owner._replied(_rebuild(name, message, errno))

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._lost("exited")


class WriterProcess:
    """The child process that applies a store's flushes; see the module docstring."""

    def __init__(self, proc: subprocess.Popen[bytes], on_reply: Reply, on_lost: Lost) -> None:
        self._proc = proc
        self._on_reply = on_reply
        self._on_lost = on_lost
        self._stdin: asyncio.WriteTransport | None = None
        self._stdout: asyncio.ReadTransport | None = None
        self._waiting = 0  # frames sent and not answered yet (the first is the handshake)
        self._gone = False
        self._stopping = False

    @classmethod
    async def start(
        cls, db: Path, synchronous: str, lock_fd: int, on_reply: Reply, on_lost: Lost
    ) -> WriterProcess:
        """Start the child for ``db`` and wait until its connection is set up.

        ``on_reply`` gets each flush's outcome (None or the exception); ``on_lost``
        gets an :class:`EngineFailedError` if the child ends while no flush is in
        flight. Raises :class:`EngineFailedError` if the child does not start.
        """
        argv = [sys.executable, "-I", _sqlwriter.__file__, str(db), synchronous]
        try:
            proc = await asyncio.to_thread(
                subprocess.Popen,
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                pass_fds=(lock_fd,),  # the lock lives until the child exits too
            )
        except OSError as exc:  # no interpreter at sys.executable (Python embedded in C)
            raise EngineFailedError(
                f"cannot start the writer process ({exc}); use writer='thread'"
            ) from exc
        assert proc.stdin is not None
        assert proc.stdout is not None
        with contextlib.suppress(OSError):  # (a smaller pipe still works, just slower)
            fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[BaseException | None] = loop.create_future()

        def handshake(exc: BaseException | None) -> None:
            if not ready.done():
                ready.set_result(exc)

        self = cls(proc, handshake, handshake)
        self._waiting = 1
        try:
            self._stdin, _ = await loop.connect_write_pipe(asyncio.BaseProtocol, proc.stdin)
            self._stdout, _ = await loop.connect_read_pipe(lambda: _Replies(self), proc.stdout)
            failure = await ready
        except BaseException:
            await self._stop(kill=True)
            raise
        if failure is not None:
            await self._stop(kill=True)
            if isinstance(failure, EngineFailedError):
                raise failure
            raise EngineFailedError(f"the writer process did not start: {failure}")
        self._on_reply, self._on_lost = on_reply, on_lost
        return self

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._proc.pid

    def apply(self, statements: Statements, size: int) -> None:
        """Send one flush (``size``: its payload bytes); its outcome goes to
        ``on_reply`` (soon, if it cannot be sent)."""
        loop = asyncio.get_running_loop()
        if self._gone or self._stdin is None or self._stdin.is_closing():
            error = EngineFailedError("the writer process has exited")
            loop.call_soon(self._on_reply, error)
            return
        self._waiting += 1
        if size >= _PACK_IN_THREAD:
            packing = loop.run_in_executor(None, _pack, statements)
            packing.add_done_callback(self._packed)
            return
        try:
            body = _pack(statements)
        except PACK_ERRORS as exc:  # a value SQLite cannot take
            self._waiting -= 1
            loop.call_soon(self._on_reply, exc)
            return
        self._send(body)

    def _packed(self, packing: asyncio.Future[bytes]) -> None:
        if self._gone:
            return  # the child died meanwhile: _lost has failed this flush already
        try:
            body = packing.result()
        except PACK_ERRORS as exc:
            self._waiting -= 1
            self._on_reply(exc)
            return
        self._send(body)

    def _send(self, body: bytes) -> None:
        assert self._stdin is not None
        self._stdin.writelines((HEADER.pack(len(body)), body))

    def _replied(self, exc: BaseException | None) -> None:
        if self._waiting == 0:
            self._lost("replied to nothing it was sent")
            return
        self._waiting -= 1
        self._on_reply(exc)

    def _lost(self, what: str) -> None:
        if self._gone:
            return
        self._gone = True
        if self._stopping:
            return
        code = self._proc.poll()
        error = EngineFailedError(
            f"the writer process (pid {self._proc.pid}) {what}"
            + ("" if code is None else f" with code {code}")
        )
        log.error("%s", error)
        if self._stdin is not None and not self._stdin.is_closing():
            self._stdin.abort()  # (it may have seen the broken pipe first)
        if self._waiting:  # the flush in flight fails with it
            self._waiting = 0
            self._on_reply(error)
        else:
            self._on_lost(error)

    async def close(self) -> None:
        """Let the child finish what it was sent and exit (idempotent)."""
        await self._stop(kill=False)

    async def _stop(self, *, kill: bool) -> None:
        self._stopping = True
        proc = self._proc
        if self._stdin is not None:
            if not self._stdin.is_closing():
                self._stdin.close()  # end of file once what is buffered is written
        elif proc.stdin is not None:
            proc.stdin.close()
        if kill:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        try:
            await asyncio.to_thread(proc.wait, _STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.error("the writer process (pid %d) did not exit; killing it", proc.pid)
            proc.kill()
            await asyncio.to_thread(proc.wait)
        if self._stdout is not None:
            if not self._stdout.is_closing():
                self._stdout.close()
        elif proc.stdout is not None:
            proc.stdout.close()
