"""Open, close and reopen: what survives, what waiting callers see."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support import drain, make_topics, positions, store_sql, values

from txnstream.api import ClosedError, Engine, EngineConfig, TxnNotFoundError


async def test_open_works_awaited_and_as_context_manager(data_dir: Path) -> None:
    engine = await Engine.open(data_dir, EngineConfig())
    try:
        await make_topics(engine, "t")
        await engine.send("t", "x")
    finally:
        await engine.close()
    async with Engine.open(data_dir) as again:
        assert await again.list_topics() == ["t"]
        assert (await again.stats("t"))["entries"] == 1


async def test_clean_close_keeps_everything_acknowledged(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t", "u")
        plain = await engine.send_many("t", ["p1", "p2"])
        async with engine.transaction() as committed:
            await committed.send("t", "c1")
            await committed.send("u", "c2")
        aborted = await engine.begin()
        await aborted.send("t", "a1")
        await aborted.abort()
        await engine.create_subscription("t", "s", type="shared")

    async with Engine.open(data_dir) as engine:
        stats = await engine.stats("t")
        assert stats["open_txns"] == 0
        assert stats["aborted_txns"] == 1
        # Recovery with nothing open ends with the stable position at last confirmed.
        assert stats["stable_position"] == stats["last_confirmed"]
        assert stats["subscriptions"]["s"]["backlog"] == 3
        got = await drain(await engine.subscribe("t", "s", type="shared"))
        assert values(got) == ["p1", "p2", "c1"]
        assert positions(got)[:2] == plain
        assert values(await drain(await engine.subscribe("u", "s"))) == ["c2"]
        assert (await engine.get_transaction(committed.id)).state == "committed"
        assert (await engine.get_transaction(aborted.id)).state == "aborted"


async def test_close_releases_a_waiting_receiver(data_dir: Path) -> None:
    engine = await Engine.open(data_dir)
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    waiter = asyncio.create_task(sub.receive(timeout=30.0))
    done, _ = await asyncio.wait({waiter}, timeout=0.1)
    assert not done
    await asyncio.wait_for(engine.close(), timeout=10.0)
    with pytest.raises(ClosedError):
        await asyncio.wait_for(waiter, timeout=5.0)


async def test_empty_transaction_commits_without_touching_topics(engine: Engine) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    await txn.commit()
    info = await engine.get_transaction(txn.id)
    assert info.state == "committed"
    assert info.topics == []
    assert (await engine.stats("t"))["entries"] == 0


async def test_unknown_transaction_stays_unknown_after_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.begin()
    async with Engine.open(data_dir) as engine:
        with pytest.raises(TxnNotFoundError):
            await engine.get_transaction("txn-12345")


async def test_backpressure_with_a_tiny_queue_completes_in_order(data_dir: Path) -> None:
    async with Engine.open(data_dir, EngineConfig(max_pending_entries=10)) as engine:
        await make_topics(engine, "t")
        txn = await engine.begin()
        in_txn = await asyncio.wait_for(
            asyncio.gather(*(txn.send("t", i) for i in range(300))), timeout=20.0
        )
        await asyncio.wait_for(txn.commit(), timeout=20.0)
        plain = await asyncio.wait_for(
            asyncio.gather(*(engine.send("t", 300 + i) for i in range(100))), timeout=20.0
        )
        assert list(in_txn) == sorted(in_txn)
        got = await drain(await engine.subscribe("t", "s"))
        assert positions(got) == [*in_txn, *plain]
        assert values(got) == list(range(400))


async def test_clean_close_seals_the_open_ledger_and_a_crash_still_counts_it(
    data_dir: Path,
) -> None:
    """A clean close records the open ledger's counts (the next open reads them instead
    of counting rows); a ledger left open, as by a crash, is counted on open."""
    sent = [f"m{i}" for i in range(5)]
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t")
        await engine.send_many("t", sent)
    assert store_sql(data_dir, "SELECT ledger_id, entries FROM ledgers") == [(0, 5)]
    store_sql(data_dir, "UPDATE ledgers SET entries = NULL, bytes = NULL")  # as if it crashed
    for round_ in range(2):
        async with Engine.open(data_dir) as engine:
            assert (await engine.stats("t"))["entries"] == 5
            sub = await engine.subscribe("t", f"s{round_}", initial_position="earliest")
            assert [m.value for m in await drain(sub)] == sent
