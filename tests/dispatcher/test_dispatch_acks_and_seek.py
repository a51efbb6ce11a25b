"""Acknowledgements, negative acknowledgements, seek, and cursor durability."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support import drain, make_topics, positions, values

from txnstream.api import Engine, Position


async def _setup(engine: Engine, count: int = 5) -> list[Position]:
    await make_topics(engine, "t")
    return await engine.send_many("t", [f"m{i}" for i in range(count)])


def _sub_stats(stats: dict[str, object]) -> dict[str, object]:
    subs = stats["subscriptions"]
    assert isinstance(subs, dict)
    result = subs["s"]
    assert isinstance(result, dict)
    return result


async def test_individual_acks_advance_mark_delete_over_closed_gaps(engine: Engine) -> None:
    sent = await _setup(engine)
    sub = await engine.subscribe("t", "s", type="shared")
    assert positions(await sub.receive(max=10, timeout=0)) == sent

    assert await sub.ack([sent[1], sent[3]]) == 2
    stats = _sub_stats(await engine.stats("t"))
    assert stats["mark_delete"] is None  # sent[0] is still unacknowledged
    assert stats["backlog"] == 3

    await sub.ack(sent[0])
    stats = _sub_stats(await engine.stats("t"))
    assert stats["mark_delete"] == str(sent[1])
    assert stats["backlog"] == 2

    await sub.ack(sent[2])
    assert _sub_stats(await engine.stats("t"))["mark_delete"] == str(sent[3])
    await sub.ack(sent[4])
    stats = _sub_stats(await engine.stats("t"))
    assert stats["mark_delete"] == str(sent[4])
    assert stats["backlog"] == 0


async def test_cumulative_ack_acknowledges_everything_at_or_below(engine: Engine) -> None:
    sent = await _setup(engine)
    sub = await engine.subscribe("t", "s")
    got = await sub.receive(max=10, timeout=0)
    await sub.ack(got[2].position, cumulative=True)
    stats = _sub_stats(await engine.stats("t"))
    assert stats["mark_delete"] == str(sent[2])
    assert stats["backlog"] == 2

    # A consumer that reconnects gets only what is above the cumulative ack.
    await sub.close()
    again = await drain(await engine.subscribe("t", "s"))
    assert positions(again) == sent[3:]


async def test_acked_messages_are_not_redelivered_after_consumer_change(engine: Engine) -> None:
    sent = await _setup(engine)
    sub = await engine.subscribe("t", "s")
    await sub.receive(max=10, timeout=0)
    await sub.ack([sent[0], sent[2], sent[4]])
    await sub.close()
    again = await drain(await engine.subscribe("t", "s"))
    assert positions(again) == [sent[1], sent[3]]
    assert [m.redelivery_count for m in again] == [1, 1]


async def test_nack_redelivers_with_incremented_redelivery_count(engine: Engine) -> None:
    sent = await _setup(engine, count=3)
    sub = await engine.subscribe("t", "s", type="shared")
    got = await sub.receive(max=10, timeout=0)
    assert [m.redelivery_count for m in got] == [0, 0, 0]

    await sub.nack([sent[1]])
    (again,) = await sub.receive(max=10, timeout=1.0)
    assert again.position == sent[1]
    assert again.value == "m1"
    assert again.redelivery_count == 1

    await sub.nack(again.position)
    (third,) = await sub.receive(max=10, timeout=1.0)
    assert third.redelivery_count == 2

    await sub.ack(sent)
    assert await sub.receive(timeout=0.05) == []
    assert _sub_stats(await engine.stats("t"))["backlog"] == 0


async def test_nack_wakes_a_waiting_consumer(engine: Engine) -> None:
    sent = await _setup(engine, count=1)
    sub = await engine.subscribe("t", "s")
    await sub.receive(timeout=0)
    await sub.nack(sent)
    (again,) = await sub.receive(timeout=2.0)
    assert again.position == sent[0]


async def test_nacked_message_comes_before_newer_ones_on_exclusive(engine: Engine) -> None:
    sent = await _setup(engine, count=2)
    sub = await engine.subscribe("t", "s")
    first = await sub.receive(max=1, timeout=0)
    assert positions(first) == sent[:1]
    await sub.nack(sent[0])
    got = await drain(sub)
    assert positions(got) == sent
    assert [m.redelivery_count for m in got] == [1, 0]


async def test_seek_earliest_redelivers_everything(engine: Engine) -> None:
    sent = await _setup(engine)
    sub = await engine.subscribe("t", "s")
    await sub.ack(positions(await drain(sub))[-1], cumulative=True)
    assert _sub_stats(await engine.stats("t"))["backlog"] == 0

    await sub.seek("earliest")

    stats = _sub_stats(await engine.stats("t"))
    assert stats["mark_delete"] is None
    assert stats["backlog"] == 5
    assert positions(await drain(sub)) == sent


async def test_seek_latest_skips_everything_present(engine: Engine) -> None:
    await _setup(engine)
    sub = await engine.subscribe("t", "s")
    await sub.seek("latest")
    assert _sub_stats(await engine.stats("t"))["backlog"] == 0
    assert await sub.receive(timeout=0.05) == []
    new = await engine.send("t", "new")
    assert positions(await sub.receive(timeout=1.0)) == [new]


async def test_seek_to_a_position_acks_before_and_unacks_at_and_after(engine: Engine) -> None:
    sent = await _setup(engine)
    sub = await engine.subscribe("t", "s", type="shared")
    await sub.receive(max=10, timeout=0)
    await sub.ack([sent[3], sent[4]])  # acknowledged before the seek

    await sub.seek(sent[2])

    stats = _sub_stats(await engine.stats("t"))
    assert stats["mark_delete"] == str(sent[1])
    assert stats["backlog"] == 3
    got = await drain(sub)
    assert positions(got) == sent[2:]
    assert values(got) == ["m2", "m3", "m4"]


async def test_seek_accepts_position_text_and_moves_backwards(engine: Engine) -> None:
    sent = await _setup(engine)
    sub = await engine.subscribe("t", "s")
    await sub.ack(sent[4], cumulative=True)
    await sub.seek(str(sent[1]))
    assert positions(await drain(sub)) == sent[1:]


async def test_seek_position_skips_undeliverable_entries(engine: Engine) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    aborted = await txn.send("t", "aborted")
    await txn.abort()
    after = await engine.send("t", "after")
    sub = await engine.subscribe("t", "s")
    await sub.ack(after)
    await sub.seek(aborted)  # delivery restarts at the first deliverable entry from here
    assert positions(await drain(sub)) == [after]


async def test_initial_position_latest_skips_earlier_messages(engine: Engine) -> None:
    await _setup(engine)
    sub = await engine.subscribe("t", "s", initial_position="latest")
    assert _sub_stats(await engine.stats("t"))["backlog"] == 0
    assert await sub.receive(timeout=0.05) == []
    new = await engine.send_many("t", ["n1", "n2"])
    assert positions(await drain(sub)) == new
    # An existing subscription ignores initial_position when attaching again.
    await sub.close()
    again = await engine.subscribe("t", "s", initial_position="earliest")
    assert positions(await drain(again)) == new


async def test_cursor_survives_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        sent = await _setup(engine, count=6)
        sub = await engine.subscribe("t", "s", type="shared")
        await sub.receive(max=10, timeout=0)
        await sub.ack(sent[1], cumulative=True)
        await sub.ack([sent[3], sent[5]])
    async with Engine.open(data_dir) as engine:
        stats = _sub_stats(await engine.stats("t"))
        assert stats["mark_delete"] == str(sent[1])
        assert stats["backlog"] == 2
        assert stats["type"] == "shared"
        got = await drain(await engine.subscribe("t", "s", type="shared"))
        assert positions(got) == [sent[2], sent[4]]
        assert values(got) == ["m2", "m4"]


async def test_seek_survives_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        sent = await _setup(engine)
        sub = await engine.subscribe("t", "s")
        await sub.ack(sent[4], cumulative=True)
        await sub.seek(sent[3])
    async with Engine.open(data_dir) as engine:
        assert positions(await drain(await engine.subscribe("t", "s"))) == sent[3:]


async def test_ack_is_counted_per_position_named(engine: Engine) -> None:
    sent = await _setup(engine, count=3)
    sub = await engine.subscribe("t", "s")
    assert await sub.ack([]) == 0
    assert await sub.ack(sent) == 3
    assert await sub.ack(str(sent[0])) == 1  # re-acking is harmless
    assert _sub_stats(await engine.stats("t"))["mark_delete"] == str(sent[2])


async def test_a_seek_while_a_receive_reads_wins_over_that_read(engine: Engine) -> None:
    await _setup(engine)  # m0..m4
    sub = await engine.subscribe("t", "s")
    assert values(await sub.receive(max=5, timeout=1.0)) == [f"m{i}" for i in range(5)]
    await engine.send_many("t", [f"m{i}" for i in range(5, 25)])
    ledger = engine._rt.topics["t"].ledger
    original = ledger.read_rows
    entered, release = asyncio.Event(), asyncio.Event()

    async def stalled(start: Position, end: Position, limit: int):  # type: ignore[no-untyped-def]
        entered.set()
        await release.wait()  # a slow disk: the receive is in this read
        return await original(start, end, limit)

    ledger.read_rows = stalled  # type: ignore[method-assign]
    receiving = asyncio.create_task(sub.receive(max=100, timeout=5.0))
    await asyncio.wait_for(entered.wait(), timeout=5.0)
    await sub.seek("earliest")
    release.set()
    got = await asyncio.wait_for(receiving, timeout=5.0)
    # the read that was under way (from m5 on) gave way to the seek
    assert values(got) == [f"m{i}" for i in range(25)]


async def test_latest_while_a_transaction_is_open_delivers_it_once_committed(
    engine: Engine,
) -> None:
    """read_committed ``latest`` is the stable position (Kafka's last stable offset):
    a transaction open when the subscription is created or seeked is delivered once it
    commits; read_uncommitted ``latest`` is the end of the log."""
    await _setup(engine, 2)
    txn = await engine.begin()
    inside = await txn.send_many("t", ["t0", "t1"])
    plain = await engine.send("t", "plain")  # after the open transaction's first entry
    created = await engine.subscribe("t", "created", initial_position="latest")
    seeked = await engine.subscribe("t", "seeked")
    await seeked.seek("latest")
    dirty = await engine.subscribe(
        "t", "dirty", initial_position="latest", isolation="read_uncommitted"
    )
    assert await created.receive(timeout=0.05) == []
    await txn.commit()
    after = await engine.send("t", "after")
    expected = [*sorted([*inside, plain]), after]
    assert positions(await drain(created)) == expected
    assert positions(await drain(seeked)) == expected
    assert positions(await drain(dirty)) == [after]


async def test_a_seek_past_the_end_of_an_empty_topic_gets_the_next_message(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    await sub.seek(Position(999999999999999999, 0))
    assert await sub.receive(timeout=0.05) == []
    new = await engine.send("t", "first")
    assert positions(await sub.receive(timeout=2.0)) == [new]
    await sub.seek("999999999999999999:0")  # past the end of a topic that has entries
    newer = await engine.send("t", "second")
    assert positions(await sub.receive(timeout=2.0)) == [newer]
