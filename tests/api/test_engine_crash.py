"""kill -9 a real child process mid-load, reopen, and check what read_committed delivers.

The child (``crash_child.py``) runs concurrent transactions over two topics and prints a
line after every commit/abort returns. The parent SIGKILLs it once N commits were
acknowledged, reopens the data directory in-process and checks Invariants 1-4 and 6:
every acknowledged commit is there, nothing aborted or never committed is delivered, a
commit in flight at the kill is all-or-nothing, order per topic is position order, and
the transactions left open by the crash time out so the stable position reaches last
confirmed. One run takes snapshots very often, so recovery goes through snapshot + tail
replay; every run also checks that the recovered transaction buffers equal a full replay
of the log (Invariant 5).
"""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import ChildLines, drain, open_after_kill, positions, wait_until

from txnstream.api import (
    Engine,
    EngineConfig,
    Message,
    Position,
    TxnNotFoundError,
)
from txnstream.txn_buffer import TxnBuffer

CHILD = Path(__file__).with_name("crash_child.py")
REPO = Path(__file__).resolve().parents[2]
TOPICS = ("alpha", "beta")
TXN_TIMEOUT = 1.5
WORKERS = 3
CHILD_DEADLINE = 60.0
DEFAULT_SNAPSHOTS = (1000, 5.0)  # EngineConfig defaults: no snapshot in a short run
FREQUENT_SNAPSHOTS = (2, 0.05)


@dataclass
class ChildRun:
    events: list[dict[str, Any]]
    returncode: int
    log: str


def run_child_until_commits(
    data: Path, commits: int, snapshots: tuple[int, float], log_path: Path, writer: str
) -> ChildRun:
    """Start the child, read its events until ``commits`` commits returned (and, with
    frequent snapshots, both topics have one), SIGKILL it."""
    every, interval = snapshots
    # 60 commits can take ~40 ms, less than the first snapshot may: kill only after it,
    # so the run really recovers through snapshot + tail replay.
    awaiting_snapshot = set(TOPICS) if snapshots == FREQUENT_SNAPSHOTS else set()
    args = [str(CHILD), str(data), str(TXN_TIMEOUT), str(WORKERS), str(every), str(interval)]
    args.append(writer)
    child = ChildLines(args, log_path, "crash-child-stdout")
    raw: list[bytes] = []
    acknowledged = 0
    deadline = time.monotonic() + CHILD_DEADLINE
    try:
        while acknowledged < commits or awaiting_snapshot:
            remaining = deadline - time.monotonic()
            try:
                line = child.lines.get(timeout=max(remaining, 0.001))
            except queue.Empty:
                raise AssertionError(
                    f"child acknowledged {acknowledged}/{commits} commits in {CHILD_DEADLINE}s"
                    f" (topics without a snapshot: {sorted(awaiting_snapshot)})"
                ) from None
            if line is None:
                raise AssertionError(f"child exited early:\n{log_path.read_text()}")
            raw.append(line)
            if b'"committed"' in line:
                acknowledged += 1
            elif b'"snapshot"' in line:
                awaiting_snapshot.discard(json.loads(line)["topic"])
    finally:
        returncode = child.kill()
    # Lines written before the kill count as well: each was printed after its call returned.
    raw += child.rest()
    events = []
    for line in raw:
        if line.endswith(b"\n"):  # a line cut by the kill was never acknowledged
            events.append(json.loads(line))
    return ChildRun(events, returncode, log_path.read_text(errors="replace"))


