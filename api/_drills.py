"""``txnstream drill ...``: operator drills that prove recovery works on real data.

- ``drill replay --data DIR``: per topic, recover the transaction buffer from the newest
  valid snapshot (plus tail) and by a full replay of the retained log, compare the two,
  and report entries replayed, time each way and the speed-up.
- ``drill snapshot --data DIR --topic T``: take a snapshot now and show what it holds.
- ``drill crash --data DIR``: run a real ``txnstream serve`` child, drive a
  transactional workload over HTTP, SIGKILL and restart the child at random moments, and
  check the recorded history (nothing committed lost, nothing aborted delivered, no
  redelivery after a successful ack, order kept).

``replay`` and ``snapshot`` open the data directory themselves: run them on a directory
no server is using (stop the server first). ``crash`` owns its server child and kills it
on the way out, whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from ledger import DB_FILE, EntryKind, ManagedLedger, Position, Store, TxnId, unpack
from snapshots import full_replay, recover
from txn_buffer import TxnBuffer

from ._cli import add_command_group
from ._config import EngineConfig
from ._engine import Engine

__all__ = ["BufferState", "TopicReplay", "drill_app", "replay_directory"]

drill_app = typer.Typer(
    help="Recovery drills: snapshot vs full replay, crash under load, snapshot now.",
    no_args_is_help=True,
)
add_command_group(drill_app, "drill", help="Recovery drills (replay, crash, snapshot).")

DataOption = Annotated[
    Path,
    typer.Option(
        "--data",
        help="Data directory. replay/snapshot: one no server is using.",
        file_okay=False,
    ),
]


class DrillError(Exception):
    """A drill could not run (bad input, server did not start, time budget exceeded)."""


def _consoles() -> tuple[Console, Console]:
    """stdout for results (wide when not a terminal, so tables do not fold), stderr for bars."""
    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=max(out.width, 160))
    return out, Console(stderr=True, highlight=False)


def _yes(ok: bool) -> Text:
    return Text("yes", style="green") if ok else Text("NO", style="bold red")


# ---------------------------------------------------------------------------- replay


@dataclass(frozen=True, slots=True)
class BufferState:
    """What Invariant 5 compares between snapshot recovery and full replay."""

    last_confirmed: Position | None
    stable_position: Position | None
    open_txns: dict[TxnId, tuple[Position, Position | None, Position]]
    """txn -> (first, before_first, last)."""
    aborted: dict[TxnId, tuple[Position, Position]]
    """txn -> (last, marker). ``first`` is left out: retention clamps it legitimately."""

    @classmethod
    def of(cls, buffer: TxnBuffer) -> BufferState:
        """The comparable state of ``buffer``."""
        return cls(
            buffer.last_confirmed,
            buffer.max_read_position,
            {t: (o.first, o.before_first, o.last) for t, o in buffer.ongoing_txns.items()},
            {t: (a.last, a.marker) for t, a in buffer.aborted_txns.items()},
        )

    def differences(self, full: BufferState, limit: int = 20) -> list[str]:
        """Human-readable differences between this (snapshot) state and ``full``."""
        out: list[str] = []
        for what, mine, theirs in (
            ("last confirmed", self.last_confirmed, full.last_confirmed),
            ("stable position", self.stable_position, full.stable_position),
        ):
            if mine != theirs:
                out.append(f"{what}: snapshot {mine}, full replay {theirs}")
        for what, a, b in (
            ("open", self.open_txns, full.open_txns),
            ("aborted", self.aborted, full.aborted),
        ):
            mine_map: dict[TxnId, Any] = dict(a)
            theirs_map: dict[TxnId, Any] = dict(b)
            for txn in sorted(mine_map.keys() | theirs_map.keys()):
                x, y = mine_map.get(txn), theirs_map.get(txn)
                if x == y:
                    continue
                if y is None:
                    out.append(f"{what} {txn}: only after snapshot recovery {_fmt(x)}")
                elif x is None:
                    out.append(f"{what} {txn}: only in full replay {_fmt(y)}")
                else:
                    out.append(f"{what} {txn}: snapshot {_fmt(x)}, full replay {_fmt(y)}")
        if len(out) > limit:
            out = [*out[:limit], f"... and {len(out) - limit} more"]
        return out


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(str(v) for v in value) + ")"
    return str(value)


@dataclass(slots=True)
class TopicReplay:
    """One topic's replay drill result."""

    topic: str
    from_snapshot: bool
    snapshot_position: Position | None
    snapshot_entries: int
    full_entries: int
    snapshot_seconds: float
    full_seconds: float
    open_txns: int
    aborted_txns: int
    producers: int
    differences: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """True when both recoveries agree (and producer state matches the log)."""
        return not self.differences

    @property
    def speedup(self) -> float:
        """Full replay time over snapshot recovery time."""
        return self.full_seconds / max(self.snapshot_seconds, 1e-9)


