"""Read ahead during an ack: an ordered consumer that acknowledges and waits for the ack
to be durable has its next range read meanwhile (on PostgreSQL as soon as a delivery
has its rows, before it hands them over).

The next receive then makes no read of its own; whatever happens between the ack and
that receive (new data above the old read limit, a seek, an abort, a rollover, a
restart, the subscription's deletion) delivers exactly what it would have without the
read ahead, and nothing is left running once the engine is closed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from txnstream.api import Engine, EngineConfig, Position

TOPIC = "t"


async def _fill(engine: Engine, count: int, *, start: int = 0) -> list[int]:
    """``count`` transactions of 5 values from ``start`` (every third aborted); the
    committed values in order."""
    committed: list[int] = []
    for n in range(count):
        values = list(range(start + n * 5, start + n * 5 + 5))
        txn = await engine.begin()
        await txn.send_many(TOPIC, values)
        if n % 3 == 2:
            await txn.abort()
        else:
            await txn.commit()
            committed += values
    return committed


def _count_reads(engine: Engine) -> list[int]:
    """A one-item list counting the topic's range reads made by the calling task itself
    from now on (not those read ahead, in tasks of their own)."""
    ledger = engine._rt.topics[TOPIC].ledger
    original = ledger.read_rows
    counts = [0]
    me = asyncio.current_task()

    async def counting(start: Position, end: Position, limit: int):  # type: ignore[no-untyped-def]
        counts[0] += asyncio.current_task() is me
        return await original(start, end, limit)

    ledger.read_rows = counting  # type: ignore[method-assign]
    return counts


async def test_after_an_ack_the_next_receive_reads_nothing_itself(engine: Engine) -> None:
    await engine.create_topic(TOPIC)
    expected = await _fill(engine, 60)
    counts = _count_reads(engine)
    sub = await engine.subscribe(TOPIC, "s")
    got: list[int] = []
    receive_reads = []
    while True:
        before = counts[0]
        messages = await sub.receive(max=20, timeout=0.2)
        receive_reads.append(counts[0] - before)
        if not messages:
            break
        got += [m.value for m in messages]
        await sub.ack(messages[-1].position, cumulative=True)
    assert got == expected
    # the first receive reads; after that each one's range was read during the ack
    # before it (the empty receive at the end finds the subscription caught up)
    assert receive_reads[0] == 1
    assert receive_reads[1:] == [0] * (len(receive_reads) - 1)


async def test_on_postgresql_the_next_range_is_read_as_soon_as_a_delivery_ends(
    engine: Engine, store_kind: str
) -> None:
    # Its reads run beside the event loop: the next range is read while the consumer
    # works on the messages it has, before any ack. On SQLite only an ack reads ahead (a
    # reader thread would contend for the GIL with the consumer).
    await engine.create_topic(TOPIC)
    expected = await _fill(engine, 30)
    ledger = engine._rt.topics[TOPIC].ledger
    original = ledger.read_rows
    me = asyncio.current_task()
    inline: list[bool] = []  # per read: made by a receive itself (else read ahead)

    async def recording(start: Position, end: Position, limit: int):  # type: ignore[no-untyped-def]
        inline.append(asyncio.current_task() is me)
        return await original(start, end, limit)

    ledger.read_rows = recording  # type: ignore[method-assign]
    sub = await engine.subscribe(TOPIC, "s")
    got = [m.value for m in await sub.receive(max=7, timeout=1.0)]
    # on PostgreSQL the next range's read went out before this batch was handed over
    assert len(inline) == (2 if store_kind == "postgresql" else 1)
    while len(got) < len(expected):  # no acks
        messages = await sub.receive(max=7, timeout=1.0)
        assert messages, f"stopped after {len(got)} of {len(expected)}"
        got += [m.value for m in messages]
    assert got == expected
    if store_kind == "postgresql":
        assert len(inline) > 2
        assert inline[0]  # the first receive's read, then each read a read ahead
        assert not any(inline[1:])
    else:
        assert inline == [True] * len(inline)


async def test_data_written_after_the_ack_follows_the_range_read_ahead(
    engine: Engine,
) -> None:
    await engine.create_topic(TOPIC)
    expected = await _fill(engine, 9)
    sub = await engine.subscribe(TOPIC, "s")
    first = await sub.receive(max=4, timeout=1.0)
    await sub.ack(first[-1].position, cumulative=True)  # reads ahead up to today's limit
    expected += await _fill(engine, 9, start=1000)  # above that limit
    got = [m.value for m in first]
    while len(got) < len(expected):
        messages = await sub.receive(max=100, timeout=1.0)
        assert messages, f"stopped after {len(got)} of {len(expected)}"
        got += [m.value for m in messages]
    assert got == expected


async def test_a_seek_after_the_ack_delivers_from_the_seek(engine: Engine) -> None:
    await engine.create_topic(TOPIC)
    expected = await _fill(engine, 12)
    sub = await engine.subscribe(TOPIC, "s")
    first = await sub.receive(max=6, timeout=1.0)
    await sub.ack(first[-1].position, cumulative=True)
    await sub.seek("earliest")
    again = await sub.receive(max=100, timeout=1.0)
    assert [m.value for m in again] == expected
    await sub.ack(again[-1].position, cumulative=True)
    await sub.seek(first[2].position)
    tail = await sub.receive(max=100, timeout=1.0)
    assert [m.value for m in tail] == expected[2:]


async def test_a_read_ahead_across_ledger_rollovers_delivers_in_order(data_dir: Path) -> None:
    config = EngineConfig(ledger_max_entries=7)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic(TOPIC)
        expected = await _fill(engine, 30)
        sub = await engine.subscribe(TOPIC, "s")
        got: list[int] = []
        while len(got) < len(expected):
            messages = await sub.receive(max=9, timeout=1.0)
            assert messages
            got += [m.value for m in messages]
            await sub.ack(messages[-1].position, cumulative=True)
        assert got == expected
        assert messages[-1].position.ledger_id >= 10  # read ahead across many ledgers


async def _stalled_read_ahead(engine: Engine, name: str) -> set[asyncio.Task[object]]:
    """Receive on a new subscription ``name``, then ack, every range read after the
    receive's own hanging (as on a stalled disk); the tasks still running after the ack
    (the read ahead: the ack's, or on PostgreSQL the one the delivery started)."""
    sub = await engine.subscribe(TOPIC, name, initial_position="earliest")
    ledger = engine._rt.topics[TOPIC].ledger
    original = ledger.read_rows
    gate = asyncio.Event()  # never set
    reads = [0]

    async def stalled(start: Position, end: Position, limit: int):  # type: ignore[no-untyped-def]
        reads[0] += 1
        if reads[0] > 1:
            await gate.wait()
        return await original(start, end, limit)

    ledger.read_rows = stalled  # type: ignore[method-assign]
    before = asyncio.all_tasks()
    messages = await sub.receive(max=5, timeout=1.0)
    await sub.ack(messages[-1].position, cumulative=True)
    started = asyncio.all_tasks() - before
    ledger.read_rows = original  # type: ignore[method-assign]
    return started


async def test_a_delete_or_close_cancels_a_read_ahead_still_running(data_dir: Path) -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: errors.append(context))
    try:
        async with Engine.open(data_dir, EngineConfig()) as engine:
            await engine.create_topic(TOPIC)
            expected = await _fill(engine, 30)
            deleted = await _stalled_read_ahead(engine, "gone")
            assert deleted, "the ack started no read ahead"
            await engine.delete_subscription(TOPIC, "gone")
            await asyncio.wait(deleted, timeout=5.0)
            assert all(task.cancelled() for task in deleted)
            closed = await _stalled_read_ahead(engine, "kept")
            assert closed
        await asyncio.wait(closed, timeout=5.0)
        assert all(task.cancelled() for task in closed)
        async with Engine.open(data_dir, EngineConfig()) as engine:
            sub = await engine.subscribe(TOPIC, "kept")
            rest = await sub.receive(max=1000, timeout=1.0)
            assert [m.value for m in rest] == expected[5:]  # the ack held; nothing lost
        assert errors == []
    finally:
        loop.set_exception_handler(None)


async def test_a_read_ahead_that_failed_is_read_again(engine: Engine) -> None:
    await engine.create_topic(TOPIC)
    expected = await _fill(engine, 12)
    sub = await engine.subscribe(TOPIC, "s")
    ledger = engine._rt.topics[TOPIC].ledger
    original = ledger.read_rows
    failures = []

    async def failing_once(start: Position, end: Position, limit: int):  # type: ignore[no-untyped-def]
        if failures:
            return await original(start, end, limit)
        failures.append(start)
        raise OSError("an I/O error, this once")

    async def first_read(start: Position, end: Position, limit: int):  # type: ignore[no-untyped-def]
        ledger.read_rows = failing_once  # type: ignore[method-assign]
        return await original(start, end, limit)

    ledger.read_rows = first_read  # type: ignore[method-assign]
    first = await sub.receive(max=4, timeout=1.0)
    await sub.ack(first[-1].position, cumulative=True)  # the read ahead fails
    rest = await sub.receive(max=100, timeout=1.0)
    assert failures  # the read ahead did fail
    assert [m.value for m in first + rest] == expected
