"""The embedded quickstart, as a user runs it: send, transactions, visibility."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from support import drain, make_topics, positions, txn_state, values

from txnstream.api import Engine, EngineError, Position


async def test_send_and_send_many_return_durable_positions_in_order(engine: Engine) -> None:
    await make_topics(engine, "orders")
    assert await engine.create_topic("orders") is False  # idempotent

    first = await engine.send("orders", {"id": 1}, key="k1", properties={"src": "web"})
    batch = await engine.send_many("orders", [{"id": 10}, {"id": 11}])

    assert isinstance(first, Position)
    assert len(batch) == 2
    assert first < batch[0] < batch[1]
    assert batch[1] == Position(batch[0].ledger_id, batch[0].entry_id + 1)  # one batch
    assert Position.parse(str(first)) == first
    assert len({first, *batch}) == 3  # hashable, distinct

    stats = await engine.stats("orders")
    assert stats["last_confirmed"] == str(batch[1])
    assert stats["stable_position"] == str(batch[1])
    assert stats["entries"] == 3

    sub = await engine.subscribe("orders", "billing")
    # A send is durable and deliverable when it returns: no waiting needed.
    got = await sub.receive(max=100, timeout=0)
    assert positions(got) == [first, *batch]
    assert values(got) == [{"id": 1}, {"id": 10}, {"id": 11}]
    head = got[0]
    assert head.key == "k1"
    assert head.properties == {"src": "web"}
    assert head.txn is None
    assert head.redelivery_count == 0
    assert isinstance(head.publish_time, datetime)
    assert abs(datetime.now(UTC) - head.publish_time) < timedelta(minutes=5)
    assert got[1].key is None
    assert got[1].properties == {}


async def test_bytes_stay_bytes_and_str_stays_str(engine: Engine) -> None:
    await make_topics(engine, "raw")
    sent = [b"\x00\x01binary", "text", {"s": "x"}, ["1", 1], None, "", bytearray(b"ba")]
    for value in sent:
        await engine.send("raw", value)
    async with engine.transaction() as txn:
        await txn.send("raw", b"in-txn bytes")
        await txn.send_many("raw", ["in-txn str", b"in-txn raw"])

    got = values(await drain(await engine.subscribe("raw", "s")))

    expected = [*sent[:-1], b"ba", b"in-txn bytes", "in-txn str", b"in-txn raw"]
    assert got == expected
    for value, want in zip(got, expected, strict=True):
        assert type(value) is type(want)
    assert type(got[2]["s"]) is str
    assert [type(v) for v in got[3]] == [str, int]


async def test_transaction_context_manager_commits_on_normal_exit(engine: Engine) -> None:
    await make_topics(engine, "orders", "audit")
    orders = await engine.subscribe("orders", "billing")
    audit = await engine.subscribe("audit", "reader")

    async with engine.transaction(timeout=30.0) as txn:
        in_orders = await txn.send("orders", {"id": 2})
        await txn.send("audit", b"raw bytes")
        await txn.send_many("audit", [b"a", b"b"])
        # Nothing is visible while the transaction is open.
        assert await orders.receive(timeout=0.05) == []
        assert await audit.receive(timeout=0.05) == []

    assert await txn_state(engine, txn.id) == "committed"
    # Visible on every topic as soon as the commit (the `async with` exit) returned.
    got_orders = await orders.receive(max=10, timeout=0)
    got_audit = await audit.receive(max=10, timeout=0)
    assert positions(got_orders) == [in_orders]
    assert values(got_orders) == [{"id": 2}]
    assert values(got_audit) == [b"raw bytes", b"a", b"b"]
    assert {m.txn for m in got_orders + got_audit} == {txn.id}


class Boom(Exception):
    pass


async def test_transaction_context_manager_aborts_on_exception(engine: Engine) -> None:
    await make_topics(engine, "orders", "audit")
    orders = await engine.subscribe("orders", "billing")

    began: list[str] = []

    async def failing_work() -> None:
        async with engine.transaction() as txn:
            began.append(txn.id)
            await txn.send("orders", {"id": 1})
            await txn.send("audit", "never")
            raise Boom

    with pytest.raises(Boom):
        await failing_work()

    assert await txn_state(engine, began[0]) == "aborted"
    assert await orders.receive(timeout=0.1) == []
    for topic in ("orders", "audit"):
        stats = await engine.stats(topic)
        assert stats["open_txns"] == 0
        assert stats["aborted_txns"] == 1
        assert stats["stable_position"] == stats["last_confirmed"]
    assert (await engine.stats("orders"))["subscriptions"]["billing"]["backlog"] == 0
    after = await engine.send("orders", {"id": 2})
    assert positions(await orders.receive(timeout=1.0)) == [after]


async def test_multi_topic_transaction_is_atomic(engine: Engine) -> None:
    await make_topics(engine, "orders", "audit")
    orders = await engine.subscribe("orders", "billing")
    audit = await engine.subscribe("audit", "reader")
    base = await engine.send("orders", "before")
    assert values(await orders.receive(timeout=0)) == ["before"]

    txn = await engine.begin(timeout=30.0)
    sent = await asyncio.gather(
        txn.send("orders", "o1"), txn.send("audit", "a1"), txn.send("orders", "o2")
    )
    # Neither topic shows anything of it before the commit ...
    assert await orders.receive(timeout=0.1) == []
    assert await audit.receive(timeout=0.1) == []
    assert (await engine.stats("orders"))["stable_position"] == str(base)
    assert (await engine.stats("audit"))["stable_position"] is None

    await txn.commit()

    # ... and both show all of it right after the commit returns.
    got_orders = await orders.receive(max=10, timeout=0)
    got_audit = await audit.receive(max=10, timeout=0)
    assert values(got_orders) == ["o1", "o2"]
    assert positions(got_orders) == [sent[0], sent[2]]
    assert values(got_audit) == ["a1"]
    assert positions(got_audit) == [sent[1]]


async def test_abort_hides_everything_on_every_topic(engine: Engine) -> None:
    await make_topics(engine, "orders", "audit")
    orders = await engine.subscribe("orders", "billing")
    audit = await engine.subscribe("audit", "reader")

    txn = await engine.begin()
    await txn.send_many("orders", ["x1", "x2"])
    await txn.send("audit", "x3")
    await txn.abort()
    assert await txn_state(engine, txn.id) == "aborted"

    later = await engine.send("orders", "plain")
    got = await drain(orders)
    assert positions(got) == [later]
    assert await drain(audit) == []
    stats = await engine.stats("orders")
    assert stats["subscriptions"]["billing"]["backlog"] == 1  # only the plain message
    assert stats["entries"] == 4  # 2 data, 1 abort marker, 1 plain
    await orders.ack(later)
    assert (await engine.stats("orders"))["subscriptions"]["billing"]["backlog"] == 0


async def test_read_uncommitted_sees_open_and_aborted_data_but_never_markers(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    dirty = await engine.subscribe("t", "dirty", isolation="read_uncommitted")
    clean = await engine.subscribe("t", "clean")

    await engine.send("t", "plain")
    still_open = await engine.begin()
    await still_open.send("t", "open")
    aborted = await engine.begin()
    await aborted.send("t", "aborted")
    await aborted.abort()
    committed = await engine.begin()
    await committed.send("t", "committed")
    await committed.commit()
    stats = await engine.stats("t")
    assert stats["entries"] == 6  # 4 data + ABORT + COMMIT markers

    seen = await drain(dirty)
    assert values(seen) == ["plain", "open", "aborted", "committed"]
    assert [m.txn for m in seen] == [None, still_open.id, aborted.id, committed.id]
    assert positions(seen) == sorted(positions(seen))

    # read_committed stops before the open transaction's first entry.
    assert values(await drain(clean)) == ["plain"]
    await still_open.commit()
    assert values(await drain(clean)) == ["open", "committed"]
    assert await drain(dirty) == []  # markers are never delivered


async def test_engine_errors_share_one_root(engine: Engine) -> None:
    with pytest.raises(EngineError):
        await engine.send("missing", 1)
