"""Batched delivery: what an ordered subscription hands out in one pass, and what it costs.

A read_committed drain of transactions (some aborted) delivers exactly the committed
messages, in order, with every field right; its range reads stay close to the topic's
size (markers and aborted data are read once, the read-ahead past a full batch is not
re-read much); and the cursor after a cumulative ack covers the markers too.
"""

from __future__ import annotations

from datetime import UTC, datetime

from txnstream.api import Engine, Position


async def _fill(engine: Engine, txns: int) -> list[int]:
    """``txns`` transactions of 10 (every 4th aborted); the committed values, in order."""
    await engine.create_topic("t")
    committed = []
    for n in range(txns):
        txn = await engine.begin()
        await txn.send_many("t", list(range(n * 10, n * 10 + 10)))
        if n % 4 == 3:
            await txn.abort()
        else:
            await txn.commit()
            committed += range(n * 10, n * 10 + 10)
    await engine.send("t", "tail", key="k", properties={"p": "v"})
    return committed


async def test_a_drain_delivers_committed_messages_once_with_few_extra_rows(
    engine: Engine,
) -> None:
    expected = [*await _fill(engine, 120), "tail"]
    ledger = engine._rt.topics["t"].ledger
    read = 0
    original = ledger.read_rows

    async def counting(start: Position, end: Position, limit: int):  # type: ignore[no-untyped-def]
        nonlocal read
        rows = await original(start, end, limit)
        read += len(rows or ())
        return rows

    ledger.read_rows = counting  # type: ignore[method-assign]
    sub = await engine.subscribe("t", "s")
    got = []
    while True:
        messages = await sub.receive(max=100, timeout=0.5)
        if not messages:
            break
        got += messages
        await sub.ack(messages[-1].position, cumulative=True)
    assert [m.value for m in got] == expected
    assert [m.position for m in got] == sorted(m.position for m in got)
    total_rows = 120 * 11 + 1
    assert read <= total_rows * 1.5  # a read-ahead that feeds itself would read far more
    last = got[-1]
    assert (last.key, last.properties, last.txn, last.redelivery_count) == (
        "k",
        {"p": "v"},
        None,
        0,
    )
    assert isinstance(last.publish_time, datetime)
    assert last.publish_time.tzinfo is UTC
    assert got[0].txn is not None
    assert got[0].txn.startswith("txn-")
    stats = await engine.stats("t")
    assert stats["subscriptions"]["s"]["backlog"] == 0
