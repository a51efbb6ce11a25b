"""Real PostgreSQL clusters for the tests: Debian's server binaries, run as ``postgres``.

:func:`start_cluster` runs ``initdb`` into a fresh temporary directory (``/tmp``, owned by
the ``postgres`` user when the tests run as root: PostgreSQL refuses to run as root),
starts ``postgres`` on a free loopback port with its Unix socket inside that directory and
waits, bounded, until it accepts a connection. The handle keeps the postmaster's pid and
stops it by pid; it can also ``kill -9`` it, restart it on the same data, freeze it
(``SIGSTOP``/``SIGCONT``) and make a streaming replica (``pg_basebackup -R``, synchronous
through ``synchronous_standby_names``) that can be promoted: the faults of the failover
tests. Self-contained (standard library and psycopg): the benchmarks may use it too.

A kill or a freeze reaches the postmaster and every backend at once, as losing or pausing
the machine would (a ``kill -9`` of the postmaster alone leaves its backends running until
they notice, and a restart on the same data waits for them).

Settings: trust authentication, for loopback TCP and the socket only
(``listen_addresses=127.0.0.1``); ``fsync=off``, because the tests kill processes, never
the machine, and a killed process loses nothing the kernel already has: a commit still
waits for its WAL write and for the synchronous replica. The server runs as a direct
child (``subprocess``'s ``user=``, not ``runuser``, which would stand between us and the
postmaster: its pid is what a ``kill -9`` or a ``SIGSTOP`` must reach).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

SUPERUSER = "postgres"
READY_TIMEOUT = 60.0
"""Seconds a start, restart or promotion may take before it counts as failed."""
DEBIAN_ROOT = Path("/usr/lib/postgresql")
"""Where Debian's ``postgresql`` package puts each major version's ``bin/``."""
STOP_TIMEOUT = 20.0
"""Seconds a fast shutdown may take before the server is killed."""

# Small clusters: several run at once on a shared machine.
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "'32MB'",
    "max_connections": "60",
    "max_wal_senders": "5",
    "wal_level": "replica",
    "wal_keep_size": "'64MB'",
    "logging_collector": "off",
    "log_min_messages": "warning",
}
_HBA = """\
# trust, loopback only (the server listens on 127.0.0.1 and its socket directory)
local   all          all                 trust
host    all          all   127.0.0.1/32  trust
local   replication  all                 trust
host    replication  all   127.0.0.1/32  trust
"""


class PostgresUnavailable(RuntimeError):
    """PostgreSQL's server binaries (or the ``postgres`` user, as root) are missing."""


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def find_bindir() -> Path:
    """The directory of ``initdb`` and ``postgres``: on PATH, else Debian's newest
    ``/usr/lib/postgresql/<major>/bin``; raises :class:`PostgresUnavailable` if none."""
    found = shutil.which("initdb")
    if found and Path(found).resolve().with_name("postgres").exists():
        return Path(found).resolve().parent
    candidates = [
        path
        for path in DEBIAN_ROOT.glob("*/bin")
        if (path / "initdb").exists() and (path / "postgres").exists()
    ]
    if not candidates:
        raise PostgresUnavailable(
            "PostgreSQL's server binaries are missing (no initdb on PATH or under"
            " /usr/lib/postgresql/*/bin): apt-get install postgresql"
        )
    return max(candidates, key=lambda path: _major(path.parent.name))


def _major(name: str) -> int:
    return int(name) if name.isdigit() else -1


