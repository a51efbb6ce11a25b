"""Hanging transactions: ages, deadlines, why each ended, and who holds the stable position."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support import wait_until

from txnstream.api import Engine, EngineConfig, TxnNotOpenError


async def test_info_carries_creation_deadline_timeout_and_reason(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        before = datetime.now(UTC)
        committed = await engine.begin(timeout=30.0, label="job:1")
        await committed.send("t", 1)
        info = await committed.info()
        assert info.reason is None
        assert info.timeout_ms == 30_000
        assert before - timedelta(seconds=1) <= info.created_at <= datetime.now(UTC)
        assert info.deadline - info.created_at == timedelta(seconds=30)
        await committed.commit()
        aborted = await engine.begin()
        await aborted.abort()
        holder = await engine.begin(transactional_id="w")
        await holder.send("t", 2)
        await engine.begin(transactional_id="w")  # fences the holder
        timed_out = await engine.begin(timeout=0.05)
        await timed_out.send("t", 3)
        await wait_until(
            lambda: _state_is(engine, timed_out.id, "aborted"), 10, "the timeout abort"
        )
        with pytest.raises(TxnNotOpenError, match="timed out"):
            await timed_out.commit()
        reasons = {
            committed.id: "client",
            aborted.id: "client",
            holder.id: "fenced",
            timed_out.id: "timeout",
        }
        for txn, reason in reasons.items():
            assert (await engine.get_transaction(txn)).reason == reason
    async with Engine.open(data_dir) as engine:  # reasons are durable
        for txn, reason in reasons.items():
            if txn != aborted.id:  # it wrote nothing: no row, forgotten by design
                assert (await engine.get_transaction(txn)).reason == reason


async def _state_is(engine: Engine, txn: str, state: str) -> bool:
    return (await engine.get_transaction(txn)).state == state


async def test_older_than_filter_and_the_blocking_transaction(engine: Engine) -> None:
    await engine.create_topic("t")
    assert (await engine.stats("t"))["blocking_txn"] is None
    old = await engine.begin(timeout=60.0)
    await old.send("t", "held")
    await engine.send("t", "plain")  # above the open transaction: not deliverable yet
    first = await engine.begin()
    await first.send("t", "later")
    await wait_until(lambda: _open_on(engine, 2), 5, "both transactions on the topic")
    stats = await engine.stats("t")
    assert stats["blocking_txn"]["txn"] == old.id
    info = await old.info()
    assert stats["blocking_txn"]["since"] == _z(info.created_at)
    assert stats["blocking_txn"]["deadline"] == _z(info.deadline)
    listed = await engine.transactions(state="open", older_than_ms=0)
    assert [t.txn for t in listed] == [old.id, first.id]
    assert await engine.transactions(state="open", older_than_ms=3_600_000) == []
    await old.abort()
    assert (await engine.stats("t"))["blocking_txn"]["txn"] == first.id
    await first.commit()
    assert (await engine.stats("t"))["blocking_txn"] is None


async def _open_on(engine: Engine, count: int) -> bool:
    await engine._rt.store.flush()
    return (await engine.stats("t"))["open_txns"] == count


def _z(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.postgresql_in_full_run  # (5,000 transactions one after another)
async def test_ended_transactions_leave_the_deadline_heap_and_timeouts_still_fire(
    data_dir: Path,
) -> None:
    """A transaction's deadline stays queued after it ends (until the deadline passes):
    many short transactions with a long timeout must not grow that queue without bound,
    and a transaction left open among them still times out."""
    async with Engine.open(data_dir, EngineConfig(default_txn_timeout=60.0)) as engine:
        await engine.create_topic("t")
        hanging = await engine.begin(timeout=1.0)
        await hanging.send("t", b"left open")
        for n in range(5000):
            txn = await engine.begin()
            await txn.send("t", n)
            await (txn.abort() if n % 4 == 3 else txn.commit())
        table = engine._rt.coordinator
        assert len(table._deadlines) <= 2 * len(table._txns) + 1025
        assert len(table._deadlines) < 5000 / 2

        async def timed_out() -> bool:
            return (await engine.get_transaction(hanging.id)).state == "aborted"

        await wait_until(timed_out, 15, "the open transaction to time out")
