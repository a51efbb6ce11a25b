"""Transactional acks: pending while open, applied on commit, released on abort."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import drain, make_topics, positions, values

from txnstream.api import AckConflictError, ConflictError, Engine, Position, TxnNotOpenError


def _sub(stats: dict[str, object], name: str = "s") -> dict[str, object]:
    subs = stats["subscriptions"]
    assert isinstance(subs, dict)
    result = subs[name]
    assert isinstance(result, dict)
    return result


async def _three(engine: Engine) -> list[Position]:
    await make_topics(engine, "t")
    return await engine.send_many("t", ["m0", "m1", "m2"])


async def test_transactional_ack_is_pending_until_commit(engine: Engine) -> None:
    sent = await _three(engine)
    c1 = await engine.subscribe("t", "s", type="shared")
    assert positions(await c1.receive(max=10, timeout=0)) == sent
    txn = await engine.begin()
    assert await txn.ack("t", "s", [sent[0]]) == 1

    stats = _sub(await engine.stats("t"))
    assert stats["mark_delete"] is None  # not applied yet
    # The consumer leaves: its other messages go to the next consumer, the pending
    # one does not.
    await c1.close()
    c2 = await engine.subscribe("t", "s", type="shared")
    got = await drain(c2)
    assert positions(got) == sent[1:]
    await c2.ack(positions(got))
    assert _sub(await engine.stats("t"))["mark_delete"] is None

    await txn.commit()

    stats = _sub(await engine.stats("t"))
    assert stats["mark_delete"] == str(sent[2])
    assert stats["backlog"] == 0
    await c2.close()
    assert await drain(await engine.subscribe("t", "s", type="shared")) == []


async def test_transactional_ack_is_released_for_redelivery_on_abort(engine: Engine) -> None:
    sent = await _three(engine)
    sub = await engine.subscribe("t", "s", type="shared")
    await sub.receive(max=10, timeout=0)
    await sub.ack([sent[1], sent[2]])
    txn = await engine.begin()
    await txn.ack("t", "s", [sent[0]])
    assert await sub.receive(timeout=0.05) == []

    await txn.abort()

    (again,) = await sub.receive(max=10, timeout=1.0)
    assert again.position == sent[0]
    assert again.redelivery_count == 1
    stats = _sub(await engine.stats("t"))
    assert stats["mark_delete"] is None
    assert stats["backlog"] == 1


async def test_ack_of_a_position_pending_in_another_transaction_conflicts(
    engine: Engine,
) -> None:
    sent = await _three(engine)
    sub = await engine.subscribe("t", "s", type="shared")
    await sub.receive(max=10, timeout=0)
    holder = await engine.begin()
    other = await engine.begin()
    await holder.ack("t", "s", [sent[1]])

    with pytest.raises(AckConflictError) as caught:
        await other.ack("t", "s", [sent[1]])
    assert isinstance(caught.value, ConflictError)
    with pytest.raises(AckConflictError):
        await other.ack("t", "s", sent[2], cumulative=True)
    with pytest.raises(AckConflictError):
        await sub.ack(sent[1])
    with pytest.raises(AckConflictError):
        await sub.ack(sent[2], cumulative=True)
    assert _sub(await engine.stats("t"))["mark_delete"] is None

    # The same transaction may ack it again; unrelated positions are fine.
    await holder.ack("t", "s", [sent[1]])
    await other.ack("t", "s", [sent[0]])
    await sub.ack(sent[2])

    await holder.abort()
    await other.commit()  # its failed acks left nothing behind
    stats = _sub(await engine.stats("t"))
    assert stats["mark_delete"] == str(sent[0])
    (again,) = await sub.receive(timeout=1.0)
    assert again.position == sent[1]
    await sub.ack(sent[1])  # no longer pending anywhere
    assert _sub(await engine.stats("t"))["mark_delete"] == str(sent[2])


async def test_transactional_cumulative_ack(engine: Engine) -> None:
    sent = await _three(engine)
    sub = await engine.subscribe("t", "s")
    await sub.receive(max=10, timeout=0)
    txn = await engine.begin()
    await txn.ack("t", "s", sent[1], cumulative=True)
    with pytest.raises(AckConflictError):
        await sub.ack(sent[0])
    await txn.commit()
    stats = _sub(await engine.stats("t"))
    assert stats["mark_delete"] == str(sent[1])
    assert stats["backlog"] == 1


async def test_transactional_cumulative_ack_released_on_abort(engine: Engine) -> None:
    sent = await _three(engine)
    sub = await engine.subscribe("t", "s")
    await sub.receive(max=10, timeout=0)
    txn = await engine.begin()
    await txn.ack("t", "s", sent[1], cumulative=True)
    await txn.abort()
    await sub.close()
    got = await drain(await engine.subscribe("t", "s"))
    assert positions(got) == sent


async def test_consume_transform_produce_is_all_or_nothing(engine: Engine) -> None:
    await make_topics(engine, "in", "out")
    (src,) = await engine.send_many("in", ["order-1"])
    source = await engine.subscribe("in", "worker")
    sink = await engine.subscribe("out", "reader")
    (msg,) = await source.receive(timeout=0)

    failed = await engine.begin()
    await failed.send("out", "processed order-1 (attempt 1)")
    await failed.ack("in", "worker", [msg.position])
    await failed.abort()
    assert await sink.receive(timeout=0.05) == []
    (retry,) = await source.receive(timeout=1.0)
    assert retry.position == src
    assert retry.redelivery_count == 1

    async with engine.transaction() as txn:
        await txn.send("out", "processed order-1 (attempt 2)")
        await txn.ack("in", "worker", [retry.position])

    assert values(await sink.receive(timeout=0)) == ["processed order-1 (attempt 2)"]
    stats = _sub(await engine.stats("in"), "worker")
    assert stats["mark_delete"] == str(src)
    assert stats["backlog"] == 0


async def test_ack_in_an_ended_transaction_is_refused_and_leaves_nothing_pending(
    engine: Engine,
) -> None:
    sent = await _three(engine)
    sub = await engine.subscribe("t", "s")
    await sub.receive(max=10, timeout=0)
    txn = await engine.begin()
    await txn.commit()
    with pytest.raises(TxnNotOpenError):
        await txn.ack("t", "s", [sent[0]])
    await sub.ack(sent[0])  # not pending anywhere
    assert _sub(await engine.stats("t"))["mark_delete"] == str(sent[0])


async def test_pending_transactional_ack_survives_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        sent = await _three(engine)
        sub = await engine.subscribe("t", "s", type="shared")
        await sub.receive(max=10, timeout=0)
        commit_me = await engine.begin(timeout=120.0)
        await commit_me.ack("t", "s", [sent[0]])
        abort_me = await engine.begin(timeout=120.0)
        await abort_me.ack("t", "s", [sent[1]])

    async with Engine.open(data_dir) as engine:
        sub = await engine.subscribe("t", "s", type="shared")
        # Both are still pending: only the unacknowledged one is redelivered.
        got = await drain(sub)
        assert positions(got) == [sent[2]]
        with pytest.raises(AckConflictError):
            await sub.ack(sent[0])
        await engine.commit(commit_me.id)
        await engine.abort(abort_me.id)
        assert _sub(await engine.stats("t"))["mark_delete"] == str(sent[0])
        (again,) = await sub.receive(timeout=1.0)
        assert again.position == sent[1]


async def test_aborted_cumulative_ack_releases_positions_not_yet_delivered(
    engine: Engine,
) -> None:
    sent = await _three(engine)
    sub = await engine.subscribe("t", "s")
    assert positions(await sub.receive(max=1, timeout=0)) == sent[:1]
    txn = await engine.begin()
    await txn.ack("t", "s", sent[2], cumulative=True)  # everything up to m2 is pending
    assert await sub.receive(max=10, timeout=0.05) == []

    await txn.abort()

    got = await drain(sub)
    assert positions(got) == sent
    assert _sub(await engine.stats("t"))["backlog"] == 3


async def test_aborted_cumulative_ack_after_restart_releases_everything(
    data_dir: Path,
) -> None:
    async with Engine.open(data_dir) as engine:
        sent = await _three(engine)
        sub = await engine.subscribe("t", "s")
        assert positions(await sub.receive(max=10, timeout=0)) == sent
        txn = await engine.begin(timeout=120.0)
        await txn.ack("t", "s", sent[2], cumulative=True)

    async with Engine.open(data_dir) as engine:
        sub = await engine.subscribe("t", "s")
        assert await sub.receive(max=10, timeout=0.05) == []  # still pending
        await engine.abort(txn.id)
        got = await drain(sub)
        assert positions(got) == sent


async def test_old_transactional_ack_does_not_touch_a_recreated_subscription(
    engine: Engine,
) -> None:
    sent = await _three(engine)
    sub = await engine.subscribe("t", "s", type="shared")
    await sub.receive(max=10, timeout=0)
    txn = await engine.begin()
    await txn.ack("t", "s", [sent[0]])

    await engine.delete_subscription("t", "s")
    fresh = await engine.subscribe("t", "s", type="shared")
    await txn.commit()

    assert _sub(await engine.stats("t"))["mark_delete"] is None
    assert positions(await drain(fresh)) == sent
