"""Stateful property test: the engine against a small reference model.

Random begin / transactional send / plain send / commit / abort / rollover / restart on
two topics; transactional sends go through handles kept per transaction (so a handle's
fast send outlives a step) and interleave several transactions within one step. After
every step: the stable position is exactly where the model puts it, each transaction
buffer passes ``_check()``, and a read_committed subscription on each topic has delivered
exactly the committed and non-transactional values at or below it, in log order.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    consumes,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from hypothesis.strategies import DataObject
from support import EngineStateMachine, NewStore

from txnstream.api import EngineConfig, Position, Transaction, TxnId, TxnNotOpenError
from txnstream.ledger import WriteBatch
from txnstream.snapshots import full_replay

TOPICS = ("a", "b")


@dataclass
class ModelEntry:
    kind: str  # "data" | "commit" | "abort"
    txn: int | None
    value: int | None


@dataclass
class ModelTxn:
    seq: int
    state: str = "open"
    topics: list[str] = field(default_factory=list)


class Model:
    """What the log of each topic must hold and what read_committed may deliver."""

    def __init__(self) -> None:
        self.logs: dict[str, list[ModelEntry]] = {t: [] for t in TOPICS}
        self.txns: dict[int, ModelTxn] = {}

    def stable_index(self, topic: str) -> int:
        """Index of the stable entry (-1: none)."""
        log = self.logs[topic]
        for i, entry in enumerate(log):
            is_txn_data = entry.kind == "data" and entry.txn is not None
            if is_txn_data and self.txns[entry.txn].state == "open":
                return i - 1
        return len(log) - 1

    def deliverable(self, topic: str) -> list[int]:
        upto = self.stable_index(topic)
        return [
            e.value
            for e in self.logs[topic][: upto + 1]
            if e.kind == "data"
            and e.value is not None
            and (e.txn is None or self.txns[e.txn].state == "committed")
        ]


class EngineMachine(EngineStateMachine):
    txns = Bundle("txns")

    def __init__(self, new_store: NewStore | None = None) -> None:
        # Periodic snapshots stay out of the way; the rule takes them at random moments.
        config = EngineConfig(ledger_max_entries=7, snapshot_interval=3600.0)
        super().__init__(config, new_store)
        self.model = Model()
        self.next_value = 0
        self.delivered: dict[str, list[int]] = {t: [] for t in TOPICS}
        self.snapshotted: set[str] = set()
        for topic in TOPICS:
            self.run(self.engine.create_topic(topic))
            self.run(self.engine.create_subscription(topic, "rc"))
        self.handles = {t: self.run(self.engine.subscribe(t, "rc")) for t in TOPICS}
        self.txn_handles: dict[int, Transaction] = {}

    def _handle(self, seq: int) -> Transaction:
        """The handle kept for transaction ``seq`` (a new one after a restart)."""
        handle = self.txn_handles.get(seq)
        if handle is None:
            handle = self.txn_handles[seq] = self.engine._transactions.handle(TxnId(seq))
        return handle

    # -- rules ---------------------------------------------------------------------

    @rule(target=txns)
    def begin(self) -> int:
        txn = self.run(self.engine.begin(timeout=600))
        seq = txn.txn_id.seq
        self.model.txns[seq] = ModelTxn(seq)
        self.txn_handles[seq] = txn
        return seq

    @rule(seq=txns, topic=st.sampled_from(TOPICS), count=st.integers(1, 3))
    def txn_send(self, seq: int, topic: str, count: int) -> None:
        self._sends([(seq, topic)] * count, gathered=True)

    @precondition(lambda self: bool(self.model.txns))
    @rule(data=st.data())
    def interleaved_sends(self, data: DataObject) -> None:
        """Several transactions' sends (and plain ones) to both topics in one step: the
        positions must follow the call order and each entry its own transaction."""
        seqs = sorted(self.model.txns)
        ops = data.draw(
            st.lists(
                st.tuples(st.sampled_from([*seqs, None]), st.sampled_from(TOPICS)),
                min_size=2,
                max_size=8,
            )
        )
        self._sends(ops, gathered=False)

    def _sends(self, ops: list[tuple[int | None, str]], *, gathered: bool) -> None:
        """Run ``ops`` (``(txn seq or None for a plain send, topic)``) in one step, each
        with the next value; the model takes the accepted ones in call order."""
        accepted: list[tuple[int | None, str, int]] = []

        async def one(seq: int | None, topic: str, value: int) -> None:
            if seq is None:
                await self.engine.send_many(topic, [value])
                accepted.append((seq, topic, value))
                return
            try:
                await self._handle(seq).send(topic, value)
            except TxnNotOpenError:
                if self.model.txns[seq].state == "open":
                    raise
                return
            if self.model.txns[seq].state != "open":
                raise AssertionError("send to an ended transaction was accepted")
            accepted.append((seq, topic, value))

        calls = []
        for seq, topic in ops:
            calls.append((seq, topic, self.next_value))
            self.next_value += 1

        async def run_all() -> None:
            if gathered:
                await asyncio.gather(*(one(*call) for call in calls))
            else:
                for call in calls:
                    await one(*call)

        self.run(run_all())
        for seq, topic, value in accepted:
            if seq is not None:
                txn_state = self.model.txns[seq]
                if topic not in txn_state.topics:
                    txn_state.topics.append(topic)
            self.model.logs[topic].append(ModelEntry("data", seq, value))

    @rule(topic=st.sampled_from(TOPICS), count=st.integers(1, 3))
    def plain_send(self, topic: str, count: int) -> None:
        values = list(range(self.next_value, self.next_value + count))
        self.next_value += count
        self.run(self.engine.send_many(topic, values))
        self.model.logs[topic].extend(ModelEntry("data", None, v) for v in values)

    def _end(self, seq: int, commit: bool) -> None:
        txn_state = self.model.txns[seq]
        if txn_state.state != "open":
            return
        if commit:
            self.run(self.engine.commit(f"txn-{seq}"))
        else:
            self.run(self.engine.abort(f"txn-{seq}"))
        txn_state.state = "committed" if commit else "aborted"
        for topic in txn_state.topics:
            self.model.logs[topic].append(ModelEntry("commit" if commit else "abort", seq, None))

    @rule(seq=consumes(txns))
    def commit(self, seq: int) -> None:
        self._end(seq, commit=True)

    @rule(seq=consumes(txns))
    def abort(self, seq: int) -> None:
        self._end(seq, commit=False)

    @rule(topic=st.sampled_from(TOPICS))
    def roll_over(self, topic: str) -> None:
        batch = WriteBatch()
        self.engine._rt.topics[topic].ledger.roll_over(batch)
        self.run(self.engine._rt.store.write(batch))

    @precondition(lambda self: self.next_value > 0)
    @rule()
    def restart(self) -> None:
        self.reopen()
        self.txn_handles.clear()
        self.handles = {t: self.run(self.engine.subscribe(t, "rc")) for t in TOPICS}
        for topic in TOPICS:
            self._check_recovery_equivalence(topic)

    @rule(topic=st.sampled_from(TOPICS))
    def snapshot(self, topic: str) -> None:
        self.run(self.engine.take_snapshot(topic))
        self.snapshotted.add(topic)

    def _check_recovery_equivalence(self, topic: str) -> None:
        """Snapshot + tail replay yields exactly the state of a full replay."""
        owner = self.engine._rt.topics[topic]
        recovered = owner.buffer
        replayed, _ = self.run(full_replay(owner.ledger))
        assert recovered.last_confirmed == replayed.last_confirmed
        assert recovered.max_read_position == replayed.max_read_position
        assert {
            t: (o.first, o.before_first, o.last) for t, o in recovered.ongoing_txns.items()
        } == {t: (o.first, o.before_first, o.last) for t, o in replayed.ongoing_txns.items()}
        assert {t: (a.first, a.last, a.marker) for t, a in recovered.aborted_txns.items()} == {
            t: (a.first, a.last, a.marker) for t, a in replayed.aborted_txns.items()
        }
        info = self.engine._rt.snapshots[owner.topic_id].recovery
        assert info is not None
        assert info.from_snapshot == (topic in self.snapshotted)

    # -- invariants ----------------------------------------------------------------

    @invariant()
    def matches_model(self) -> None:
        self.run(self.engine._rt.store.flush())
        for topic in TOPICS:
            buffer = self.engine._rt.topics[topic].buffer
            buffer._check()
            fetched = self.run(
                self.engine.fetch(topic, None, max=10_000, isolation="read_uncommitted")
            )
            log = [
                (
                    e.kind,
                    None if e.txn is None else int(e.txn[4:]),
                    e.value if e.kind == "data" else None,
                )
                for e in fetched.entries
            ]
            model_log = [(e.kind, e.txn, e.value) for e in self.model.logs[topic]]
            assert log == model_log
            index = self.model.stable_index(topic)
            expected = None if index < 0 else fetched.entries[index].position
            assert buffer.max_read_position == expected
            self._drain(topic)
            assert self.delivered[topic] == self.model.deliverable(topic)

    def _drain(self, topic: str) -> None:
        handle = self.handles[topic]
        while True:
            messages = self.run(handle.receive(max=1000, timeout=0))
            if not messages:
                return
            self.delivered[topic].extend(m.value for m in messages)
            last: Position = messages[-1].position
            self.run(handle.ack(last, cumulative=True))


@pytest.mark.postgresql_in_full_run  # (40 runs of 25 steps, each run a store of its own)
@pytest.mark.timeout(600)
def test_engine_against_model(new_store: NewStore) -> None:
    run_state_machine_as_test(
        lambda: EngineMachine(new_store),
        settings=settings(max_examples=40, stateful_step_count=25, deadline=None, derandomize=True),
    )
