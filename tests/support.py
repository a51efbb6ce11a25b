"""The one support module of the tests: bounded waits, free ports, live servers, draining."""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant
from objectstore import free_port as free_port  # the tests take ports from support
from objectstore import free_ports as free_ports

from txnstream.api import (
    DataDirLockedError,
    Engine,
    EngineConfig,
    Message,
    OutgoingMessage,
    Position,
    SubscriptionHandle,
    TxnId,
)
from txnstream.ledger import DB_FILE


async def wait_until(
    condition: Callable[[], Awaitable[bool]],
    timeout: float,
    what: str,
    interval: float = 0.01,
) -> float:
    """Await ``condition()`` until true; fail after ``timeout`` s. Returns the time taken."""
    started = time.monotonic()
    deadline = started + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - started


def wait_for(
    condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.02
) -> Any:
    """Poll ``condition()`` (synchronous) until truthy; fail after ``timeout`` s. Returns it."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
    return result


@contextmanager
def running_server(data: Path, auth_file: Path | None = None, **options: Any) -> Iterator[str]:
    """A ``txnstream serve`` server over ``data`` on a free loopback port; yields its URL.

    Made by ``api.cli.make_server`` (the lifespan of ``serve``) and run in a background
    thread with its own event loop; stopped (and the engine closed) on exit. With
    ``auth_file``, it requires tokens (``serve --auth``); ``options`` go to ``make_server``
    (``offload_url``, ``ledger_max_entries``, ...).
    """
    from txnstream.api.cli import make_server
    from txnstream.api.cli._serve import access_policy

    port = free_port()
    access = access_policy("127.0.0.1", auth_file=auth_file)
    server = make_server(data, "127.0.0.1", port, log_level="warning", access=access, **options)
    thread = threading.Thread(target=server.run, name="live-server", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), 30, "the live server to start")
    assert server.started, "the live server failed to start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=40)
        assert not thread.is_alive(), "the live server did not stop"


NewStore = Callable[[], AbstractContextManager[Path | str]]
"""The ``new_store`` fixture: ``with new_store() as where:`` gives one more fresh store."""


def store_per_example(max_examples: int = 100) -> settings:
    """Hypothesis settings of a property test whose every example opens a store of its
    own with ``new_store`` (a factory: that it is function-scoped is fine here)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )


def store_sql(store: Path | str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run one statement (``?`` placeholders) on a store no engine has open, as a crash or
    an older txnstream would have left it: the SQLite file of a data directory, or the
    database of a ``postgresql://`` URL. Returns its rows (as tuples)."""
    if isinstance(store, str) and store.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(store, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
            return [tuple(row) for row in cur.fetchall()] if cur.description else []
    with closing(sqlite3.connect(Path(store) / DB_FILE)) as db, db:
        return db.execute(sql, params).fetchall()


async def open_after_kill(store: Path | str, config: EngineConfig) -> Engine:
    """Open a store whose engine was killed: on PostgreSQL once the dead engine's lease has
    expired (nothing renews it any more; a restarted server waits just the same)."""
    deadline = time.monotonic() + EngineConfig().lease_timeout + 15.0
    while True:
        try:
            return await Engine.open(store, config)
        except DataDirLockedError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def drain(sub: SubscriptionHandle, idle: float = 0.2, limit: float = 10.0) -> list[Message]:
    """Receive until a receive of ``idle`` seconds returns nothing (bounded by ``limit``)."""
    out: list[Message] = []
    deadline = time.monotonic() + limit
    while True:
        got = await sub.receive(max=1000, timeout=idle)
        if not got:
            return out
        out.extend(got)
        if time.monotonic() > deadline:
            raise AssertionError(f"subscription kept delivering for {limit}s")


def values(messages: list[Message]) -> list[Any]:
    return [m.value for m in messages]


def positions(messages: list[Message]) -> list[Position]:
    return [m.position for m in messages]


async def txn_state(engine: Engine, txn_id: str) -> str:
    return (await engine.get_transaction(txn_id)).state


async def make_topics(engine: Engine, *names: str) -> None:
    for name in names:
        assert await engine.create_topic(name) is True


# -- random transaction histories (property tests) -------------------------------------

HISTORY_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("begin")),
        st.tuples(st.just("send"), st.integers(0, 3)),
        st.tuples(st.just("plain")),
        st.tuples(st.just("commit"), st.integers(0, 3)),
        st.tuples(st.just("abort"), st.integers(0, 3)),
        st.tuples(st.just("reopen")),
    ),
    min_size=1,
    max_size=30,
)
"""Steps of a history; an int picks one of the open transactions."""