@dataclass
class Expectations:
    """What the child's output says must, may and must not be delivered."""

    fate: dict[str, str] = field(default_factory=dict)  # message id -> fate
    txn_of: dict[str, str | None] = field(default_factory=dict)  # message id -> txn id
    ids_of_txn: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    acknowledged: set[str] = field(default_factory=set)  # message ids
    committed_txns: set[str] = field(default_factory=set)
    ended_not_committed: set[str] = field(default_factory=set)  # txn ids
    in_flight_commits: set[str] = field(default_factory=set)  # txn ids

    @classmethod
    def from_events(cls, events: list[dict[str, Any]]) -> Expectations:
        exp = cls()
        plain_pending: dict[str, list[str]] = {}
        for event in events:
            kind = event["event"]
            if kind == "plan":
                txn = event["txn"]
                for ids in event["ids"].values():
                    for mid in ids:
                        exp.fate[mid] = event["fate"]
                        exp.txn_of[mid] = txn
                if txn is None:
                    plain_pending[event["ids"]["alpha"][0]] = event["ids"]["alpha"]
                else:
                    exp.ids_of_txn[txn] = event["ids"]
                    if event["fate"] in ("abort", "open"):
                        exp.ended_not_committed.add(txn)
                    else:
                        exp.in_flight_commits.add(txn)
            elif kind == "committed":
                exp.committed_txns.add(event["txn"])
                exp.in_flight_commits.discard(event["txn"])
                for ids in exp.ids_of_txn[event["txn"]].values():
                    exp.acknowledged.update(ids)
            elif kind == "sent":
                exp.acknowledged.update(event["ids"])
        return exp


async def _settled(engine: Engine) -> bool:
    for topic in TOPICS:
        stats = await engine.stats(topic)
        if stats["open_txns"] or stats["stable_position"] != stats["last_confirmed"]:
            return False
    return not await engine.transactions(state="open")


BufferState = tuple[Any, ...]


def _buffer_state(buffer: TxnBuffer) -> BufferState:
    ongoing = sorted(
        (t.seq, o.first, o.before_first, o.last) for t, o in buffer.ongoing_txns.items()
    )
    aborted = sorted(
        (a.txn_id.seq, a.first, a.last, a.marker, a.stable) for a in buffer.aborted_txns.values()
    )
    return (buffer.last_confirmed, buffer.max_read_position, ongoing, aborted)


async def _full_replay_state(engine: Engine, topic: str, upto: Position | None) -> BufferState:
    """A buffer fed every entry of the log from the first one, up to ``upto``."""
    ledger = engine._rt.topics[topic].ledger
    buffer = TxnBuffer()
    start = Position(0, 0)
    while upto is not None:
        metas = await ledger.read_meta(start, 1000)
        for meta in metas:
            if meta.position > upto:
                return _buffer_state(buffer)
            buffer.on_entry(meta.position, meta.kind, meta.txn_id)
        if len(metas) < 1000:
            break
        start = Position(metas[-1].position.ledger_id, metas[-1].position.entry_id + 1)
    return _buffer_state(buffer)


def _check_order(topic: str, delivered: list[Message]) -> None:
    assert positions(delivered) == sorted(set(positions(delivered))), f"{topic}: not in order"
    last: dict[int, tuple[int, int]] = {}
    for msg in delivered:
        w, step = msg.value["w"], (msg.value["i"], msg.value["k"])
        assert step > last.get(w, (-1, -1)), f"{topic}: worker {w} out of order at {msg.value}"
        last[w] = step


async def test_sigkill_keeps_acknowledged_commits_and_never_delivers_undecided_data(
    data_dir: Path, tmp_path: Path
) -> None:
    await _sigkill_and_check(data_dir, tmp_path, 30, DEFAULT_SNAPSHOTS, "thread")


@pytest.mark.postgresql_in_full_run  # (10 s each there; the test above covers it by default)
@pytest.mark.parametrize(
    ("commits", "snapshots"),
    [
        pytest.param(3, DEFAULT_SNAPSHOTS, id="early"),
        pytest.param(120, DEFAULT_SNAPSHOTS, id="late"),
        pytest.param(60, FREQUENT_SNAPSHOTS, id="snapshots"),
    ],
)
async def test_sigkill_early_late_and_after_snapshots(
    data_dir: Path, tmp_path: Path, commits: int, snapshots: tuple[int, float]
) -> None:
    await _sigkill_and_check(data_dir, tmp_path, commits, snapshots, "thread")


