"""Delivery, acks and seek across ledger boundaries (tiny ledgers roll over often)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support import drain, positions, values

from txnstream.api import Engine, EngineConfig, Position

SMALL = EngineConfig(ledger_max_entries=2)


@pytest.fixture
async def small(data_dir: Path) -> AsyncIterator[Engine]:
    async with Engine.open(data_dir, SMALL) as opened:
        await opened.create_topic("t")
        yield opened


def _sub(stats: dict[str, object]) -> dict[str, object]:
    subs = stats["subscriptions"]
    assert isinstance(subs, dict)
    result = subs["s"]
    assert isinstance(result, dict)
    return result


async def test_delivery_and_acks_cross_ledger_boundaries(small: Engine) -> None:
    sent = [await small.send("t", i) for i in range(7)]
    assert len({p.ledger_id for p in sent}) == 4
    assert (await small.stats("t"))["ledgers"] == 4
    sub = await small.subscribe("t", "s", type="shared")
    got = await drain(sub)
    assert positions(got) == sent
    assert values(got) == list(range(7))

    await sub.ack([sent[6], sent[2], sent[3], sent[5]])
    assert _sub(await small.stats("t"))["mark_delete"] is None
    await sub.ack([sent[0], sent[1]])
    assert _sub(await small.stats("t"))["mark_delete"] == str(sent[3])
    await sub.ack(sent[4])
    stats = _sub(await small.stats("t"))
    assert stats["mark_delete"] == str(sent[6])
    assert stats["backlog"] == 0


async def test_seek_to_the_head_of_a_ledger(small: Engine) -> None:
    sent = await small.send_many("t", list(range(6)))
    head = next(p for p in sent if p.entry_id == 0 and p.ledger_id > sent[0].ledger_id)
    sub = await small.subscribe("t", "s")
    await sub.ack(sent[-1], cumulative=True)

    await sub.seek(head)

    stats = _sub(await small.stats("t"))
    before = sent[sent.index(head) - 1]
    assert stats["mark_delete"] == str(before)
    assert positions(await drain(sub)) == sent[sent.index(head) :]


async def test_open_transaction_across_many_ledgers_holds_back_then_releases(
    small: Engine,
) -> None:
    sub = await small.subscribe("t", "s")
    txn = await small.begin()
    first = await txn.send("t", "txn-0")
    plain = [await small.send("t", f"p{i}") for i in range(5)]
    second = await txn.send("t", "txn-1")
    assert plain[-1].ledger_id > first.ledger_id
    assert await sub.receive(timeout=0.05) == []
    assert (await small.stats("t"))["stable_position"] is None

    await txn.commit()

    got = await drain(sub)
    assert positions(got) == [first, *plain, second]


async def test_restart_starts_a_new_ledger_and_delivery_continues(data_dir: Path) -> None:
    async with Engine.open(data_dir, SMALL) as engine:
        await engine.create_topic("t")
        before = await engine.send_many("t", ["a", "b", "c"])
        sub = await engine.subscribe("t", "s")
        await sub.receive(max=2, timeout=0)
        await sub.ack(before[1], cumulative=True)
        ledgers = (await engine.stats("t"))["ledgers"]
    async with Engine.open(data_dir, SMALL) as engine:
        assert (await engine.stats("t"))["ledgers"] == ledgers + 1
        after = await engine.send("t", "d")
        assert after.ledger_id > before[-1].ledger_id
        stats = await engine.stats("t")
        assert stats["stable_position"] == stats["last_confirmed"] == str(after)
        sub = await engine.subscribe("t", "s")
        got = await drain(sub)
        assert positions(got) == [before[2], after]
        await sub.ack(after, cumulative=True)
        assert _sub(await engine.stats("t"))["backlog"] == 0


async def test_backlog_matches_what_is_delivered_after_seek_beyond_the_end(
    small: Engine,
) -> None:
    sent = await small.send_many("t", list(range(5)))
    sub = await small.subscribe("t", "s")
    await sub.seek(Position(sent[-1].ledger_id + 5, 0))  # past everything
    await small.send("t", "new")

    backlog = _sub(await small.stats("t"))["backlog"]
    delivered = await drain(sub)
    assert backlog == len(delivered), (
        f"backlog says {backlog} but {len(delivered)} message(s) can be delivered"
    )