class _ListHandler(logging.Handler):
    """Collects log records (the snapshot fallback warnings) to show under the table."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def _producer_differences(
    ledger: ManagedLedger, last_confirmed: Position | None
) -> tuple[int, list[str]]:
    """Check idempotent-producer state against the log; returns (producers, problems).

    Producer sequences are not part of a snapshot: they live in their own table, written
    in the same SQLite transaction as the batch they describe, and both recovery paths
    load those rows. What can go wrong is a row that disagrees with the log, so each
    recorded batch must be data entries of the retained log at or below last confirmed.
    """
    rows = await ledger.store.read(
        "SELECT producer, last_seq, positions FROM producers WHERE topic_id = ?",
        (ledger.topic_id,),
    )
    first = ledger.first_position()
    problems: list[str] = []
    for producer, last_seq, packed in rows:
        first_seq, texts = unpack(packed)
        positions = [Position.parse(p) for p in texts]
        if len(positions) != last_seq - first_seq + 1:
            problems.append(
                f"producer {producer}: sequences {first_seq}..{last_seq} but"
                f" {len(positions)} position(s)"
            )
        if positions and (last_confirmed is None or max(positions) > last_confirmed):
            problems.append(f"producer {producer}: batch beyond last confirmed {last_confirmed}")
        retained = [p for p in positions if first is not None and p >= first]
        found = {e.position: e for e in await ledger.read_positions(retained)}
        for position in retained:
            entry = found.get(position)
            if entry is None or entry.kind is not EntryKind.DATA:
                problems.append(f"producer {producer}: no data entry at {position}")
    return len(rows), problems


async def _replay_topic(
    store: Store, topic_id: int, name: str, config: EngineConfig, step: Callable[[str], None]
) -> TopicReplay:
    ledger = await ManagedLedger.open(
        store, topic_id, max_entries=config.ledger_max_entries, max_bytes=config.ledger_max_bytes
    )
    step(f"{name}: snapshot recovery")
    started = time.perf_counter()
    restored, info, _ = await recover(ledger)
    snapshot_seconds = time.perf_counter() - started
    step(f"{name}: full replay")
    started = time.perf_counter()
    replayed, count = await full_replay(ledger)
    full_seconds = time.perf_counter() - started
    mine, full = BufferState.of(restored), BufferState.of(replayed)
    differences = mine.differences(full)
    producers, problems = await _producer_differences(ledger, full.last_confirmed)
    return TopicReplay(
        name,
        info.from_snapshot,
        info.position,
        info.entries_replayed,
        count,
        snapshot_seconds,
        full_seconds,
        len(full.open_txns),
        len(full.aborted),
        producers,
        differences + problems,
    )


async def replay_directory(
    data: Path,
    step: Callable[[str], None] | None = None,
    topics: Callable[[int], None] | None = None,
) -> list[TopicReplay]:
    """Run the replay drill over every topic of the data directory ``data``.

    Opens the store directly (no engine: nothing is reconciled, nothing times out while
    comparing). Like any open, it starts a new ledger per topic. For progress display,
    ``topics`` is told how many topics there are and ``step`` what is being done.
    """
    db = data / DB_FILE
    if not db.is_file():
        raise DrillError(f"no txnstream database at {db}")
    config = EngineConfig()
    store = await Store.open(db, max_pending_entries=config.max_pending_entries)
    try:
        rows = await store.read("SELECT topic_id, name FROM topics ORDER BY name")
        if topics is not None:
            topics(len(rows))
        results = []
        for topic_id, name in rows:
            results.append(
                await _replay_topic(store, topic_id, name, config, step or (lambda _: None))
            )
        return results
    finally:
        await store.close()


def _replay_table(results: list[TopicReplay]) -> Table:
    table = Table(title="snapshot recovery vs full replay")
    for column in ("topic", "snapshot at", "entries (snapshot)", "entries (full)"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for column in ("time (snapshot)", "time (full)", "speed-up"):
        table.add_column(column, justify="right")
    for column in ("open", "aborted", "producers"):
        table.add_column(column, justify="right")
    table.add_column("equal", justify="center")
    for r in results:
        table.add_row(
            Text(r.topic),
            str(r.snapshot_position) if r.from_snapshot else "none (full)",
            str(r.snapshot_entries),
            str(r.full_entries),
            f"{r.snapshot_seconds * 1000:.1f} ms",
            f"{r.full_seconds * 1000:.1f} ms",
            f"{r.speedup:.1f}x" if r.from_snapshot else "-",
            str(r.open_txns),
            str(r.aborted_txns),
            str(r.producers),
            _yes(r.equal),
        )
    return table


@drill_app.command("replay")
def replay_command(data: DataOption) -> None:
    """Compare snapshot recovery with a full replay for every topic of DATA.

    Run it on a data directory no server is using: it opens the store (and, like every
    open, starts a new ledger per topic). Exits 1 if any topic's states differ.
    """
    out, err = _consoles()
    handler = _ListHandler()
    snapshot_log = logging.getLogger("txnstream.snapshots")
    snapshot_log.addHandler(handler)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )

    async def run() -> list[TopicReplay]:
        task = progress.add_task("opening", total=None)

        def step(what: str) -> None:
            progress.update(task, description=what)
            if what.endswith("full replay"):
                progress.advance(task)

        def total(count: int) -> None:
            progress.update(task, total=count * 2)

        with progress:
            return await replay_directory(data, step, total)

    try:
        results = asyncio.run(run())
    except DrillError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    finally:
        snapshot_log.removeHandler(handler)
    out.print(_replay_table(results))
    for message in handler.messages:
        out.print(f"note: {message}", markup=False)
    bad = [r for r in results if not r.equal]
    for r in bad:
        out.print(f"topic {r.topic}: snapshot recovery differs from full replay:", markup=False)
        for line in r.differences:
            out.print(f"  - {line}", markup=False)
    if not results:
        out.print("result: equal (no topics)")
    elif bad:
        out.print(f"result: MISMATCH in {len(bad)} of {len(results)} topic(s)")
        raise typer.Exit(1)
    else:
        total_snap = sum(r.snapshot_seconds for r in results)
        total_full = sum(r.full_seconds for r in results)
        out.print(
            f"result: equal ({len(results)} topic(s); snapshot recovery"
            f" {total_snap * 1000:.1f} ms vs full replay {total_full * 1000:.1f} ms)"
        )


# -------------------------------------------------------------------------- snapshot


@drill_app.command("snapshot")
def snapshot_command(
    data: DataOption,
    topic: Annotated[str, typer.Option("--topic", help="The topic to snapshot.")],
) -> None:
    """Take a snapshot of TOPIC now and show what it holds.

    Opens the engine on DATA (recovery and reconciliation included): run it on a data
    directory no server is using.
    """
    out, err = _consoles()
    if not (data / DB_FILE).is_file():
        err.print(f"error: no txnstream database at {data / DB_FILE}", markup=False)
        raise typer.Exit(2)

    async def run() -> dict[str, Any]:
        async with Engine.open(data) as engine:
            held = await engine.take_snapshot(topic)
            held["stats"] = await engine.stats(topic)
            return held

    try:
        with err.status(f"opening {data} and snapshotting {topic}"):
            held = asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - any engine error is reported, exit 1
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    table = Table(title=f"snapshot of {topic}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    open_txns: dict[str, str] = held["open_txns"]
    shown = ", ".join(f"{t} from {p}" for t, p in list(open_txns.items())[:10])
    if len(open_txns) > 10:
        shown += f", ... ({len(open_txns) - 10} more)"
    rows = [
        ("position", held["position"]),
        ("stable position", held["stable_position"]),
        ("open txns", f"{len(open_txns)}" + (f" ({shown})" if shown else "")),
        ("aborted txns", held["aborted_txns"]),
        ("segments", held["segments"]),
        ("bytes written", held["bytes_written"]),
        ("snapshot bytes", held["snapshot_bytes"]),
        ("ledgers", held["stats"]["ledgers"]),
        ("entries", held["stats"]["entries"]),
    ]
    for name, value in rows:
        table.add_row(name, Text("-" if value is None else str(value)))
    out.print(table)


# ----------------------------------------------------------------------------- crash

TXN_TIMEOUT_MS = 5_000
"""Timeout of the transactions meant to end (commit or abort)."""
ABANDON_TIMEOUT_MS = 1_500
"""Timeout of the transactions left to time out."""
SUB = "drill"


def _parse(position: str) -> tuple[int, int]:
    ledger, _, entry = position.partition(":")
    return int(ledger), int(entry)


def _free_port(avoid: set[int]) -> int:
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in avoid:
            return port
    raise DrillError("no free loopback port")


class _Child:
    """The ``txnstream serve`` child: a new loopback port per start, one data directory."""

    def __init__(self, data: Path, log_path: Path) -> None:
        self.data = data
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.generation = 0
        self.up = asyncio.Event()
        self._ports: set[int] = set()

    def _spawn(self, port: int) -> subprocess.Popen[bytes]:
        root = Path(__file__).resolve().parent.parent
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
        args = [sys.executable, "-m", "api", "serve", "--data", str(self.data)]
        args += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.generation + 1} on port {port}\n".encode())
            log.flush()
            return subprocess.Popen(
                args,
                cwd=root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    async def start(self, http: httpx.AsyncClient, timeout: float = 45.0) -> float:
        """Start the child and wait for ``/v1/health``; returns seconds taken."""
        started = time.monotonic()
        status: int | None = None
        for _attempt in range(3):
            port = _free_port(self._ports)
            self._ports.add(port)
            proc = self.proc = self._spawn(port)
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + timeout
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    response = await http.get(f"{url}/v1/health", timeout=1.0)
                    if response.status_code == 200:
                        self.url = url
                        self.generation += 1
                        self.up.set()
                        return time.monotonic() - started
                except httpx.TransportError:
                    pass
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

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass(slots=True)
class _Msg:
    """One message the drill produced (``order`` = (txn ordinal or sequence, index))."""

    id: str
    topic: str
    source: str
    order: tuple[int, int]
    txn: _Txn | None = None
    committed: bool = False
    """For plain (idempotent) messages: the produce returned 200."""


@dataclass(slots=True)
class _Txn:
    """One transaction of a transactional producer and what became of it."""

    key: str
    worker: int
    ordinal: int
    plan: str
    txn: str | None = None
    outcome: str = "abandoned"
    reason: str = ""
    messages: list[_Msg] = field(default_factory=list)


@dataclass(slots=True)
class _Delivery:
    topic: str
    session: str
    """The base URL of the server that delivered it: one per server start."""
    position: tuple[int, int]
    id: str
    clock: int
    redelivery_count: int


@dataclass(slots=True)
class _Check:
    name: str
    ok: bool
    detail: str


def _examples(items: list[str], n: int = 5) -> str:
    shown = ", ".join(items[:n])
    return shown + (f", ... ({len(items)} in all)" if len(items) > n else "")


class _CrashDrill:
    """Drives the workload, the kills and the end checks of ``drill crash``."""

    def __init__(
        self,
        data: Path,
        *,
        duration: float,
        kills: int,
        seed: int,
        topics: int,
        producers: int,
        out: Console,
        err: Console,
    ) -> None:
        self.data = data
        self.duration = duration
        self.kill_count = kills
        self.seed = seed
        self.producer_count = producers
        self.out, self.err = out, err
        self.run = f"drill-{secrets.token_hex(3)}"
        self.topics = [f"{self.run}-{i}" for i in range(topics)]
        self.child = _Child(data, data / "drill-serve.log")
        self.http: httpx.AsyncClient | None = None
        self.stop = asyncio.Event()
        self.consumers_stop = asyncio.Event()
        self.clock = 0
        self.kills = 0
        self.restart_seconds: list[float] = []
        self.txns: list[_Txn] = []
        self.messages: dict[str, _Msg] = {}
        self.deliveries: list[_Delivery] = []
        self.acked: dict[str, int] = {}
        self.order_violations: list[str] = []
        self.unexpected: list[str] = []
        self.idem_batches = 0
        self.idem_retries = 0
        self.idem_duplicates = 0
        self.begin_failures = 0
        self.still_open: list[str] = []
        self.backlog_left: dict[str, int] = {}
        self.log_entries: dict[str, list[tuple[tuple[int, int], str, str | None]]] = {}
        self.server_txns: dict[str, tuple[str | None, str]] = {}
        self.replay: list[TopicReplay] = []
        self.stop_status: int | None = None
        self.started = 0.0
        self.report_path: Path | None = None

    # -- helpers -------------------------------------------------------------------

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def _note(self, what: str, response: httpx.Response) -> None:
        self.unexpected.append(f"{what}: HTTP {response.status_code} {response.text[:200]}")

    async def _until_up(self) -> bool:
        """Wait for the server to be up; False once the drill is shutting down."""
        while not self.child.up.is_set():
            if self.consumers_stop.is_set():
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.child.up.wait(), 0.5)
        return True

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Any = None,
        timeout: float = 15.0,
        url: str | None = None,
    ) -> tuple[httpx.Response, str]:
        """One request to ``url`` (default: the current server); returns it and the base URL.

        Each server start gets a new port, so a request pinned to an earlier base URL can
        never reach a later server: a connect error then says the request was not sent.
        """
        assert self.http is not None
        base = url or self.child.url
        response = await self.http.request(
            method, f"{base}{path}", json=body, params=params, timeout=timeout
        )
        return response, base

    # -- setup and workload --------------------------------------------------------

    async def _setup(self) -> None:
        for topic in self.topics:
            response, _ = await self._call("PUT", f"/v1/topics/{topic}", body={})
            if response.status_code not in (200, 201):
                raise DrillError(f"cannot create topic {topic}: {response.text[:200]}")
            response, _ = await self._call(
                "PUT",
                f"/v1/topics/{topic}/subscriptions/{SUB}",
                body={
                    "type": "exclusive",
                    "initial_position": "earliest",
                    "isolation": "read_committed",
                },
            )
            if response.status_code not in (200, 201):
                raise DrillError(f"cannot subscribe to {topic}: {response.text[:200]}")

    async def _txn_worker(self, worker: int) -> None:
        """Begin, send 1-5 messages to 1-2 topics, then commit/abort/abandon; repeat."""
        rng = random.Random(f"{self.seed}:txn:{worker}")
        ordinal = 0
        while not self.stop.is_set():
            if not await self._until_up():
                return
            ordinal += 1
            roll = rng.random()
            plan = "commit" if roll < 0.7 else "abort" if roll < 0.9 else "abandon"
            chosen = rng.sample(self.topics, min(len(self.topics), rng.randint(1, 2)))
            count = rng.randint(1, 5)
            key = f"{self.run}.w{worker}.{ordinal}"
            run = _Txn(key, worker, ordinal, plan)
            groups: dict[str, list[_Msg]] = defaultdict(list)
            for index in range(count):
                topic = chosen[index % len(chosen)]
                msg = _Msg(f"{key}.{index}", topic, f"w{worker}", (ordinal, index), run)
                groups[topic].append(msg)
            await self._one_txn(run, groups)
            await asyncio.sleep(rng.uniform(0.0, 0.02))

    async def _one_txn(self, run: _Txn, groups: dict[str, list[_Msg]]) -> None:
        """One transaction, every request pinned to the server that began it."""
        timeout_ms = ABANDON_TIMEOUT_MS if run.plan == "abandon" else TXN_TIMEOUT_MS
        try:
            response, base = await self._call(
                "POST", "/v1/transactions", body={"timeout_ms": timeout_ms, "label": run.key}
            )
        except httpx.TransportError:
            self.begin_failures += 1
            return
        if response.status_code != 201:
            self._note("begin", response)
            return
        run.txn = str(response.json()["txn"])
        self.txns.append(run)
        for topic, msgs in groups.items():
            for msg in msgs:
                run.messages.append(msg)
                self.messages[msg.id] = msg
            body = {"messages": [{"value": {"id": m.id}} for m in msgs], "txn": run.txn}
            try:
                response, _ = await self._call(
                    "POST", f"/v1/topics/{topic}/messages", body=body, url=base
                )
            except httpx.TransportError:
                run.reason = "send died with the server"
                return
            if response.status_code != 200:
                if response.status_code != 409:
                    self._note("transactional send", response)
                run.reason = f"send rejected ({response.status_code})"
                return
        if run.plan == "abandon":
            run.reason = "left to time out"
            return
        try:
            response, _ = await self._call(
                "POST", f"/v1/transactions/{run.txn}/{run.plan}", url=base
            )
        except (httpx.ConnectError, httpx.ConnectTimeout):
            run.reason = f"{run.plan} not sent (server down)"
            return
        except httpx.TransportError:
            if run.plan == "commit":
                run.outcome, run.reason = "unknown", "commit died with the server"
            else:
                run.reason = "abort died with the server"
            return
        if response.status_code == 200:
            run.outcome = "committed" if run.plan == "commit" else "aborted"
            return
        if response.status_code != 409:
            self._note(run.plan, response)
        run.reason = f"{run.plan} rejected ({response.status_code})"

    async def _idempotent_producer(self, deadline: float) -> None:
        """Plain batches with producer + sequence, sent until one answer says 200.

        A batch whose request failed is resent as is after the restart. After every
        restart the last acknowledged batch is also resent once, as a client that missed
        the answer would: the server must say ``duplicate`` and append nothing.
        """
        rng = random.Random(f"{self.seed}:idem")
        producer = f"{self.run}-idem"
        sequences = [0] * len(self.topics)
        last_ok: tuple[str, dict[str, Any]] | None = None
        seen = self.child.url
        while not self.stop.is_set():
            self.idem_batches += 1
            which = self.idem_batches % len(self.topics)
            topic, sequence = self.topics[which], sequences[which]
            msgs = [
                _Msg(f"{producer}.{which}.{sequence + i}", topic, "idem", (sequence + i, 0))
                for i in range(rng.randint(1, 3))
            ]
            for msg in msgs:
                self.messages[msg.id] = msg
            body = {
                "messages": [{"value": {"id": m.id}} for m in msgs],
                "producer": producer,
                "sequence": sequence,
            }
            while time.monotonic() < deadline:
                if not await self._until_up():
                    return
                try:
                    if last_ok is not None and self.child.url != seen:
                        seen = self.child.url
                        await self._resend(*last_ok)
                    response, _ = await self._call(
                        "POST", f"/v1/topics/{topic}/messages", body=body
                    )
                except httpx.TransportError:
                    self.idem_retries += 1
                    await asyncio.sleep(0.05)
                    continue
                if response.status_code == 200:
                    for msg in msgs:
                        msg.committed = True
                    last_ok = (topic, body)
                    if response.json().get("duplicate"):
                        self.idem_duplicates += 1
                else:
                    self._note("idempotent send", response)
                break
            sequences[which] = sequence + len(msgs)
            await asyncio.sleep(rng.uniform(0.002, 0.02))

    async def _resend(self, topic: str, body: dict[str, Any]) -> None:
        """Resend an acknowledged idempotent batch: it must come back as a duplicate."""
        response, _ = await self._call("POST", f"/v1/topics/{topic}/messages", body=body)
        if response.status_code == 200 and response.json().get("duplicate") is True:
            self.idem_duplicates += 1
        else:
            self._note("resent idempotent batch not a duplicate", response)

    async def _consumer(self, topic: str) -> None:
        """Long-poll the read_committed subscription of ``topic`` and ack what arrives.

        A session is one server start: the ack goes to the server that delivered.
        """
        last: tuple[str, tuple[int, int]] | None = None
        path = f"/v1/topics/{topic}/subscriptions/{SUB}"
        while not self.consumers_stop.is_set():
            if not await self._until_up():
                return
            try:
                response, base = await self._call(
                    "GET",
                    f"{path}/messages",
                    params={"consumer": "c1", "max": 500, "wait_ms": 1000},
                )
            except httpx.TransportError:
                await asyncio.sleep(0.05)
                continue
            if response.status_code != 200:
                self._note("receive", response)
                await asyncio.sleep(0.2)
                continue
            got: list[_Delivery] = []
            for message in response.json()["messages"]:
                position = _parse(message["position"])
                value = message.get("value")
                msg_id = value.get("id") if isinstance(value, dict) else None
                if not isinstance(msg_id, str):
                    self.unexpected.append(f"{topic}: foreign message at {message['position']}")
                    continue
                if last is not None and last[0] == base and position <= last[1]:
                    self.order_violations.append(
                        f"{topic}: {message['position']} after {last[1][0]}:{last[1][1]}"
                    )
                last = (base, position)
                delivery = _Delivery(
                    topic,
                    base,
                    position,
                    msg_id,
                    self.tick(),
                    int(message.get("redelivery_count") or 0),
                )
                self.deliveries.append(delivery)
                got.append(delivery)
            if not got:
                continue
            positions = [f"{d.position[0]}:{d.position[1]}" for d in got]
            try:
                response, _ = await self._call(
                    "POST", f"{path}/ack", body={"positions": positions}, url=base
                )
            except httpx.TransportError:
                continue
            if response.status_code == 200:
                clock = self.tick()
                for delivery in got:
                    self.acked.setdefault(delivery.id, clock)
            else:
                self._note("ack", response)

    async def _chaos(self, rng: random.Random) -> None:
        """SIGKILL the child ``kills`` times spread over the duration; restart each time."""
        if self.kill_count <= 0:
            return
        slot = self.duration / self.kill_count
        schedule = [slot * k + rng.uniform(0.35, 0.95) * slot for k in range(self.kill_count)]
        restarted = time.monotonic()
        for at in schedule:
            now = time.monotonic()
            wait = max(self.started + at - now, restarted + 0.5 - now, 0.0)
            await asyncio.sleep(wait)
            self.child.kill()
            self.kills += 1
            await asyncio.sleep(rng.uniform(0.0, 0.3))
            assert self.http is not None
            self.restart_seconds.append(await self.child.start(self.http))
            restarted = time.monotonic()

    # -- the run -------------------------------------------------------------------

    def _committed_count(self) -> int:
        return sum(
            1
            for m in self.messages.values()
            if m.committed or (m.txn is not None and m.txn.outcome == "committed")
        )

    async def _drive(self) -> None:
        """Workload and kills for the duration, then stop, settle and read everything back."""
        rng = random.Random(self.seed)
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            console=self.err,
            transient=True,
        )
        tasks: list[asyncio.Task[None]] = []
        with progress:
            bar = progress.add_task("workload", total=self.duration, info="")

            def show(description: str) -> None:
                progress.update(
                    bar,
                    description=description,
                    completed=min(time.monotonic() - self.started, self.duration),
                    info=(
                        f"kills {self.kills}/{self.kill_count}  txns {len(self.txns)}  "
                        f"committed msgs {self._committed_count()}  "
                        f"deliveries {len(self.deliveries)}"
                    ),
                )

            self.started = time.monotonic()
            producer_deadline = self.started + self.duration + 90
            consumers = [asyncio.create_task(self._consumer(t)) for t in self.topics]
            producers = [
                asyncio.create_task(self._txn_worker(w)) for w in range(self.producer_count)
            ]
            producers.append(asyncio.create_task(self._idempotent_producer(producer_deadline)))
            chaos = asyncio.create_task(self._chaos(rng))
            tasks = [*consumers, *producers, chaos]
            try:
                while time.monotonic() - self.started < self.duration or not chaos.done():
                    if chaos.done() and chaos.exception() is not None:
                        break
                    if self.child.up.is_set() and not self.child.alive():
                        raise DrillError(f"the server died on its own; see {self.child.log_path}")
                    show("workload + kills")
                    await asyncio.sleep(0.2)
                await chaos  # re-raises a failed restart
                self.stop.set()
                show("stopping producers")
                await self._bounded(producers, 60.0, "producers")
                show("waiting for abandoned transactions to time out")
                await self._wait_decided()
                show("waiting for consumers to drain")
                await self._wait_drained()
                self.consumers_stop.set()
                await self._bounded(consumers, 20.0, "consumers")
                show("final read_committed fetch")
                await self._final_fetch()
            finally:
                self.stop.set()
                self.consumers_stop.set()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _bounded(self, tasks: list[asyncio.Task[None]], timeout: float, what: str) -> None:
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            raise DrillError(f"{len(pending)} {what} did not stop within {timeout:.0f} s")
        for task in done:
            if task.exception() is not None:
                raise DrillError(f"a {what[:-1]} task failed: {task.exception()!r}")

    async def _wait_decided(self) -> None:
        """Until no transaction of this run is open (abandoned ones time out)."""
        deadline = time.monotonic() + max(TXN_TIMEOUT_MS, ABANDON_TIMEOUT_MS) / 1000 + 20
        while True:
            try:
                response, _ = await self._call(
                    "GET", "/v1/transactions", params={"state": "open", "label_prefix": self.run}
                )
                if response.status_code == 200:
                    self.still_open = [t["txn"] for t in response.json()["transactions"]]
                    if not self.still_open:
                        return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.25)

    async def _wait_drained(self) -> None:
        """Until every subscription's backlog is 0 (all deliverable entries acked)."""
        deadline = time.monotonic() + 30 + len(self.messages) / 2000
        while True:
            for topic in self.topics:
                try:
                    response, _ = await self._call("GET", f"/v1/topics/{topic}/stats")
                except httpx.TransportError:
                    continue
                if response.status_code == 200:
                    subs = response.json()["subscriptions"]
                    self.backlog_left[topic] = int(subs[SUB]["backlog"])
            if self.backlog_left and not any(self.backlog_left.values()):
                return
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.25)

    async def _final_fetch(self) -> None:
        """Every topic from earliest, read_committed, aborted data dropped; and txn labels."""
        deadline = time.monotonic() + 120
        for topic in self.topics:
            kept: list[tuple[tuple[int, int], str, str | None]] = []
            aborted: set[str] = set()
            start = "earliest"
            while time.monotonic() < deadline:
                response, _ = await self._call(
                    "GET",
                    f"/v1/topics/{topic}/fetch",
                    params={"from": start, "max": 10_000, "isolation": "read_committed"},
                    timeout=60.0,
                )
                if response.status_code != 200:
                    raise DrillError(f"final fetch of {topic}: HTTP {response.status_code}")
                page = response.json()
                aborted.update(a["txn"] for a in page["aborted"])
                for entry in page["entries"]:
                    if entry["kind"] != "data" or entry.get("txn") in aborted:
                        continue
                    value = entry.get("value")
                    msg_id = value.get("id") if isinstance(value, dict) else None
                    kept.append((_parse(entry["position"]), str(msg_id), entry.get("txn")))
                if not page["entries"]:
                    break
                start = page["next"]
            else:
                raise DrillError("the final fetch overran its time budget")
            self.log_entries[topic] = kept
        response, _ = await self._call(
            "GET", "/v1/transactions", params={"label_prefix": self.run}, timeout=60.0
        )
        if response.status_code != 200:
            raise DrillError(f"listing transactions: HTTP {response.status_code}")
        self.server_txns = {
            t["txn"]: (t.get("label"), t["state"]) for t in response.json()["transactions"]
        }

    async def execute(self) -> int:
        """Run the whole drill; returns the exit status (0 when every check passed).

        SIGTERM and SIGHUP cancel it like Ctrl-C does; either way the server child is
        killed before this returns.
        """
        self.data.mkdir(parents=True, exist_ok=True)
        budget = self.duration + 240 + 50 * self.kill_count
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
        transport = httpx.AsyncHTTPTransport(retries=0, limits=limits)
        loop, me = asyncio.get_running_loop(), asyncio.current_task()
        signals: list[str] = []

        def interrupt(sig: signal.Signals) -> None:
            signals.append(sig.name)
            if me is not None:
                me.cancel()

        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, interrupt, sig)
        try:
            async with httpx.AsyncClient(transport=transport, trust_env=False) as http:
                self.http = http
                async with asyncio.timeout(budget):
                    await self.child.start(http)
                    await self._setup()
                    await self._drive()
                    self.stop_status = await self.child.stop()
        except TimeoutError:
            raise DrillError(f"the drill overran its time budget of {budget:.0f} s") from None
        except asyncio.CancelledError:
            if not signals:
                raise
            raise DrillError(f"stopped by {signals[0]}") from None
        finally:
            if self.child.alive():
                self.child.kill()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        with self.err.status("comparing snapshot recovery with a full replay"):
            self.replay = await replay_directory(self.data)
        return self.report(self.report_path)

    # -- checks --------------------------------------------------------------------

    def _checks(self) -> list[_Check]:
        delivered: dict[str, list[_Delivery]] = defaultdict(list)
        for delivery in self.deliveries:
            delivered[delivery.id].append(delivery)
        in_log: dict[str, list[tuple[tuple[int, int], str | None]]] = defaultdict(list)
        for entries in self.log_entries.values():
            for position, msg_id, txn in entries:
                in_log[msg_id].append((position, txn))

        reused: list[str] = []
        resolved: dict[str, str] = {}
        for run in self.txns:
            assert run.txn is not None
            label, state = self.server_txns.get(run.txn, (None, "unknown"))
            if label is not None and label != run.key:
                reused.append(f"{run.txn} (begun for {run.key}, {run.reason}; now {label})")
            elif run.outcome == "unknown":
                resolved[run.key] = state if label == run.key else "not found"

        must: list[_Msg] = []
        never: list[_Msg] = []
        for msg in self.messages.values():
            if msg.committed or (msg.txn is not None and msg.txn.outcome == "committed"):
                must.append(msg)
            elif msg.txn is not None and msg.txn.outcome != "unknown":
                never.append(msg)

        checks: list[_Check] = []
        lost = [m.id for m in must if m.id not in delivered]
        checks.append(
            _Check(
                "committed messages delivered",
                not lost,
                f"{len(must)} committed, {len(lost)} never delivered: {_examples(lost)}"
                if lost
                else f"{len(must)} committed, all delivered",
            )
        )
        missing = [m.id for m in must if m.id not in in_log]
        checks.append(
            _Check(
                "committed messages in final read_committed fetch",
                not missing,
                f"missing: {_examples(missing)}" if missing else f"all {len(must)} present",
            )
        )
        leaked = [m.id for m in never if m.id in delivered]
        checks.append(
            _Check(
                "no aborted/abandoned message delivered",
                not leaked,
                f"delivered: {_examples(leaked)}" if leaked else f"{len(never)} never delivered",
            )
        )
        visible = [m.id for m in never if m.id in in_log]
        checks.append(
            _Check(
                "no aborted/abandoned message in final fetch",
                not visible,
                f"present: {_examples(visible)}" if visible else f"{len(never)} absent",
            )
        )
        torn: list[str] = []
        unknown_txns = [t for t in self.txns if t.outcome == "unknown"]
        for run in unknown_txns:
            present = sum(1 for m in run.messages if m.id in in_log)
            state = resolved.get(run.key, "unknown")
            expected = {"committed": len(run.messages)}.get(state, 0)
            if present not in (0, len(run.messages)) or (
                state in ("committed", "aborted", "not found") and present != expected
            ):
                torn.append(f"{run.txn} ({state}, {present}/{len(run.messages)} present)")
        outcome_counts = Counter(resolved.values())
        checks.append(
            _Check(
                "in-doubt commits all-or-nothing, as the server decided",
                not torn,
                f"torn: {_examples(torn)}"
                if torn
                else f"{len(unknown_txns)} in doubt: "
                + (", ".join(f"{n} {s}" for s, n in sorted(outcome_counts.items())) or "none"),
            )
        )
        after_ack = [
            f"{d.id}@{d.position[0]}:{d.position[1]}"
            for d in self.deliveries
            if d.id in self.acked and d.clock > self.acked[d.id]
        ]
        checks.append(
            _Check(
                "no delivery after a successful ack",
                not after_ack,
                f"redelivered after ack: {_examples(after_ack)}" if after_ack else "none",
            )
        )
        checks.append(
            _Check(
                "delivery order within each consumer session",
                not self.order_violations,
                _examples(self.order_violations) if self.order_violations else "positions increase",
            )
        )
        out_of_order: list[str] = []
        for topic, entries in self.log_entries.items():
            last_by_source: dict[str, tuple[tuple[int, int], str]] = {}
            for _, msg_id, _ in entries:
                sent = self.messages.get(msg_id)
                if sent is None:
                    continue
                previous = last_by_source.get(sent.source)
                if previous is not None and sent.order <= previous[0]:
                    out_of_order.append(f"{topic}: {msg_id} after {previous[1]}")
                last_by_source[sent.source] = (sent.order, msg_id)
        checks.append(
            _Check(
                "per-producer commit order in the log",
                not out_of_order,
                _examples(out_of_order) if out_of_order else "kept",
            )
        )
        twice = sorted(msg_id for msg_id, where in in_log.items() if len(where) > 1)
        foreign = sorted(msg_id for msg_id in in_log if msg_id not in self.messages)
        mismatched = [
            f"{d.id}@{d.position[0]}:{d.position[1]}"
            for d in self.deliveries
            if d.id in in_log and d.position not in {p for p, _ in in_log[d.id]}
        ]
        problems = [f"twice: {_examples(twice)}"] if twice else []
        problems += [f"unknown ids: {_examples(foreign)}"] if foreign else []
        problems += (
            [f"delivered at another position: {_examples(mismatched)}"] if mismatched else []
        )
        checks.append(
            _Check(
                "each message once in the log, where it was delivered",
                not problems,
                "; ".join(problems)
                or f"{sum(len(v) for v in self.log_entries.values())} entries, no duplicates",
            )
        )
        checks.append(
            _Check(
                "transaction ids never reused",
                not reused,
                f"reused: {_examples(reused)}" if reused else f"{len(self.txns)} ids, labels match",
            )
        )
        checks.append(
            _Check(
                "every transaction decided at the end",
                not self.still_open,
                f"still open: {_examples(self.still_open)}" if self.still_open else "none open",
            )
        )
        backlog = {t: n for t, n in self.backlog_left.items() if n}
        drained = bool(self.backlog_left) and not backlog
        checks.append(
            _Check(
                "consumers drained (backlog 0)",
                drained,
                "all topics" if drained else f"backlog left: {backlog or 'unknown'}",
            )
        )
        checks.append(
            _Check(
                "no unexpected HTTP responses",
                not self.unexpected,
                _examples(self.unexpected, 3) if self.unexpected else "none",
            )
        )
        unequal = [r.topic for r in self.replay if not r.equal]
        checks.append(
            _Check(
                "snapshot recovery equals full replay (after the run)",
                bool(self.replay) and not unequal,
                f"differs: {_examples(unequal)}"
                if unequal
                else f"{len(self.replay)} topic(s), "
                f"{sum(r.from_snapshot for r in self.replay)} from a snapshot",
            )
        )
        return checks

    def report(self, path: Path | None = None) -> int:
        """Print the counts and the checks (and write them to ``path`` as JSON).

        Returns the exit status.
        """
        outcomes = Counter(t.outcome for t in self.txns)
        reasons = Counter(t.reason for t in self.txns if t.outcome == "abandoned")
        redeliveries = len(self.deliveries) - len({d.id for d in self.deliveries})
        counts = Table(title=f"crash drill {self.run} (seed {self.seed})", show_header=False)
        counts.add_column("what")
        counts.add_column("count", justify="right")
        restart = (
            f" (restart {min(self.restart_seconds):.1f}-{max(self.restart_seconds):.1f} s)"
            if self.restart_seconds
            else ""
        )
        stop = {0: "clean", -signal.SIGTERM: "clean (SIGTERM)"}.get(
            self.stop_status if self.stop_status is not None else 1, f"status {self.stop_status}"
        )
        rows: list[tuple[str, str]] = [
            ("kills (SIGKILL)", f"{self.kills}{restart}"),
            ("topics / txn producers", f"{len(self.topics)} / {self.producer_count}"),
            ("txns committed", str(outcomes["committed"])),
            ("txns aborted", str(outcomes["aborted"])),
            (
                "txns abandoned",
                f"{outcomes['abandoned']} ("
                + ", ".join(f"{n} {r}" for r, n in reasons.most_common())
                + ")"
                if reasons
                else "0",
            ),
            ("txns unknown (commit died with the server)", str(outcomes["unknown"])),
            ("begins lost with the server", str(self.begin_failures)),
            ("messages produced", str(len(self.messages))),
            ("messages committed", str(self._committed_count())),
            (
                "idempotent batches / resent / answered duplicate",
                f"{self.idem_batches} / {self.idem_retries} / {self.idem_duplicates}",
            ),
            ("deliveries", str(len(self.deliveries))),
            ("redeliveries (at-least-once)", str(redeliveries)),
            ("consumer sessions", str(len({(d.topic, d.session) for d in self.deliveries}))),
            ("entries in final fetch", str(sum(len(v) for v in self.log_entries.values()))),
            ("server stop", stop),
        ]
        for name, value in rows:
            counts.add_row(name, value)
        self.out.print(counts)
        checks = self._checks()
        table = Table(title="checks")
        table.add_column("check")
        table.add_column("ok", justify="center")
        table.add_column("detail")
        for check in checks:
            table.add_row(check.name, _yes(check.ok), Text(check.detail))
        self.out.print(table)
        failed = [c.name for c in checks if not c.ok]
        if path is not None:
            document = {
                "run": self.run,
                "seed": self.seed,
                "passed": not failed,
                "counts": dict(rows),
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
            }
            path.write_text(json.dumps(document, indent=2) + "\n")
        if failed:
            self.out.print(
                f"result: FAILED {len(failed)} of {len(checks)} checks (seed {self.seed};"
                f" server log {self.child.log_path})",
                markup=False,
            )
            return 1
        self.out.print(f"result: passed all {len(checks)} checks", markup=False)
        return 0