@pytest.mark.sqlite_only("SQLite's writer process")
async def test_sigkill_with_the_writer_process(data_dir: Path, tmp_path: Path) -> None:
    """The writer process outlives the killed child for a moment, holding the lock while
    it may finish a flush: the reopen must wait for it, not fail."""
    await _sigkill_and_check(data_dir, tmp_path, 60, DEFAULT_SNAPSHOTS, "process")


async def _sigkill_and_check(
    data: Path, tmp_path: Path, commits: int, snapshots: tuple[int, float], writer: str
) -> None:
    run = await asyncio.to_thread(
        run_child_until_commits, data, commits, snapshots, tmp_path / "child.log", writer
    )
    assert run.returncode == -signal.SIGKILL, run.log
    exp = Expectations.from_events(run.events)
    assert len(exp.committed_txns) >= commits
    assert exp.ended_not_committed, "the child should have left or aborted transactions"

    every, interval = snapshots
    config = EngineConfig(
        default_txn_timeout=TXN_TIMEOUT, snapshot_every=every, snapshot_interval=interval
    )
    async with await open_after_kill(data, config) as engine:
        # Before any background task has had a turn (no await yet): the recovered state.
        recovered = {t: _buffer_state(engine._rt.topics[t].buffer) for t in TOPICS}
        left_open = {t.txn for t in await engine.transactions(state="open")}
        assert left_open, "no transaction was open at the kill; the test lost its point"
        assert left_open <= exp.ended_not_committed | exp.in_flight_commits
        for topic in TOPICS:
            # Invariant 5: snapshot + tail replay == full replay from the first entry.
            replayed = await _full_replay_state(engine, topic, recovered[topic][0])
            assert recovered[topic] == replayed, f"{topic}: recovered buffer differs"
            recovery = (await engine.stats(topic))["recovery"]
            assert recovery["from_snapshot"] is (snapshots == FREQUENT_SNAPSHOTS)

        await wait_until(
            lambda: _settled(engine),
            TXN_TIMEOUT + 15.0,
            "the crashed run's open transactions to time out",
        )

        delivered_ids: dict[str, list[str]] = {}
        for topic in TOPICS:
            # `audit` was created by the child before the load; `verify` is new.
            audit = await engine.subscribe(topic, "audit")
            got = await drain(audit, idle=0.3, limit=60.0)
            verify = await drain(await engine.subscribe(topic, "verify"), idle=0.3, limit=60.0)
            assert positions(verify) == positions(got)
            _check_order(topic, got)
            for msg in got:
                mid = msg.value["id"]
                assert mid in exp.fate, f"{topic}: delivered {mid}, which was never planned"
                assert exp.fate[mid] in ("commit", "plain"), f"{topic}: leaked {msg.value}"
                assert msg.txn == exp.txn_of[mid]
            delivered_ids[topic] = [m.value["id"] for m in got]
            assert len(set(delivered_ids[topic])) == len(got), f"{topic}: duplicates"
            await audit.ack(positions(got))
            stats = await engine.stats(topic)
            assert stats["subscriptions"]["audit"]["backlog"] == 0
            assert stats["stable_position"] == stats["last_confirmed"]
            assert stats["open_txns"] == 0

        everything = set(delivered_ids["alpha"]) | set(delivered_ids["beta"])
        missing = exp.acknowledged - everything
        assert not missing, f"acknowledged messages lost in the crash: {sorted(missing)[:10]}"

        # A commit in flight at the kill is all-or-nothing across both topics.
        for txn in exp.in_flight_commits:
            ids = {mid for topic_ids in exp.ids_of_txn[txn].values() for mid in topic_ids}
            present = ids & everything
            assert present in (set(), ids), f"{txn} partially visible: {sorted(present)}"

        states: dict[str, int] = defaultdict(int)
        for txn in exp.committed_txns:
            assert (await engine.get_transaction(txn)).state == "committed"
        for txn in exp.ended_not_committed:
            try:
                state = (await engine.get_transaction(txn)).state
            except TxnNotFoundError:
                state = "never durable"
            states[state] += 1
            assert state in ("aborted", "never durable"), f"{txn} is {state}"
        assert states["aborted"] > 0
