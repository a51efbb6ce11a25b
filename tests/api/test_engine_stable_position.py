"""Stable position: read_committed delivery stops before the oldest open transaction."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support import NewStore, drain, make_topics, positions, store_per_example, values, wait_until

from txnstream.api import Engine, EngineConfig, Position


async def test_open_transaction_holds_back_later_plain_messages(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    before = await engine.send("t", "before")
    txn = await engine.begin()
    in_txn = await txn.send("t", "in-txn")
    after = await engine.send("t", "after")

    stats = await engine.stats("t")
    assert stats["stable_position"] == str(before)
    assert stats["last_confirmed"] == str(after)
    assert stats["open_txns"] == 1
    assert stats["subscriptions"]["s"]["backlog"] == 1
    assert values(await drain(sub)) == ["before"]

    await txn.commit()

    got = await sub.receive(max=10, timeout=0)
    assert positions(got) == [in_txn, after]
    assert values(got) == ["in-txn", "after"]
    assert (await engine.stats("t"))["stable_position"] == (await engine.stats("t"))[
        "last_confirmed"
    ]


async def test_aborting_the_blocking_transaction_releases_only_the_plain_messages(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    txn = await engine.begin()
    await txn.send("t", "in-txn")
    after = await engine.send("t", "after")
    assert await sub.receive(timeout=0.1) == []
    assert (await engine.stats("t"))["stable_position"] is None

    await txn.abort()

    got = await sub.receive(max=10, timeout=0)
    assert positions(got) == [after]
    assert await drain(sub) == []


async def test_delivery_follows_position_order_not_commit_order(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    first = await engine.begin()
    second = await engine.begin()
    sent: list[tuple[Any, str]] = []
    sent.append((await first.send("t", "f1"), "f1"))
    sent.append((await second.send("t", "s1"), "s1"))
    sent.append((await engine.send("t", "p1"), "p1"))
    sent.append((await first.send("t", "f2"), "f2"))
    sent.append((await second.send("t", "s2"), "s2"))

    await second.commit()  # the younger one decides first: still blocked by `first`
    assert await sub.receive(timeout=0.1) == []
    await first.commit()

    got = await drain(sub)
    assert positions(got) == [p for p, _ in sent]
    assert values(got) == ["f1", "s1", "p1", "f2", "s2"]


async def test_stable_position_moves_to_the_next_open_transaction(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    older = await engine.begin()
    younger = await engine.begin()
    o_pos = await older.send("t", "o")
    await younger.send("t", "y")
    await engine.send("t", "p")

    await older.commit()
    stats = await engine.stats("t")
    # Now only `younger` is open: the limit is just before its first entry.
    assert stats["stable_position"] == str(o_pos)
    assert stats["open_txns"] == 1
    assert values(await drain(sub)) == ["o"]

    await younger.commit()
    assert values(await drain(sub)) == ["y", "p"]


async def test_tail_of_markers_and_aborted_data_leaves_nothing_to_deliver(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    plain = await engine.send("t", "plain")
    assert positions(await sub.receive(timeout=0)) == [plain]
    await sub.ack(plain)
    for _ in range(3):
        txn = await engine.begin()
        await txn.send_many("t", ["x", "y"])
        await txn.abort()
    empty = await engine.begin()
    await empty.send("t", "gone")
    await empty.abort()

    stats = await engine.stats("t")
    assert stats["stable_position"] == stats["last_confirmed"]
    assert stats["entries"] == 1 + 4 * 3 - 1  # plain + (data, data, ABORT)*3 + (data, ABORT)
    assert stats["subscriptions"]["s"]["backlog"] == 0

    # The first receive skips the tail; later ones must wait, not re-read in a loop.
    assert await sub.receive(timeout=0.05) == []
    topic = engine._rt.topics["t"]
    calls = 0
    original = topic.ledger.read

    async def counting_read(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return await original(*args, **kwargs)

    monkeypatch.setattr(topic.ledger, "read", counting_read)
    started = time.monotonic()
    assert await sub.receive(timeout=0.3) == []
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 1.0
    assert calls <= 1, f"a caught-up consumer re-read the ledger {calls} times"
    assert (await engine.stats("t"))["subscriptions"]["s"]["backlog"] == 0


async def test_waiting_consumer_wakes_promptly_on_commit(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    txn = await engine.begin()
    pos = await txn.send("t", "late")
    await engine.send("t", "held back")

    waiter = asyncio.create_task(sub.receive(max=10, timeout=30.0))
    done, _ = await asyncio.wait({waiter}, timeout=0.2)
    assert not done, "receive returned while only undecided data was there"

    committed_at = time.monotonic()
    await txn.commit()
    got = await asyncio.wait_for(waiter, timeout=5.0)
    woke_after = time.monotonic() - committed_at

    assert positions(got)[0] == pos
    assert values(got) == ["late", "held back"]
    assert woke_after < 1.0, f"consumer woke {woke_after:.2f}s after the commit"


async def test_waiting_consumer_wakes_on_plain_send(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    waiter = asyncio.create_task(sub.receive(max=10, timeout=30.0))
    done, _ = await asyncio.wait({waiter}, timeout=0.1)
    assert not done
    sent_at = time.monotonic()
    await engine.send("t", "hello")
    got = await asyncio.wait_for(waiter, timeout=5.0)
    assert values(got) == ["hello"]
    assert time.monotonic() - sent_at < 1.0


async def test_receive_timeout_returns_empty_list_on_time(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    started = time.monotonic()
    assert await sub.receive(max=5, timeout=0.2) == []
    assert 0.15 <= time.monotonic() - started < 1.0


async def test_stable_position_never_moves_backwards(data_dir: Path) -> None:
    seen: list[Position] = []

    async def record(engine: Engine) -> None:
        stable = (await engine.stats("t"))["stable_position"]
        if stable is not None:
            seen.append(Position.parse(stable))
        elif seen:
            raise AssertionError(f"stable position went from {seen[-1]} back to None")

    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t")
        await engine.send("t", "p0")
        await record(engine)
        long_lived = await engine.begin(timeout=120.0)
        short = await engine.begin(timeout=0.3)
        await long_lived.send("t", "l0")
        await record(engine)
        await short.send("t", "s0")
        await engine.send("t", "p1")
        await record(engine)
        fenced = await engine.begin(transactional_id="w")
        await fenced.send("t", "f0")
        successor = await engine.begin(transactional_id="w")
        await record(engine)
        await wait_until(
            lambda: _txn_is(engine, short.id, "aborted"), 5.0, "the short transaction to time out"
        )
        await record(engine)
        await engine.send("t", "p2")
        await record(engine)
    async with Engine.open(data_dir) as engine:
        await record(engine)
        await engine.commit(long_lived.id)
        await record(engine)
        await engine.abort(successor.id)
        await wait_until(_no_open_txns(engine), 5.0, "every transaction to end")
        await record(engine)
        stats = await engine.stats("t")
        assert stats["stable_position"] == stats["last_confirmed"]
    assert seen == sorted(seen), f"stable position moved backwards: {seen}"


async def _txn_is(engine: Engine, txn_id: str, state: str) -> bool:
    return (await engine.get_transaction(txn_id)).state == state


def _no_open_txns(engine: Engine) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not await engine.transactions(state="open")

    return check


# A step: (transaction 0-3, what it does): "send" one message in it (beginning it if
# needed), "commit" or "abort" it; or (None, "send") one plain message.
_steps = st.lists(
    st.tuples(st.sampled_from([None, 0, 1, 2, 3]), st.sampled_from(["send", "commit", "abort"])),
    min_size=5,
    max_size=60,
)


@pytest.mark.postgresql_in_full_run  # (60 examples, each a store of its own)
@pytest.mark.timeout(300)
@store_per_example(60)
@given(_steps, st.integers(0, 6))
# an aborted transaction whose data lies below the stable position (held by transaction
# 1) and whose marker is two ledgers on
@example([(0, "send"), (1, "send"), *[(None, "send")] * 5, (0, "abort")], 0)
async def test_backlog_is_what_a_read_committed_consumer_would_get(
    new_store: NewStore, steps: list[tuple[int | None, str]], ack_every: int
) -> None:
    """The backlog count leaves out aborted data by the aborted set, and delivery filters
    it by the same set row by row: with transactions interleaved across small ledgers
    (aborted ones spanning ledgers), some left open, and some messages acknowledged, the
    backlog is what a second read_committed subscription delivers minus the acks."""
    with new_store() as tmp:
        async with Engine.open(tmp, EngineConfig(ledger_max_entries=3)) as engine:
            await engine.create_topic("t")
            counted = await engine.subscribe("t", "counted")
            txns: dict[int, Any] = {}
            for slot, action in steps:
                if slot is None:
                    await engine.send("t", "plain")
                elif action == "send":
                    if slot not in txns:
                        txns[slot] = await engine.begin(timeout=600)
                    await txns[slot].send("t", f"in {slot}")
                elif slot in txns:
                    txn = txns.pop(slot)
                    await (txn.commit() if action == "commit" else txn.abort())
            delivered = []
            probe = await engine.subscribe("t", "probe", initial_position="earliest")
            while got := await probe.receive(max=1000, timeout=0):
                delivered.extend(got)
            acked = [m.position for m in delivered[:: ack_every + 1]] if ack_every else []
            if acked:
                await counted.ack(acked)
            stats = await engine.stats("t")
            assert stats["subscriptions"]["counted"]["backlog"] == len(delivered) - len(acked)
