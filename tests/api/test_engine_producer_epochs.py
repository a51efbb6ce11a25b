"""Producer epochs of transactional ids, on both stores: durable and monotonic across
reopens, a bump fences the id's transaction in the same write, the transaction a producer
is in is found again after a reopen, and idle ids expire (durably)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support import wait_until

from txnstream.api import (
    Engine,
    EngineConfig,
    EngineError,
    FencedError,
    InvalidArgumentError,
    Principal,
    TxnNotOpenError,
)

pytestmark = pytest.mark.timeout(60)


async def test_epochs_are_durable_and_only_go_up(data_dir: Path | str) -> None:
    async with Engine.open(data_dir) as engine:
        assert engine.producer_epoch("w") is None
        first = await engine.bump_producer_epoch("w")
        second = await engine.bump_producer_epoch("w")
        assert (first.epoch, second.epoch) == (0, 1)
        assert first.session != second.session
        assert engine.producer_epoch("w") is second
        jumped = await engine.bump_producer_epoch("other", at_least=41)
        assert jumped.epoch == 41
        # each principal has its own transactional ids
        billing = Principal("billing")
        assert engine.producer_epoch("w", principal=billing) is None
        assert (await engine.bump_producer_epoch("w", principal=billing)).epoch == 0
        with pytest.raises(InvalidArgumentError):
            await engine.bump_producer_epoch("")
        with pytest.raises(InvalidArgumentError):
            await engine.bump_producer_epoch("w", at_least=-1)
    async with Engine.open(data_dir) as engine:
        again = engine.producer_epoch("w")
        assert again is not None
        assert (again.epoch, again.session) == (1, second.session)
        assert again is not second  # a new load: a front door's cache beside it is stale
        assert (await engine.bump_producer_epoch("w")).epoch == 2
        assert (await engine.bump_producer_epoch("other")).epoch == 42
        assert engine.producer_epoch("w", principal=Principal("billing")).epoch == 0  # type: ignore[union-attr]


async def test_a_bump_fences_the_ids_open_transaction_durably(data_dir: Path | str) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        await engine.bump_producer_epoch("w")
        txn = await engine.begin(transactional_id="w")
        await txn.send("t", "zombie's")
        assert engine.producer_transaction("w") is not None
        await engine.bump_producer_epoch("w")
        assert engine.producer_transaction("w") is None  # the new epoch is in none yet
        info = await engine.get_transaction(txn.txn_id)
        assert (info.state, info.fenced, info.reason) == ("aborted", True, "fenced")
        with pytest.raises(FencedError):
            await txn.commit()
    async with Engine.open(data_dir) as engine:
        info = await engine.get_transaction(txn.txn_id)
        assert (info.state, info.fenced) == ("aborted", True)
        assert engine.producer_transaction("w") is None
        assert (await engine.stats("t"))["entries"] == 2  # its send and its ABORT marker


async def test_the_transaction_a_producer_is_in_is_found_after_a_reopen(
    data_dir: Path | str,
) -> None:
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        await engine.bump_producer_epoch("w")
        txn = await engine.begin(transactional_id="w", timeout=30)
        await txn.send("t", "kept")
        await engine.sync()  # what the Kafka listener awaits before it answers
    async with Engine.open(data_dir) as engine:
        resumed = engine.producer_transaction("w")
        assert resumed is not None
        assert resumed.txn_id == txn.txn_id
        await resumed.send("t", "more")
        await resumed.commit()
        assert engine.producer_transaction("w") is None  # its producer ended it
        sub = await engine.subscribe("t", "s")
        assert [m.value for m in await sub.receive(max=10, timeout=0)] == ["kept", "more"]


async def test_a_transaction_the_engine_ended_is_still_the_producers(
    data_dir: Path | str,
) -> None:
    """A timeout aborted it: its producer is still told so (its commit fails) until it
    ends it itself, across a reopen too."""
    async with Engine.open(data_dir) as engine:
        await engine.create_topic("t")
        await engine.bump_producer_epoch("w")
        txn = await engine.begin(transactional_id="w", timeout=0.2)
        await txn.send("t", "late")
        await engine.sync()

        async def timed_out() -> bool:
            return (await engine.get_transaction(txn.txn_id)).state == "aborted"

        await wait_until(timed_out, 30, "the timeout to abort it", interval=0.05)
    async with Engine.open(data_dir) as engine:
        held = engine.producer_transaction("w")
        assert held is not None
        with pytest.raises(TxnNotOpenError):
            await held.commit()
        await held.abort()  # (idempotent: it is aborted)


async def test_idle_ids_expire_durably_and_start_over(data_dir: Path | str) -> None:
    config = EngineConfig(default_txn_timeout=30)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        await engine.bump_producer_epoch("idle")
        await engine.bump_producer_epoch("idle")
        await engine.bump_producer_epoch("busy")
        busy = await engine.begin(transactional_id="busy")
        await busy.send("t", "open")
        await asyncio.sleep(0.05)
        assert await engine.expire_producer_epochs(0.01) == 1  # busy has an open transaction
        assert engine.producer_epoch("idle") is None
        assert engine.producer_epoch("busy") is not None
    async with Engine.open(data_dir, config) as engine:
        assert engine.producer_epoch("idle") is None  # forgotten in the store too
        assert (await engine.bump_producer_epoch("idle")).epoch == 0  # started over
        # beginning a transaction is a use: the id is not idle
        assert await engine.expire_producer_epochs(60) == 0


async def test_an_engine_that_lost_the_lease_cannot_bump(pg_url: str) -> None:
    """A bump is fenced like every write: an old active paused past its lease fails it,
    and the new active's epochs are unchanged by it."""
    import psycopg

    async with Engine.open(pg_url) as a:
        await a.bump_producer_epoch("w")
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            await conn.execute("UPDATE leases SET expires_at = clock_timestamp()")  # expired
        async with Engine.open(pg_url) as b:  # takes the store over
            with pytest.raises(EngineError):
                await a.bump_producer_epoch("w")
            assert b.producer_epoch("w").epoch == 0  # type: ignore[union-attr]
            assert (await b.bump_producer_epoch("w")).epoch == 1