def server_user() -> str | None:
    """The user the server runs as: ``postgres`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise PostgresUnavailable(
            "running as root and there is no 'postgres' user to run PostgreSQL as"
            " (apt-get install postgresql creates it)"
        ) from None
    return SUPERUSER


def _run(argv: list[str], user: str | None, timeout: float = 120.0) -> None:
    """Run a PostgreSQL tool (as ``user``); raise with its output if it fails."""
    done = subprocess.run(
        argv, user=user, group=user, extra_groups=[] if user else None,
        capture_output=True, timeout=timeout, check=False, cwd="/",
    )  # fmt: skip
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")
        raise RuntimeError(f"{Path(argv[0]).name} failed ({done.returncode}):\n{output[-3000:]}")


def _chown(path: Path, user: str | None) -> None:
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


@dataclass
class Cluster:
    """One PostgreSQL server: its data directory, port and (while running) process.

    ``directory`` is the temporary directory holding ``data/``, the socket and
    ``server.log``; :meth:`destroy` (or leaving a ``with`` block) stops the server and
    removes it.
    """

    bindir: Path
    directory: Path
    port: int
    user: str | None
    name: str = "primary"
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    replicas: list[Cluster] = field(default_factory=list)

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    @property
    def pid(self) -> int:
        """The postmaster's pid (the server must be running)."""
        assert self.proc is not None, "the server is not running"
        return self.proc.pid

    def url(self, user: str = SUPERUSER, dbname: str = "postgres", **params: str) -> str:
        """A ``postgresql://`` URL of this server over loopback TCP."""
        query = "&".join(f"{key}={quote(value)}" for key, value in params.items())
        return f"postgresql://{quote(user)}@127.0.0.1:{self.port}/{quote(dbname)}" + (
            f"?{query}" if query else ""
        )

    def connect(self, user: str = SUPERUSER, dbname: str = "postgres") -> psycopg.Connection[Any]:
        """A synchronous autocommit connection (for setup and checks)."""
        return psycopg.connect(self.url(user, dbname), autocommit=True, connect_timeout=5)

    def execute(self, sql: str, params: Any = None, dbname: str = "postgres") -> list[Any]:
        """Run one statement as the superuser in autocommit; return its rows (if any)."""
        with self.connect(dbname=dbname) as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description is not None else []

    def create_database(self, dbname: str, owner: str = SUPERUSER) -> str:
        """Create ``dbname`` owned by ``owner`` (a login role, made if missing); its URL."""
        from psycopg import sql

        with self.connect() as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (owner,))
            if exists.fetchone() is None:
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(owner)))
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(dbname), sql.Identifier(owner)
                )
            )
        return self.url(owner, dbname)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the server on its data directory (again, after a stop or a kill) and wait
        until it accepts connections; raises ``RuntimeError`` with the log's tail if not."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        argv = [
            str(self.bindir / "postgres"),
            "-D", str(self.data),
            "-p", str(self.port),
            "-k", str(self.directory),
            "-c", f"cluster_name={self.name}",  # a replica's name for synchronous_standby_names
        ]  # fmt: skip
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                argv, user=self.user, group=self.user,
                extra_groups=[] if self.user else None, cwd="/",
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # no terminal signal of ours reaches it
            )  # fmt: skip
        self.paused = False
        self.wait_ready()

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until the server accepts a connection, at most ``timeout`` s."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited early:\n{self.log_tail()}")
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                last = exc
                time.sleep(0.05)
        raise RuntimeError(f"postgres not ready in {timeout} s ({last}):\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Fast shutdown (SIGINT) by pid; SIGKILL of its process group after ``timeout``."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        if self.paused:
            self.resume()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """``kill -9`` of the server: the postmaster and all its backends at once."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGSTOP)  # a stopped postmaster forks no new backend
        processes = [*_children(proc.pid), proc.pid]
        for pid in processes:
            _signal(pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT)
        self.paused = False
        _wait_gone(processes)

    def restart(self) -> None:
        """Stop (fast) if running, then start again on the same data and port."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """``SIGSTOP`` the postmaster and every backend: connections stay open, nothing
        is answered (a frozen machine, or a process paused for longer than a lease)."""
        os.kill(self.pid, signal.SIGSTOP)
        for pid in _children(self.pid):
            _signal(pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """``SIGCONT`` after :meth:`pause`."""
        for pid in _children(self.pid):
            _signal(pid, signal.SIGCONT)
        os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.destroy()

    def destroy(self) -> None:
        """Stop this server and its replicas and remove their directories."""
        for replica in self.replicas:
            replica.destroy()
        try:
            self.stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- replication -------------------------------------------------------------------

    def add_replica(self, name: str = "replica1", synchronous: bool = True) -> Cluster:
        """A streaming replica of this (running) primary, started and caught up.

        Made by ``pg_basebackup -R`` (which writes ``standby.signal`` and
        ``primary_conninfo``); with ``synchronous``, the primary's
        ``synchronous_standby_names`` names it, so a commit on the primary returns only
        once the replica has flushed it. Returns when the primary reports it streaming
        (and ``sync`` when synchronous).
        """
        replica = _new_cluster(self.bindir, self.user, name=name)
        self.replicas.append(replica)
        _run(
            [
                str(self.bindir / "pg_basebackup"),
                "-D", str(replica.data),
                "-d", self.url(application_name=name),
                "-R", "-X", "stream", "-c", "fast", "--no-sync",
            ],
            self.user,
        )  # fmt: skip
        replica.start()
        if synchronous:
            self.execute(f"ALTER SYSTEM SET synchronous_standby_names = '\"{name}\"'")
            self.execute("SELECT pg_reload_conf()")
        want = "sync" if synchronous else "async"
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            rows = self.execute(
                "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                (name,),
            )
            if rows and rows[0] == ("streaming", want):
                return replica
            if time.monotonic() > deadline:
                raise RuntimeError(f"replica {name} not streaming ({rows}):\n{replica.log_tail()}")
            time.sleep(0.05)

    def promote(self, timeout: float = READY_TIMEOUT) -> None:
        """Promote this replica to a primary; returns once it accepts writes."""
        rows = self.execute("SELECT pg_promote(wait => true, wait_seconds => %s)", (int(timeout),))
        if rows != [(True,)]:
            raise RuntimeError(f"promotion of {self.name} failed:\n{self.log_tail()}")

    def in_recovery(self) -> bool:
        """True while this server is a standby."""
        return bool(self.execute("SELECT pg_is_in_recovery()")[0][0])


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (a postmaster's backends and helpers; each is its
    own process group leader, so ``killpg`` of the postmaster's group misses them)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


async def waiting_on_a_lock(observer: psycopg.AsyncConnection[Any], pid: int) -> bool:
    """True while the backend ``pid`` waits for a lock (a row lock, say), as
    ``pg_stat_activity`` seen from ``observer`` says."""
    cur = await observer.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
    )
    row = await cur.fetchone()
    return row is not None and row[0] == "Lock"


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _wait_gone(pids: list[int]) -> None:
    """Wait (bounded) until every pid has exited (a zombie counts as gone): a restart on
    the same data refuses while an old backend still holds the shared memory."""
    deadline = time.monotonic() + STOP_TIMEOUT
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                break
            if state == "Z":
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"process {pid} of a killed PostgreSQL did not exit")


def _new_cluster(bindir: Path, user: str | None, name: str) -> Cluster:
    directory = Path(tempfile.mkdtemp(prefix=f"txnstream-pg-{name}-"))
    _chown(directory, user)
    return Cluster(bindir=bindir, directory=directory, port=free_port(), user=user, name=name)


def start_cluster(**settings: str) -> Cluster:
    """initdb a new cluster in a fresh temporary directory and start it.

    ``settings`` are extra ``postgresql.conf`` lines (``name=value`` as PostgreSQL writes
    them, strings quoted). Raises :class:`PostgresUnavailable` when PostgreSQL is not
    installed, ``RuntimeError`` when it does not start.
    """
    bindir = find_bindir()
    user = server_user()
    cluster = _new_cluster(bindir, user, name="primary")
    try:
        _run(
            [
                str(bindir / "initdb"),
                "-D", str(cluster.data),
                "-U", SUPERUSER,
                "-A", "trust",
                "-E", "UTF8", "--locale=C", "--no-sync",
            ],
            user,
        )  # fmt: skip
        conf = {**_SETTINGS, **settings}
        with open(cluster.data / "postgresql.conf", "a") as file:
            file.write("\n# txnstream tests\n")
            file.writelines(f"{key} = {value}\n" for key, value in conf.items())
        (cluster.data / "pg_hba.conf").write_text(_HBA)
        cluster.start()
    except BaseException:
        cluster.destroy()
        raise
    return cluster


def start_test_cluster() -> Cluster:
    """:func:`start_cluster` for a test: without PostgreSQL the test is skipped, saying
    why, or failed when ``CI`` is set (there, ``.ci/run`` installs it and the PostgreSQL
    tests must run)."""
    import pytest

    try:
        return start_cluster()
    except PostgresUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI is set: .ci/run installs it; the PostgreSQL tests must run)")
        pytest.skip(str(exc))
