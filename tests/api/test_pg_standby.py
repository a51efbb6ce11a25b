"""Standby mode on a PostgreSQL store (issue 28, "several servers, one active"): an engine
opened with ``standby=True`` while another holds the store's lease waits as a standby,
takes over when the lease is released or expires (loading the state the active left,
open transactions with their deadlines included), and an active whose lease was taken
over steps down to a standby instead of failing."""

from __future__ import annotations

import psycopg
import pytest
from support import wait_until

from txnstream.api import Engine, EngineError, EngineState

pytestmark = pytest.mark.timeout(60)

LEASE = 1.0


def _config():  # type: ignore[no-untyped-def]
    from txnstream.api import EngineConfig

    return EngineConfig(lease_timeout=LEASE, advertise_url="http://active.example:1")


async def test_a_second_engine_waits_as_a_standby_and_takes_over_on_release(pg_url: str) -> None:
    a = await Engine.open(pg_url, _config())
    b = await Engine.open(pg_url, _config(), standby=True)
    try:
        await a.create_topic("t")
        txn = await a.begin(timeout=30)
        await txn.send("t", "in-flight")
        await a.send("t", "a1")
        assert b.state is EngineState.STANDBY
        assert b.health().status == "standby"
        await wait_until(lambda: _active(b, "http://active.example:1"), 10, "b to see a")
        with pytest.raises(EngineError, match="standby"):
            await b.send("t", "refused")
        deadline = (await txn.info()).deadline
        await a.close()  # releases the lease: b takes over without waiting for the expiry
        await wait_until(lambda: _state(b, EngineState.OPEN), 10, "b to take over")
        assert b.metrics.failovers._value.get() == 1
        info = await b.get_transaction(txn.txn_id)  # the open transaction survived, same deadline
        assert (info.state, info.deadline) == ("open", deadline)
        await b.commit(txn.txn_id)
        sub = await b.subscribe("t", "s")
        assert [m.value for m in await sub.receive(max=10, timeout=1)] == ["in-flight", "a1"]
    finally:
        await a.close()
        await b.close()


async def test_an_active_whose_lease_was_taken_steps_down_to_standby(pg_url: str) -> None:
    a = await Engine.open(pg_url, _config(), standby=True)
    try:
        await a.create_topic("t")
        await a.send("t", "a1")
        async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
            # another server took the store over (a newer epoch) while a was not looking
            await conn.execute(
                "UPDATE leases SET epoch = epoch + 1, holder = 'other', url = 'http://b:2',"
                " expires_at = clock_timestamp() + interval '2 seconds'"
            )
        with pytest.raises(EngineError):
            await a.send("t", "a2")  # fenced: nothing of it becomes visible
        await wait_until(lambda: _state(a, EngineState.STANDBY), 10, "a to step down")
        await wait_until(lambda: _active(a, "http://b:2"), 10, "a to see the new active")
        with pytest.raises(EngineError, match="standby"):
            await a.send("t", "a3")
        # 'other' never renews: its lease expires and a takes the store back
        await wait_until(lambda: _state(a, EngineState.OPEN), 15, "a to take over again")
        sub = await a.subscribe("t", "s")
        assert [m.value for m in await sub.receive(max=10, timeout=0.5)] == ["a1"]
    finally:
        await a.close()


async def _state(engine: Engine, state: EngineState) -> bool:
    return engine.state is state


async def _active(engine: Engine, url: str) -> bool:
    return engine.active_url == url