@dataclass
class HistoryModel:
    """What a history says about topic ``t``: the open transactions with data on it (id
    -> first position) and the aborted ones that had data on it (sequences)."""

    open_with_data: dict[str, Position] = field(default_factory=dict)
    aborted_with_data: set[int] = field(default_factory=set)


async def play_history(
    path: Path,
    config: EngineConfig,
    ops: list[Any],
    check: Callable[[Engine, HistoryModel], Awaitable[None]],
) -> None:
    """Run ``ops`` on topics ``t`` and ``other`` (a transaction's send goes to both; a
    ``reopen`` keeps open transactions and starts new ledgers), then ``await
    check(engine, model)`` after every step, once it is durable."""
    model = HistoryModel()
    txns: list[str] = []
    engine = await Engine.open(path, config)
    try:
        await engine.create_topic("t")
        await engine.create_topic("other")
        for step, op in enumerate(ops):
            if op[0] == "begin":
                txns.append((await engine.begin()).id)
            elif op[0] == "plain":
                await engine.send("t", f"plain-{step}".encode())
            elif op[0] == "reopen":
                await engine.close()
                engine = await Engine.open(path, config)
            elif txns:
                txn = txns[op[1] % len(txns)]
                if op[0] == "send":
                    message = OutgoingMessage(f"{txn}-{step}".encode())
                    sent = await engine.produce("t", [message], txn=txn)
                    model.open_with_data.setdefault(txn, sent.positions[0])
                    await engine.produce("other", [message], txn=txn)
                else:
                    await (engine.commit(txn) if op[0] == "commit" else engine.abort(txn))
                    txns.remove(txn)
                    had_data = model.open_with_data.pop(txn, None) is not None
                    if op[0] == "abort" and had_data:
                        model.aborted_with_data.add(TxnId.parse(txn).seq)
            await engine._rt.store.flush()
            await check(engine, model)
    finally:
        await engine.close()


async def eventually(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> float:
    """:func:`wait_until` for a plain (synchronous) condition."""

    async def check() -> bool:
        return condition()

    return await wait_until(check, timeout, what)


@contextmanager
def write_lock(db: Path) -> Iterator[sqlite3.Connection]:
    """Hold SQLite's write lock on ``db`` from a second connection until the block ends.

    The store's writer stalls meanwhile (and reports "database is locked" once its busy
    timeout passes), which freezes a flush mid-flight without touching the store.
    """
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("BEGIN EXCLUSIVE")
        try:
            yield conn
        finally:
            conn.execute("ROLLBACK")


# -- auth (issue 11): principals files and servers that require tokens ------------------

AUTH_TOKENS = {
    "ops": "ops-secret-token",
    "alice": "alice-secret-token",
    "bob": "bob-secret-token",
}
"""The tokens of :func:`write_auth_file`'s principals (ops is an admin)."""

ALL_ACTIONS = ["produce", "consume", "manage"]


def write_auth_file(path: Path, tokens: dict[str, str] | None = None) -> Path:
    """A principals file: ``ops`` (admin, its token as ``sha256:``), ``alice`` (everything
    on ``a-*``, produce+consume on ``shared``, consume on ``ro``) and ``bob`` (everything
    on ``b-*``, produce+consume on ``shared``)."""
    import hashlib
    import json

    tokens = {**AUTH_TOKENS, **(tokens or {})}
    digest = hashlib.sha256(tokens["ops"].encode()).hexdigest()
    document = {
        "principals": [
            {"name": "ops", "token": f"sha256:{digest}", "admin": True},
            {
                "name": "alice",
                "token": tokens["alice"],
                "grants": [
                    {"topic": "a-*", "actions": ALL_ACTIONS},
                    {"topic": "shared", "actions": ["produce", "consume"]},
                    {"topic": "ro", "actions": ["consume"]},
                ],
            },
            {
                "name": "bob",
                "token": tokens["bob"],
                "grants": [
                    {"topic": "b-*", "actions": ALL_ACTIONS},
                    {"topic": "shared", "actions": ["produce", "consume"]},
                ],
            },
        ]
    }
    path.write_text(json.dumps(document))
    return path


def bearer(name: str) -> dict[str, str]:
    """The ``Authorization`` header of principal ``name`` of :data:`AUTH_TOKENS`."""
    return {"Authorization": f"Bearer {AUTH_TOKENS[name]}"}


REPO = Path(__file__).resolve().parents[1]


def start_in_repo(command: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    """``command`` (``python -m txnstream ...``) as a process run from the repository,
    its output appended to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(command),
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_process(
    proc: subprocess.Popen[bytes], timeout: float = 40, sig: int = signal.SIGTERM
) -> None:
    """Send ``sig`` (if it still runs), wait up to ``timeout`` s, then SIGKILL it."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


class ServeSubprocess:
    """``python -m txnstream serve`` with extra ``args`` on a free loopback port, as a process.

    ``verify`` is what httpx should verify an HTTPS server with (a CA file's path).
    """

    def __init__(
        self, data: Path, log: Path, *args: str, scheme: str = "http", verify: Any = True
    ) -> None:
        self.data = data
        self.log_path = log
        self.args = args
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.verify = verify
        self.proc: Any = None

    def start(self) -> ServeSubprocess:
        import httpx

        command = [sys.executable, "-m", "txnstream", "serve", "--data", str(self.data)]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--durability", "normal"]
        self.proc = start_in_repo([*command, *self.args], self.log_path)

        def healthy() -> bool:
            if self.proc.poll() is not None:
                return True
            try:
                r = httpx.get(f"{self.url}/v1/health", timeout=1.0, verify=self.verify)
            except httpx.TransportError:
                return False
            return r.status_code == 200

        wait_for(healthy, 30, "the server to be healthy")
        assert self.proc.poll() is None, f"server exited early:\n{self.log()}"
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc)

    def __enter__(self) -> ServeSubprocess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ChildLines:
    """A Python child of the repository (``python *args``, stderr to ``log``) whose
    stdout lines a thread queues in :attr:`lines` (``None`` once it closes): the crash
    tests read a child's acknowledgements line by line, then ``kill -9`` it."""

    def __init__(self, args: Sequence[str], log: Path, name: str) -> None:
        repo = Path(__file__).resolve().parents[1]
        env = {**os.environ, "PYTHONPATH": str(repo)}
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, *args], cwd=repo, env=env, stdout=subprocess.PIPE, stderr=err
            )
        assert self.proc.stdout is not None
        self._stdout = self.proc.stdout
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self._pump = threading.Thread(target=self._read, name=name, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        for line in self._stdout:
            self.lines.put(line)
        self.lines.put(None)

    def kill(self) -> int:
        """SIGKILL the child (if still running), wait for it; its return code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        code = self.proc.wait(timeout=30)
        self._pump.join(timeout=30)
        self._stdout.close()
        return code

    def rest(self) -> list[bytes]:
        """The lines queued and not taken yet (call after :meth:`kill`)."""
        out = []
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return out
            if line is not None:
                out.append(line)


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m txnstream serve --port <free> *args`` to its end (for the ways it must
    refuse to start); its output captured as text."""
    repo = Path(__file__).resolve().parents[1]
    return subprocess.run(
        [sys.executable, "-m", "txnstream", "serve", "--port", str(free_port()), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo), **(env or {})},
        check=False,
    )


