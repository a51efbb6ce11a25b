"""The crash drill's ``txnstream serve`` child: a new loopback port and client per start.

Each start gets a port no earlier start used, and its own :class:`AsyncClient`, so a
request pinned to an earlier server (a transaction's commit, an ack) can never reach a
later one: it fails to connect, which says the request was not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import txnstream
from txnstream.api.client import AsyncClient, TxnStreamHttpError

from ._errors import DrillError

REQUEST_TIMEOUT = 15.0
"""Seconds per request of the workload (a long poll waits 1 s)."""

# The folder that holds the imported ``txnstream`` package (not symlink-resolved: in the
# repository that is its root, where ``txnstream/`` links the layers in), so the child
# imports the same code, installed or not, and no layer folder lands on its path.
_IMPORT_ROOT = Path(txnstream.__file__).parent.parent


def _free_port(avoid: set[int]) -> int:
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port
    raise DrillError("no free loopback port")


class ServerChild:
    """The server process over one data directory; ``client`` talks to the current start."""

    def __init__(self, data: Path, log_path: Path) -> None:
        self.data = data
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.generation = 0
        self.up = asyncio.Event()
        self._ports: set[int] = set()
        self._clients: list[AsyncClient] = []
        self.min_free_bytes: int | None = None
        """``--min-free-bytes`` of the next start (None: the server's default)."""

    @property
    def client(self) -> AsyncClient:
        """The client of the newest start (of a dead server while it restarts)."""
        if not self._clients:
            raise DrillError("the server was never started")
        return self._clients[-1]

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_IMPORT_ROOT), env.get("PYTHONPATH")) if p
        )
        args = [sys.executable, "-m", "txnstream", "serve", "--data", str(self.data)]
        args += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        if self.min_free_bytes is not None:
            args += ["--min-free-bytes", str(self.min_free_bytes)]
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.generation + 1} on port {port}\n".encode())
            log.flush()
            return subprocess.Popen(
                args,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def start(self, timeout: float = 45.0) -> float:
        """Start the child and wait for ``/v1/health``; returns seconds taken."""
        started = time.monotonic()
        status: int | None = None
        for _attempt in range(3):
            port = _free_port(self._ports)
            self._ports.add(port)
            proc = self.proc = self._spawn(port)
            client = AsyncClient(
                f"http://127.0.0.1:{port}", timeout=REQUEST_TIMEOUT, trust_env=False
            )
            self._clients.append(client)
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(TxnStreamHttpError):
                    if (await client.health()).get("status") == "ok":
                        self.generation += 1
                        self.up.set()
                        return time.monotonic() - started
                await asyncio.sleep(0.05)
            status = proc.poll()
            if status is None:
                self.kill()
                raise DrillError(f"server not healthy after {timeout:.0f} s; see {self.log_path}")
            # it exited: maybe its port was taken meanwhile; try another one
        raise DrillError(f"server exited at start (status {status}); see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL the child (marks the server down first) and reap it."""
        self.up.clear()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)

    async def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout``; returns the exit status."""
        self.up.clear()
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(proc.wait, timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        return proc.returncode

    def pause(self) -> None:
        """SIGSTOP the child (every request waits; nothing fails)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT the child."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def close_clients(self) -> None:
        """Close the client of every start."""
        for client in self._clients:
            await client.close()
