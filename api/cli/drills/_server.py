"""The crash drill's ``txnstream serve`` children.

:class:`ServerChild` is one server over a data directory. Each start gets a port no
earlier start used, and its own :class:`AsyncClient`, so a request pinned to an earlier
server (a transaction's commit, an ack) can never reach a later one: it fails to
connect, which says the request was not sent.

:class:`ServerFleet` is several servers on one PostgreSQL store (``--store URL
--servers N``): one active, the others standbys, and a client that follows the active.
Both do what the workload asks of :class:`DrillServers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

import txnstream
from txnstream.api.client import AsyncClient, TxnStreamHttpError, TxnStreamTransportError

from ._errors import DrillError
from ._history import Failover, History

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


def _serve(
    args: list[str], log_path: Path, note: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m txnstream serve ARGS`` in a session of its own, logging to ``log_path``
    (after a ``--- note`` line), importing the same txnstream as this process."""
    environment = {**os.environ, **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_IMPORT_ROOT), environment.get("PYTHONPATH")) if p
    )
    command = [sys.executable, "-m", "txnstream", "serve", *args, "--log-level", "warning"]
    with open(log_path, "ab") as log:
        log.write(f"--- {note}\n".encode())
        log.flush()
        return subprocess.Popen(
            command,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _kill(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL ``proc`` if it runs, and reap it."""
    if proc is not None and proc.poll() is None:
        proc.kill()
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)


async def _terminate(proc: subprocess.Popen[bytes] | None, timeout: float) -> int | None:
    """SIGTERM (a clean shutdown), SIGKILL after ``timeout``; the exit status (None when
    it had to be killed or never started)."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return None
    return proc.returncode


class DrillServers(Protocol):
    """What the workload asks of the server(s) it runs against."""

    up: asyncio.Event
    """Set while requests may be sent."""

    @property
    def log_path(self) -> Path: ...

    @property
    def client(self) -> AsyncClient: ...

    def session(self, client: AsyncClient) -> str:
        """Names the consumer session ``client``'s last answer belongs to."""
        ...

    async def start(self) -> float: ...

    async def crash(self, history: History, rng: random.Random) -> None:
        """One ``kill -9`` and the recovery from it, recorded in ``history``."""
        ...

    def alive(self) -> bool: ...

    def kill(self) -> None: ...

    async def stop(self) -> int | None: ...

    async def close_clients(self) -> None: ...


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

    def session(self, client: AsyncClient) -> str:
        """One per start: each start has its own client, on its own port."""
        return client.url

    async def crash(self, history: History, rng: random.Random) -> None:
        """SIGKILL the child, then start it again (on a new port)."""
        self.kill()
        history.kills += 1
        await asyncio.sleep(rng.uniform(0.0, 0.3))
        history.restart_seconds.append(await self.start())

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        args = ["--data", str(self.data), "--host", "127.0.0.1", "--port", str(port)]
        if self.min_free_bytes is not None:
            args += ["--min-free-bytes", str(self.min_free_bytes)]
        note = f"start {self.generation + 1} on port {port}"
        return _serve(args, self.log_path, note)

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
        _kill(self.proc)

    async def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM (a clean shutdown), SIGKILL after ``timeout``; returns the exit status."""
        self.up.clear()
        return await _terminate(self.proc, timeout)

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


class _Member:
    """One ``serve --store URL`` of a :class:`ServerFleet`, always on the same port."""

    def __init__(self, index: int, port: int, log_path: Path) -> None:
        self.index = index
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.probe = AsyncClient(self.url, timeout=2.0, trust_env=False)
        """A client of this server alone: its own health, 200 or 503 ``standby``."""

    def spawn(self, store: str, lease_timeout: float) -> None:
        args = ["--host", "127.0.0.1", "--port", str(self.port), "--advertise-url", self.url]
        args += ["--lease-timeout", f"{lease_timeout:g}"]
        self.starts += 1
        note = f"start {self.starts} on port {self.port}"
        # the store in the environment, not on the command line: it may hold a password
        self.proc = _serve(args, self.log_path, note, {"TXNSTREAM_STORE": store})

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def status(self) -> str | None:
        """``ok``, ``standby``, ...; None when it does not answer."""
        try:
            return str((await self.probe.health()).get("status"))
        except (TxnStreamHttpError, TxnStreamTransportError):
            return None

    async def wait_status(self, wanted: set[str], timeout: float) -> str:
        """Poll health until it is one of ``wanted``; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise DrillError(f"server {self.url} exited; see {self.log_path}")
            status = await self.status()
            if status in wanted:
                return status
            await asyncio.sleep(0.05)
        raise DrillError(
            f"server {self.url} not {' or '.join(sorted(wanted))} after {timeout:.0f} s;"
            f" see {self.log_path}"
        )

    def kill(self) -> None:
        _kill(self.proc)

    async def stop(self, timeout: float) -> int | None:
        """SIGTERM, SIGKILL after ``timeout``; the exit status (None if it was killed)."""
        return await _terminate(self.proc, timeout)


class ServerFleet:
    """``count`` servers on one PostgreSQL store: one active, the others standbys.

    ``client`` is given every server's URL and follows the active itself. :meth:`crash`
    is one failover: ``kill -9`` of the active (found by health: 200 ``ok`` versus 503
    ``standby``), the first standby to answer ``ok`` is the new active, and the killed
    server is restarted on its port, where it comes back as a standby. Each failover
    starts a new client (an era): the workload resends its last acknowledged idempotent
    batch to it, and a consumer's session (one server's tenure as the active) is told
    apart from an earlier tenure of the same URL.
    """

    def __init__(
        self,
        store: str,
        count: int,
        log_dir: Path,
        *,
        lease_timeout: float,
        failover_timeout: float,
    ) -> None:
        self.store = store
        self.lease_timeout = lease_timeout
        self.failover_timeout = failover_timeout
        self.log_path = log_dir / "drill-serve-*.log"
        """Where the servers log (one file per server; the glob names them all)."""
        self.up = asyncio.Event()
        avoid: set[int] = set()
        self.members: list[_Member] = []
        for index in range(count):
            port = _free_port(avoid)
            avoid.add(port)
            log = log_dir / f"drill-serve-{index + 1}.log"
            self.members.append(_Member(index, port, log))
        self._clients: list[AsyncClient] = []
        self._expected: set[int] = set()
        """Members that should be running (the others were killed on purpose)."""

    @property
    def urls(self) -> list[str]:
        return [m.url for m in self.members]

    @property
    def client(self) -> AsyncClient:
        """The client of the newest era (given every server's URL)."""
        if not self._clients:
            raise DrillError("the servers were never started")
        return self._clients[-1]

    def session(self, client: AsyncClient) -> str:
        """The consumer session of ``client``'s last answer: that server in that era."""
        return f"{client.url} (era {self._clients.index(client) + 1})"

    def _new_era(self) -> None:
        self._clients.append(
            AsyncClient(
                self.urls,
                timeout=REQUEST_TIMEOUT,
                failover_timeout=self.failover_timeout,
                trust_env=False,
            )
        )

    async def _launch(self, member: _Member, wanted: set[str]) -> str:
        member.spawn(self.store, self.lease_timeout)
        self._expected.add(member.index)
        return await member.wait_status(wanted, 45.0 + self.lease_timeout)

    async def start(self) -> float:
        """Start every server (the first becomes the active); returns seconds taken."""
        started = time.monotonic()
        first, *others = self.members
        await self._launch(first, {"ok"})
        for member in others:
            await self._launch(member, {"standby"})
        self._new_era()
        self.up.set()
        return time.monotonic() - started

    async def active(self) -> _Member:
        """The server whose health says ``ok`` (waiting for one, bounded)."""
        deadline = time.monotonic() + self.failover_timeout
        while True:
            for member in self.members:
                if member.index in self._expected and await member.status() == "ok":
                    return member
            if time.monotonic() > deadline:
                raise DrillError(f"no active server after {self.failover_timeout:.0f} s")
            await asyncio.sleep(0.05)

    async def crash(self, history: History, rng: random.Random) -> None:
        """One failover: kill -9 the active, time the takeover, restart it as a standby."""
        victim = await self.active()
        self._expected.discard(victim.index)
        alone = len(self.members) == 1
        if alone:  # nobody to take over: the workload waits, as for a server of its own
            self.up.clear()
        killed = time.monotonic()
        victim.kill()
        history.kills += 1
        if alone:  # it comes back as a standby and serves once its old lease expired
            await self._launch(victim, {"ok"})
            history.restart_seconds.append(time.monotonic() - killed)
            self._new_era()
            self.up.set()
            return
        successor = await self._takeover(victim, killed)
        history.failovers.append(Failover(victim.url, successor.url, time.monotonic() - killed))
        self._new_era()
        restarted = time.monotonic()
        await self._launch(victim, {"standby"})
        history.restart_seconds.append(time.monotonic() - restarted)

    async def _takeover(self, victim: _Member, killed: float) -> _Member:
        deadline = killed + self.failover_timeout
        while time.monotonic() < deadline:
            for member in self.members:
                if member is not victim and member.alive() and await member.status() == "ok":
                    return member
            await asyncio.sleep(0.02)
        raise DrillError(
            f"no standby took over within {self.failover_timeout:.0f} s of killing"
            f" {victim.url}; see {self.log_path}"
        )

    def alive(self) -> bool:
        """Every server not killed on purpose is running."""
        return all(m.alive() for m in self.members if m.index in self._expected)

    def kill(self) -> None:
        """SIGKILL every server (the way out when the drill failed)."""
        self.up.clear()
        for member in self.members:
            member.kill()

    async def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM the standbys, then the active; returns the active's exit status."""
        self.up.clear()
        statuses = {}
        active = [m for m in self.members if m.alive() and await m.status() == "ok"]
        for member in [m for m in self.members if m not in active] + active:
            statuses[member.index] = await member.stop(timeout)
        self._expected.clear()
        if active:
            return statuses[active[0].index]
        return next(iter(statuses.values()), None)

    async def close_clients(self) -> None:
        """Close every era's client and the health probes."""
        for client in self._clients:
            await client.close()
        for member in self.members:
            await member.probe.close()