class EngineStateMachine(RuleBasedStateMachine):
    """Base of the stateful tests that drive one engine: its own event loop, a fresh store
    (a data directory, or one from ``new_store``: ``run_state_machine_as_test(lambda:
    Machine(new_store))`` runs it on the test's store), :meth:`run` with a bound,
    :meth:`reopen`, and a teardown that closes the engine and removes both."""

    def __init__(self, config: EngineConfig, new_store: NewStore | None = None) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self._stores = ExitStack()
        self.dir: Path | str = (
            Path(tempfile.mkdtemp(prefix="txnstream-stateful-"))
            if new_store is None
            else self._stores.enter_context(new_store())
        )
        self.config = config
        self.engine = self.run(Engine.open(self.dir, config))

    def run(self, coro):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(asyncio.wait_for(coro, 30))

    def reopen(self) -> None:
        """Close the engine and open it again on the same data (a clean restart)."""
        self.run(self.engine.close())
        self.engine = self.run(Engine.open(self.dir, self.config))

    def teardown(self) -> None:
        try:
            self.run(self.engine.close())
        finally:
            self.loop.close()
            if isinstance(self.dir, Path):
                shutil.rmtree(self.dir, ignore_errors=True)
            self._stores.close()

    @invariant()
    def internal_state_is_consistent(self) -> None:
        """The ``_check()`` of the store, the coordinator and every subscription."""
        check_engine(self.engine)


def check_engine(engine: Engine) -> None:
    """Assert the invariants of an open engine's store, coordinator and subscriptions
    (their ``_check()``, as sortedcontainers' tests call theirs after every step)."""
    engine._rt.store._check()
    engine._rt.coordinator._check()
    for subscription in engine._rt.subscriptions:
        subscription._check()


def self_signed_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files in ``tmp_path``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@contextmanager
def mounted_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``48m``) mounted at ``mount`` (made), unmounted afterwards;
    skips the test where mounting is not allowed (it needs root, as in CI)."""
    mount.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
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
