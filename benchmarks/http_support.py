"""What the HTTP benchmarks (H, M1) share: servers started from a temporary
directory on a free loopback port and stopped by pid, and two HTTP clients (a raw
asyncio keep-alive pool, or httpx)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks.core import REPO_ROOT

CONCURRENCY = 64
_JSON = {"content-type": "application/json"}
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- servers ---------------------------------------------------------------------------


def free_port() -> int:
    """A currently free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(slots=True)
class Server:
    """A server subprocess on loopback."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def cpu_seconds(self) -> float:
        """User + system CPU time of the process so far (all its threads)."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime, stime

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def server_process(
    name: str, argv: Callable[[int], list[str]], ready_path: str, log_path: Path
) -> Iterator[Server]:
    """Start ``argv(port)`` on a free loopback port, wait until ``ready_path`` answers
    200, yield it; terminate (then kill) it on the way out, whatever happens."""
    port = free_port()
    path = [str(REPO_ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv(port), cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    server = Server(name, proc, f"http://127.0.0.1:{port}", log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(server.url + ready_path, timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} server did not start:\n{server.log_tail()}")
            time.sleep(0.1)
        yield server
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def txnstream_argv(data: Path) -> Callable[[int], list[str]]:
    """``txnstream serve`` on ``data`` (default durability: full)."""
    return lambda port: [
        *(sys.executable, "-m", "txnstream", "serve", "--data", str(data)),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
    ]


def h0_argv(port: int) -> list[str]:
    """The bare app under the same uvicorn settings as ``serve``."""
    return [
        *(sys.executable, "-m", "uvicorn", "benchmarks.h0_app:app"),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"),
        *("--no-access-log", "--timeout-keep-alive", "30"),
    ]


# -- HTTP clients ----------------------------------------------------------------------


class HttpError(RuntimeError):
    """A response with an unexpected status."""


class RawConnection:
    """One HTTP/1.1 keep-alive connection on asyncio streams: one request at a time, the
    request written with a single ``write``, the response read by ``Content-Length``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> RawConnection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def request(self, method: str, target: str, body: bytes | None) -> tuple[int, bytes]:
        head = f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode("ascii") + b"\r\n" + (body or b""))
        response = await self.reader.readuntil(b"\r\n\r\n")
        lines = response.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise HttpError(f"{target}: chunked responses are not supported")
        if length is None:
            raise HttpError(f"{target}: response without Content-Length")
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


class Client:
    """``request(method, target, body) -> (status, body)`` over up to ``size`` keep-alive
    connections to ``url`` (loopback only).

    ``generator="raw"`` (default): :class:`RawConnection` s, each used by one request at
    a time. ``generator="httpx"``: one ``httpx.AsyncClient`` with ``size`` connections
    (kept for comparison; its connection pool costs milliseconds of client CPU per
    request here, encode/httpx#3215, so it cannot load the server).
    """

    def __init__(self, url: str, size: int = CONCURRENCY, generator: str = "raw") -> None:
        host, _, port = url.removeprefix("http://").partition(":")
        if host != "127.0.0.1":
            raise ValueError("benchmark clients talk to loopback only")
        self.host, self.port = host, int(port)
        self.generator = generator
        self._idle: list[RawConnection] = []
        self._all: list[RawConnection] = []
        self._httpx: httpx.AsyncClient | None = None
        if generator == "httpx":
            limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
            self._httpx = httpx.AsyncClient(base_url=url, limits=limits, timeout=60.0)
        elif generator != "raw":
            raise ValueError(f"unknown generator {generator!r}")

    async def request(
        self, method: str, target: str, body: bytes | None = None, *, expect: int = 200
    ) -> bytes:
        """The response body; raises :class:`HttpError` unless the status is ``expect``."""
        if self._httpx is not None:
            headers = _JSON if body is not None else None
            response = await self._httpx.request(method, target, content=body, headers=headers)
            status, content = response.status_code, response.content
        else:
            conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = await RawConnection.open(self.host, self.port)
                self._all.append(conn)
            try:
                status, content = await conn.request(method, target, body)
            except BaseException:
                conn.close()
                self._all.remove(conn)
                raise
            self._idle.append(conn)
        if status != expect:
            raise HttpError(f"{method} {target}: {status} (expected {expect}): {content[:300]!r}")
        return content

    async def json(self, method: str, target: str, body: Any = None, *, expect: int = 200) -> Any:
        """Send ``body`` as JSON (None: no body), parse the JSON response."""
        data = None if body is None else json.dumps(body).encode()
        return json.loads(await self.request(method, target, data, expect=expect))

    async def aclose(self) -> None:
        for conn in self._all:
            conn.close()
        self._all.clear()
        self._idle.clear()
        if self._httpx is not None:
            await self._httpx.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