@drill_app.command("crash")
def crash_command(
    data: DataOption,
    duration: Annotated[
        float, typer.Option(min=1.0, max=3600.0, help="Seconds of workload.")
    ] = 30.0,
    kills: Annotated[int, typer.Option(min=0, max=1000, help="SIGKILLs over the run.")] = 5,
    seed: Annotated[
        int | None, typer.Option(help="RNG seed (workload and kill schedule); default random.")
    ] = None,
    topics: Annotated[int, typer.Option(min=1, max=20, help="Topics.")] = 3,
    producers: Annotated[int, typer.Option(min=1, max=32, help="Transactional producers.")] = 4,
    report: Annotated[
        Path | None, typer.Option(help="Also write the counts and checks here as JSON.")
    ] = None,
) -> None:
    """Kill a real server under a transactional workload and check the recorded history.

    Starts ``txnstream serve`` on a free loopback port over DATA (its log goes to
    DATA/drill-serve.log), drives transactions (commit ~70%, abort ~20%, abandoned ~10%),
    an idempotent producer and acking consumers over HTTP, SIGKILLs and restarts the
    server KILLS times, then checks that nothing committed was lost, nothing aborted or
    abandoned was delivered, nothing was redelivered after its ack, and order was kept.
    Exits 1 if any check fails, 2 if the drill could not run.
    """
    out, err = _consoles()
    chosen = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
    drill = _CrashDrill(
        data,
        duration=duration,
        kills=kills,
        seed=chosen,
        topics=topics,
        producers=producers,
        out=out,
        err=err,
    )
    drill.report_path = report
    err.print(
        f"crash drill: {duration:g} s, {kills} kill(s), seed {chosen}, data {data}", markup=False
    )
    try:
        status = asyncio.run(drill.execute())
    except DrillError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    if status:
        raise typer.Exit(status)
