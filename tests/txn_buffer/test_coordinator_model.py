"""Stateful property test: the Coordinator (no Engine) against a tiny model of states.

Random begin (with or without a transactional id) / send / commit / abort / finish
(with idempotence keys) / fencing while a decision is in flight / clean restart /
crash. After every step the coordinator's states, fencing, open set and low watermark,
the durable ``txns`` rows and the markers on each topic are exactly what the model says.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coordinator_support import TOPICS, Harness
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule
from support import eventually, write_lock

from txnstream.ledger import (
    DB_FILE,
    FencedError,
    InvalidArgumentError,
    TxnId,
    TxnNotFoundError,
    TxnNotOpenError,
)
from txnstream.txn_buffer import TxnState

IDS = st.sampled_from([None, "p", "q"])
KEYS = st.sampled_from([None, "k1", "k2"])


@dataclass
class ModelTxn:
    tid: str | None
    state: str = "open"  # open | committed | aborted
    fenced: bool = False
    persisted: bool = False  # has a durable row
    topics: tuple[str, ...] = ()


class CoordinatorMachine(RuleBasedStateMachine):
    txns = Bundle("txns")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="txnstream-coordinator-"))
        # Restarts close the store cleanly, so fsync per flush would only cost time.
        self.harness = Harness(self.dir / DB_FILE, synchronous="OFF")
        self.run(self.harness.open())
        self.model: dict[int, ModelTxn] = {}
        self.holders: dict[str, int] = {}
        self.used_keys: set[str] = set()
        self.highest = -1

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 15))

    def teardown(self) -> None:
        try:
            self.run(self.harness.store.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def coord(self) -> Any:
        return self.harness.coordinator

    def expect(self, error: type[Exception] | None, call: Any) -> Any:
        """Run ``call`` (a coroutine) and check it raises ``error`` (or nothing)."""
        if error is None:
            return self.run(call)
        try:
            self.run(call)
        except error:
            return None
        raise AssertionError(f"expected {error.__name__}")

    def refusal(self, seq: int, *, open_needed: str | None) -> type[Exception] | None:
        """The error a call on ``seq`` must raise: unknown, fenced, or in a wrong state."""
        txn = self.model.get(seq)
        if txn is None:
            return TxnNotFoundError
        if txn.fenced:
            return FencedError
        if open_needed is not None and txn.state not in ("open", open_needed):
            return TxnNotOpenError
        return None

    # -- rules ---------------------------------------------------------------------

    @rule(target=txns, tid=IDS)
    def begin(self, tid: str | None) -> int:
        async def begin() -> Any:  # submits to the store: needs the running loop
            return self.coord.begin(transactional_id=tid)

        record = self.run(begin())
        seq = int(record.txn_id.seq)
        assert seq > self.highest  # never handed out twice, restarts included
        self.highest = seq
        if tid is not None:
            previous = self.model.get(self.holders.get(tid, -1))
            if previous is not None:
                previous.fenced = previous.persisted = True
                if previous.state == "open":
                    previous.state = "aborted"
            self.holders[tid] = seq
        self.model[seq] = ModelTxn(tid)
        return seq

    @rule(seq=txns, topic=st.sampled_from(TOPICS))
    def send(self, seq: int, topic: str) -> None:
        txn = self.model.get(seq)
        error = self.refusal(seq, open_needed="open")

        async def send() -> None:
            await self.harness.send(self.coord.get(TxnId(seq)), topic)

        self.expect(error, send())
        if error is None and txn is not None:
            txn.persisted = True
            if topic not in txn.topics:
                txn.topics += (topic,)

    @rule(seq=txns, commit=st.booleans())
    def end(self, seq: int, commit: bool) -> None:
        wanted = "committed" if commit else "aborted"
        error = self.refusal(seq, open_needed=wanted)
        call = self.coord.commit if commit else self.coord.abort
        self.expect(error, call(f"txn-{seq}"))
        if error is None:
            self.model[seq].state = wanted
            self.model[seq].persisted = True

    @rule(commits=st.lists(txns, max_size=3), aborts=st.lists(txns, max_size=3), key=KEYS)
    def finish(self, commits: list[int], aborts: list[int], key: str | None) -> None:
        listed = [*commits, *aborts]
        txns = [self.model.get(seq) for seq in listed]
        error: type[Exception] | None = None
        duplicate = key is not None and key in self.used_keys
        if any(t is None for t in txns):
            error = TxnNotFoundError
        elif len(set(listed)) != len(listed):
            error = InvalidArgumentError
        elif duplicate:
            pass  # a replay: no further checks, listed open transactions are aborted
        elif any(self.model[seq].fenced for seq in listed):
            error = FencedError
        elif any(self.model[s].state == "aborted" for s in commits) or any(
            self.model[s].state == "committed" for s in aborts
        ):
            error = TxnNotOpenError
        result = self.expect(
            error,
            self.coord.finish([f"txn-{s}" for s in commits], [f"txn-{s}" for s in aborts], key),
        )
        if error is not None:
            return
        for seq in listed:
            txn = self.model[seq]
            if txn.state == "open":
                txn.state = "aborted" if duplicate or seq in aborts else "committed"
                txn.persisted = True
        assert result.duplicate == duplicate
        if duplicate:
            assert result.committed == [
                f"txn-{s}" for s in listed if self.model[s].state == "committed"
            ]
            assert result.aborted == [
                f"txn-{s}" for s in listed if self.model[s].state == "aborted"
            ]
        else:
            assert result.committed == [f"txn-{s}" for s in commits]
            assert result.aborted == [f"txn-{s}" for s in aborts]
            if key is not None:
                self.used_keys.add(key)

    @rule(seq=txns, commit=st.booleans())
    def fence_while_deciding(self, seq: int, commit: bool) -> None:
        """A begin with the same transactional id while ``seq``'s decision is in flight."""
        txn = self.model.get(seq)
        if txn is None or txn.tid is None or txn.fenced or txn.state != "open":
            return
        tid = txn.tid

        async def race() -> int:
            record = self.coord.get(TxnId(seq))
            call = self.coord.commit if commit else self.coord.abort
            deciding = (TxnState.COMMITTING, TxnState.ABORTING)
            with write_lock(self.harness.path):
                task = asyncio.create_task(call(record.txn_id))
                await eventually(lambda: record.state in deciding, "the decision to start")
                fencer = self.coord.begin(transactional_id=tid)
            await task
            return int(fencer.txn_id.seq)

        fencer = self.run(race())
        txn.state = "committed" if commit else "aborted"
        txn.fenced = txn.persisted = True
        self.highest = fencer
        self.holders[tid] = fencer
        self.model[fencer] = ModelTxn(tid)

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        """Reopen; a clean close writes open rows, a crash forgets row-less transactions."""
        if clean:
            self.run(self.harness.close_cleanly())
            for txn in self.model.values():
                txn.persisted = True
        self.run(self.harness.reopen())
        self.model = {seq: t for seq, t in self.model.items() if t.persisted}
        self.holders = {}
        for seq, txn in sorted(self.model.items()):
            if txn.tid is not None and not txn.fenced:
                self.holders[txn.tid] = seq

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        harness = self.harness
        rows = self.run(harness.rows())  # flushes first: every decision is durable
        coord = self.coord
        coord._check()
        harness.store._check()
        for seq, txn in self.model.items():
            record = coord.get(TxnId(seq))
            assert (record.state, record.fenced) == (TxnState(txn.state), txn.fenced)
            assert tuple(record.topics) == txn.topics
        open_seqs = sorted(s for s, t in self.model.items() if t.state == "open")
        assert sorted(r.txn_id.seq for r in coord.open_records()) == open_seqs
        low = coord.low_watermark()
        assert (low == open_seqs[0]) if open_seqs else (low > self.highest)
        assert rows == {
            seq: (txn.state, int(txn.fenced)) for seq, txn in self.model.items() if txn.persisted
        }
        for topic in TOPICS:
            log = self.run(harness.log(topic))
            markers = Counter(entry for entry in log if entry[0] != "data")
            expected = Counter(
                ("commit" if txn.state == "committed" else "abort", seq)
                for seq, txn in self.model.items()
                if txn.state != "open" and topic in txn.topics
            )
            assert markers == expected


CoordinatorMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=20, deadline=None, derandomize=True
)
TestCoordinatorAgainstModel = CoordinatorMachine.TestCase
