"""Stateful property test: partial receives on an ordered subscription against a model.

An exclusive read_committed subscription is read a few messages at a time (so delivery
reads ahead and keeps what it read past the last delivered message for the next
receive), between plain sends, committed and aborted transactions, cumulative and
individual acks, nacks, seeks and restarts. Every receive must return exactly the next
deliverable values in log order; after a seek, delivery starts again from there.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test
from support import EngineStateMachine, NewStore

from txnstream.api import EngineConfig, Message, Position

TOPIC = "t"


class OrderedDelivery(EngineStateMachine):
    def __init__(self, new_store: NewStore | None = None) -> None:
        super().__init__(EngineConfig(ledger_max_entries=9, snapshot_interval=3600.0), new_store)
        self.next_value = 0
        # the deliverable values in log order with their positions (values grow with
        # positions: one writer), the index of the next one never delivered, the values
        # acknowledged one by one (skipped when the log is read again after a restart),
        # the delivered unacknowledged ones, and the nacked ones (delivered again first)
        self.log: list[tuple[int, Position]] = []
        self.delivered = 0
        self.acked: set[int] = set()
        self.unacked: dict[int, Position] = {}
        self.redeliver: list[int] = []
        self.run(self.engine.create_topic(TOPIC))
        self.handle = self.run(self.engine.subscribe(TOPIC, "s", initial_position="earliest"))

    def _values(self, count: int) -> list[str]:
        values = [str(self.next_value + i) for i in range(count)]
        self.next_value += count
        return values

    async def _positions(self, values: list[str]) -> list[tuple[int, Position]]:
        fetched = await self.engine.fetch(TOPIC, None, max=10_000, isolation="read_uncommitted")
        where = {e.value: e.position for e in fetched.entries}
        return [(int(v), where[v]) for v in values]

    # -- rules ---------------------------------------------------------------------

    @rule(count=st.integers(1, 4))
    def send(self, count: int) -> None:
        values = self._values(count)
        for value in values:
            self.run(self.engine.send(TOPIC, value))
        self.log += self.run(self._positions(values))

    @rule(count=st.integers(1, 4), commit=st.booleans())
    def transaction(self, count: int, commit: bool) -> None:
        values = self._values(count)

        async def go() -> None:
            txn = await self.engine.begin()
            await txn.send_many(TOPIC, values)
            await (txn.commit() if commit else txn.abort())

        self.run(go())
        if commit:
            self.log += self.run(self._positions(values))

    @rule(most=st.integers(1, 7))
    def receive(self, most: int) -> None:
        messages: list[Message] = self.run(self.handle.receive(max=most, timeout=0))
        expected = self.redeliver[:most]
        self.redeliver = self.redeliver[len(expected) :]
        while len(expected) < most and self.delivered < len(self.log):
            value, _ = self.log[self.delivered]
            self.delivered += 1
            if value not in self.acked:
                expected.append(value)
        assert [int(m.value) for m in messages] == expected
        self.unacked.update((int(m.value), m.position) for m in messages)

    @precondition(lambda self: self.unacked)
    @rule()
    def ack_cumulative(self) -> None:
        upto = max(self.unacked.values())
        self.run(self.handle.ack(upto, cumulative=True))
        self.unacked = {v: p for v, p in self.unacked.items() if p > upto}
        self.redeliver = [v for v in self.redeliver if v in self.unacked]
        self.acked = {v for v in self.acked if v > max(self.unacked, default=-1)}

    @precondition(lambda self: self.unacked)
    @rule(data=st.data())
    def ack_one(self, data: st.DataObject) -> None:
        value = data.draw(st.sampled_from(sorted(self.unacked)))
        self.run(self.handle.ack(self.unacked.pop(value)))
        self.acked.add(value)
        if value in self.redeliver:
            self.redeliver.remove(value)

    @precondition(lambda self: self.unacked)
    @rule(data=st.data())
    def nack_one(self, data: st.DataObject) -> None:
        value = data.draw(st.sampled_from(sorted(self.unacked)))
        self.run(self.engine.nack(TOPIC, "s", [self.unacked[value]]))
        if value not in self.redeliver:
            self.redeliver = sorted([*self.redeliver, value])

    @precondition(lambda self: self.log)
    @rule(data=st.data())
    def seek(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.log) - 1))
        self.run(self.engine.seek(TOPIC, "s", self.log[index][1]))
        self.delivered = index
        self.acked.clear()
        self.unacked.clear()
        self.redeliver = []

    @rule()
    def restart(self) -> None:
        self.reopen()
        self.handle = self.run(self.engine.subscribe(TOPIC, "s"))
        # delivered, unacknowledged messages come again in log order; acked ones do not
        index = {value: i for i, (value, _) in enumerate(self.log)}
        self.delivered = min([index[v] for v in self.unacked], default=self.delivered)
        self.unacked.clear()
        self.redeliver = []

    @invariant()
    def never_past_the_log(self) -> None:
        assert self.delivered <= len(self.log)


@pytest.mark.postgresql_in_full_run  # (60 runs of 30 steps, each run a store of its own)
@pytest.mark.timeout(600)
def test_ordered_delivery_against_model(new_store: NewStore) -> None:
    run_state_machine_as_test(
        lambda: OrderedDelivery(new_store),
        settings=settings(max_examples=60, stateful_step_count=30, deadline=None, derandomize=True),
    )
