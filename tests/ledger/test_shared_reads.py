"""Subscriptions reading the same range at the same moment share one query (like the
cursors of a Pulsar managed ledger sharing its entry cache), each still gets every row
of its own, and a cancelled reader does not take the others' rows with it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support import drain, values

from txnstream.api import Engine, EngineConfig
from txnstream.ledger import Position

pytestmark = pytest.mark.timeout(60)


def _count_reads(engine: Engine) -> list[str]:
    """Record every query the engine's store runs on its read connections."""
    store = engine._rt.store
    queries: list[str] = []
    read = store.read

    async def counted(sql: str, params: Any = ()) -> list[Any]:
        queries.append(sql)
        return await read(sql, params)

    store.read = counted  # type: ignore[method-assign]
    return queries


async def test_subscriptions_keeping_pace_share_their_reads(tmp_path: Path) -> None:
    async with Engine.open(tmp_path / "data", EngineConfig()) as engine:
        await engine.create_topic("t")
        subs = [
            await engine.subscribe("t", f"s{i}", initial_position="earliest") for i in range(20)
        ]
        sent = [f"m{i}".encode() for i in range(3_000)]
        for start in range(0, len(sent), 500):
            async with engine.transaction() as txn:
                await txn.send_many("t", sent[start : start + 500])
        queries = _count_reads(engine)
        got = await asyncio.gather(*(drain(sub) for sub in subs))
    assert all(values(messages) == sent for messages in got)
    ranges = [q for q in queries if "data FROM entries" in q]
    # 20 subscriptions x 3 or more range reads each when every one queried for itself
    assert 0 < len(ranges) < 20


async def test_a_cancelled_read_leaves_the_others_their_rows(tmp_path: Path) -> None:
    async with Engine.open(tmp_path / "data", EngineConfig()) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", [b"a", b"b", b"c"])
        ledger = engine._core.topic("t").ledger
        start, end = Position(0, 0), Position(0, 2)
        first = asyncio.create_task(ledger.read_rows(start, end, 10))
        await asyncio.sleep(0)  # (the first read is in flight, registered for sharing)
        others = [asyncio.create_task(ledger.read_rows(start, end, 10)) for _ in range(3)]
        await asyncio.sleep(0)  # (they wait for it)
        first.cancel()
        rows = await asyncio.gather(*others)
        with pytest.raises(asyncio.CancelledError):
            await first
    assert [[row[:2] for row in got] for got in rows] == [[(0, 0), (0, 1), (0, 2)]] * 3
    assert len({id(got) for got in rows}) == 3  # a list each
