"""Invariant 7: memory is O(open transactions + in-flight batches), never O(messages in a txn)."""

from __future__ import annotations

from pathlib import Path

from txnstream.api import Engine, EngineConfig


async def test_a_large_open_transaction_is_neither_buffered_nor_queued(data_dir: Path) -> None:
    config = EngineConfig(max_pending_entries=500)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        sub = await engine.subscribe("t", "s")
        txn = await engine.begin()
        largest_queue = 0
        for _ in range(40):
            await txn.send_many("t", [b"x" * 100] * 250)
            largest_queue = max(largest_queue, engine._rt.store._queued_entries)
        # backpressure bounds what waits for a group commit...
        assert largest_queue <= config.max_pending_entries + 250
        await engine._rt.store.flush()
        buffer = engine._rt.topics["t"].buffer
        # ...and the transaction buffer holds one first position, not 10,000 messages
        assert len(buffer.ongoing_txns) == 1
        assert await sub.receive(max=10, timeout=0) == []
        await txn.commit()
        subscription = engine._rt.subscriptions.get("t", "s")
        received = 0
        while batch := await sub.receive(max=1000, timeout=0):
            received += len(batch)
            # the dispatcher tracks only what it delivered and is unacknowledged
            assert len(subscription._pending) <= 1000
            await sub.ack(batch[-1].position, cumulative=True)
        assert received == 10_000
        assert len(buffer.ongoing_txns) == 0


async def test_single_sends_wait_for_backpressure_and_keep_their_order(data_dir: Path) -> None:
    config = EngineConfig(max_pending_entries=50)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        sub = await engine.subscribe("t", "s")
        txn = await engine.begin()
        positions = []
        largest_queue = 0
        for i in range(400):
            positions.append(await txn.send("t", i))
            largest_queue = max(largest_queue, engine._rt.store._queued_entries)
        # a send held back waits for a flush instead of queueing without bound
        assert largest_queue <= config.max_pending_entries + 1
        assert positions == sorted(positions)
        assert len(set(positions)) == 400
        await txn.commit()
        received = []
        while batch := await sub.receive(max=1000, timeout=0):
            received += batch
            await sub.ack(batch[-1].position, cumulative=True)
        assert [m.value for m in received] == list(range(400))
        assert [m.position for m in received] == positions
