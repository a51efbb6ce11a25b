"""Each ``_check()`` the model tests call after every step can fail: a deliberately
corrupted state of the store, the coordinator and a subscription trips it."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import check_engine

from txnstream.api import Engine, OutgoingMessage, Position
from txnstream.ledger import WriteBatch

pytestmark = pytest.mark.timeout(60)


async def _engine(data_dir: Path) -> Engine:
    engine = await Engine.open(data_dir)
    await engine.create_topic("t")
    await engine.produce("t", [OutgoingMessage(value=i) for i in range(3)])
    handle = await engine.subscribe("t", "s", initial_position="earliest")
    assert len(await handle.receive(max=2, timeout=1)) == 2
    return engine


async def test_a_consistent_engine_passes_every_check(data_dir: Path) -> None:
    engine = await _engine(data_dir)
    try:
        txn = await engine.begin()
        await txn.send("t", 9)
        check_engine(engine)
        await txn.commit()
        check_engine(engine)
    finally:
        await engine.close()


async def test_a_corrupted_store_fails_its_check(data_dir: Path) -> None:
    engine = await _engine(data_dir)
    try:
        store = engine._rt.store
        store._check()
        store._idle.clear()  # "a flush in flight" with none in flight
        with pytest.raises(AssertionError, match="idle"):
            store._check()
        store._idle.set()
        batch = WriteBatch()
        batch.on_durable(lambda: None)
        store._open.extend(batch)  # queued work with no flush coming: a lost wake-up
        with pytest.raises(AssertionError, match="no flush due"):
            store._check()
        store._open.clear()
        store._check()
    finally:
        await engine.close()


async def test_a_corrupted_coordinator_fails_its_check(data_dir: Path) -> None:
    engine = await _engine(data_dir)
    try:
        coordinator = engine._rt.coordinator
        txn = await engine.begin()
        coordinator._check()
        saved = list(coordinator._deadlines)
        coordinator._deadlines.clear()  # an open transaction that would never time out
        with pytest.raises(AssertionError, match="no deadline"):
            coordinator._check()
        coordinator._deadlines[:] = saved
        coordinator._check()
        await txn.abort()
    finally:
        await engine.close()


async def test_a_corrupted_subscription_fails_its_check(data_dir: Path) -> None:
    engine = await _engine(data_dir)
    try:
        subscription = engine._rt.subscriptions.get("t", "s")
        subscription._check()
        delivered = next(iter(subscription._pending))
        subscription._replay.add(Position(delivered >> 64, delivered & ((1 << 64) - 1)))
        with pytest.raises(AssertionError, match="pending and in replay"):
            subscription._check()  # would be delivered twice
        subscription._replay.clear()
        subscription._pending[delivered] = "nobody"
        with pytest.raises(AssertionError, match="detached consumer"):
            subscription._check()  # would never be redelivered
    finally:
        await engine.close()
