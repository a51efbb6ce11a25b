"""``Transaction.send``'s fast path (``FastTxnSend``): a handle's further value-only sends
to one topic skip the full path while nothing around them changed. Whatever interleaves
(other transactions, plain sends, keyed sends, refused values, ledger roll-overs, ends),
the log must be what the full path alone would have written, and a send the full path
refuses is refused."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support import NewStore, store_per_example

from txnstream.api import (
    Engine,
    EngineConfig,
    InvalidArgumentError,
    TooLargeError,
    TopicNotFoundError,
    Transaction,
    TxnNotOpenError,
)
from txnstream.ledger import WriteBatch

TOPICS = ("a", "b")
TXNS = 3
LIMIT = 64  # max_message_bytes: a value of 100 bytes is too large

_send = st.tuples(st.just("send"), st.integers(0, TXNS - 1), st.sampled_from(TOPICS), st.booleans())
_burst = st.tuples(  # several value-only sends of one transaction to one topic in a row
    st.just("burst"), st.integers(0, TXNS - 1), st.sampled_from(TOPICS), st.integers(2, 6)
)
_op = st.one_of(
    _send,
    _send,
    _burst,
    _burst,
    st.tuples(st.just("plain"), st.sampled_from(TOPICS)),
    st.tuples(st.just("roll"), st.sampled_from(TOPICS), st.booleans()),
    st.tuples(st.sampled_from(["big", "bad"]), st.integers(0, TXNS - 1), st.sampled_from(TOPICS)),
    st.tuples(st.just("end"), st.integers(0, TXNS - 1), st.booleans()),
)

Log = dict[str, list[tuple[str, int | None, int | None]]]


async def _run(
    new_store: NewStore, program: list[tuple[object, ...]], ends: list[bool]
) -> tuple[Log, Log]:
    """Run ``program`` in one coroutine; return (the stored logs, the model's)."""
    config = EngineConfig(ledger_max_entries=5, max_message_bytes=LIMIT)
    model: Log = {t: [] for t in TOPICS}
    with new_store() as tmp:
        async with Engine.open(tmp, config) as engine:
            for topic in TOPICS:
                await engine.create_topic(topic)
            txns = [await engine.begin(timeout=600) for _ in range(TXNS)]
            seqs = [t.txn_id.seq for t in txns]
            state = ["open"] * TXNS
            touched: list[list[str]] = [[] for _ in range(TXNS)]

            async def end(i: int, commit: bool) -> None:
                await (txns[i].commit() if commit else txns[i].abort())
                state[i] = "commit" if commit else "abort"
                for topic in touched[i]:
                    model[topic].append((state[i], seqs[i], None))

            ops: list[tuple[object, ...]] = []
            for op in program:  # a burst is that many sends
                count = int(str(op[3])) if op[0] == "burst" else 1
                ops += [("send", op[1], op[2], False)] * count if op[0] == "burst" else [op]
            value = 0
            for op in ops:
                value += 1
                if op[0] == "send":
                    i, topic, keyed = int(str(op[1])), str(op[2]), bool(op[3])
                    key = "k" if keyed else None
                    if state[i] != "open":
                        with pytest.raises(TxnNotOpenError):
                            await txns[i].send(topic, value, key=key)
                        continue
                    await txns[i].send(topic, value, key=key)
                    if topic not in touched[i]:
                        touched[i].append(topic)
                    model[topic].append(("data", seqs[i], value))
                elif op[0] == "plain":
                    topic = str(op[1])
                    await engine.send_many(topic, [value])
                    model[topic].append(("data", None, value))
                elif op[0] == "roll":  # into the open batch (no flush), or flushed alone
                    ledger = engine._rt.topics[str(op[1])].ledger
                    if op[2]:
                        ledger.roll_over(engine._rt.store.batch)
                    else:
                        batch = WriteBatch()
                        ledger.roll_over(batch)
                        await engine._rt.store.write(batch)
                elif op[0] in ("big", "bad"):
                    i, topic = int(str(op[1])), str(op[2])
                    refused = b"x" * (LIMIT + 36) if op[0] == "big" else object()
                    # (the value is judged first, as the full path does, ended or not)
                    error = TooLargeError if op[0] == "big" else InvalidArgumentError
                    with pytest.raises(error):
                        await txns[i].send(topic, refused)
                elif state[int(str(op[1]))] == "open":  # "end"
                    await end(int(str(op[1])), bool(op[2]))
            # while some are open: the buffers hold every run, so the stable position is
            # just before the first entry of a still-open transaction
            await engine._rt.store.flush()
            open_seqs = {seqs[i] for i in range(TXNS) if state[i] == "open"}
            for topic in TOPICS:
                buffer = engine._rt.topics[topic].buffer
                buffer._check()
                fetched = await engine.fetch(topic, None, max=10_000, isolation="read_uncommitted")
                entries = fetched.entries
                first_open = next(
                    (
                        n
                        for n, e in enumerate(entries)
                        if e.kind == "data"
                        and e.txn is not None
                        and int(e.txn.removeprefix("txn-")) in open_seqs
                    ),
                    len(entries),
                )
                expected = entries[first_open - 1].position if first_open else None
                assert buffer.max_read_position == expected
            for i, commit in enumerate(ends):
                if state[i] == "open":
                    await end(i, commit)
            stored: Log = {}
            for topic in TOPICS:
                fetched = await engine.fetch(topic, None, max=10_000, isolation="read_uncommitted")
                stored[topic] = [
                    (
                        e.kind,
                        None if e.txn is None else int(e.txn.removeprefix("txn-")),
                        e.value if e.kind == "data" else None,
                    )
                    for e in fetched.entries
                ]
                keyed = [e.key for e in fetched.entries if e.kind == "data"]
                assert set(keyed) <= {None, "k"}
                engine._rt.topics[topic].buffer._check()
                committed = await engine.fetch(topic, None, max=10_000)
                aborted = {a.txn for a in committed.aborted}
                delivered = [
                    e.value for e in committed.entries if e.kind == "data" and e.txn not in aborted
                ]
                outcome = {seqs[i]: state[i] for i in range(TXNS)}
                assert delivered == [
                    v
                    for kind, seq, v in model[topic]
                    if kind == "data" and (seq is None or outcome[seq] == "commit")
                ]
        async with Engine.open(tmp, config) as engine:  # the ledgers' stored counts agree
            for topic in TOPICS:
                fetched = await engine.fetch(topic, None, max=10_000, isolation="read_uncommitted")
                assert (await engine.stats(topic))["entries"] == len(fetched.entries)
    return stored, model


@pytest.mark.postgresql_in_full_run  # (60 examples, each a store of its own)
@pytest.mark.timeout(300)
@store_per_example(60)
@example(  # another transaction's send comes between two of the fast path's
    program=[
        ("burst", 0, "a", 2),
        ("send", 1, "a", False),
        ("send", 0, "a", False),
        ("end", 0, True),
    ],
    ends=[True, True, True],
)
@example(  # the open ledger rolls over inside the fast path's batch
    program=[("burst", 0, "a", 2), ("roll", "a", True), ("send", 0, "a", False)],
    ends=[True, True, True],
)
@given(
    program=st.lists(_op, min_size=1, max_size=40),
    ends=st.lists(st.booleans(), min_size=TXNS, max_size=TXNS),
)
async def test_the_log_is_what_the_calls_made_in_call_order(
    new_store: NewStore, program: list[tuple[object, ...]], ends: list[bool]
) -> None:
    stored, model = await _run(new_store, program, ends)
    assert stored == model


async def test_a_send_after_another_handle_committed_is_refused(engine: Engine) -> None:
    await engine.create_topic("t")
    txn = await engine.begin()
    await txn.send("t", 1)
    await txn.send("t", 2)  # the fast path is set up and taken
    await engine.commit(txn.id)  # through the engine: the handle does not know
    with pytest.raises(TxnNotOpenError):
        await txn.send("t", 3)
    fetched = await engine.fetch("t", None)
    assert [e.value for e in fetched.entries if e.kind == "data"] == [1, 2]


async def test_a_send_after_the_timeout_is_refused_and_not_stored(engine: Engine) -> None:
    await engine.create_topic("t")
    txn = await engine.begin(timeout=0.2)
    await txn.send("t", 1)
    await txn.send("t", 2)
    deadline = (await txn.info()).deadline
    limit = time.monotonic() + 10  # bounded wait for the wall clock to pass the deadline
    while datetime.now(UTC) <= deadline:
        assert time.monotonic() < limit
        await asyncio.sleep(0.01)
    with pytest.raises(TxnNotOpenError):
        await txn.send("t", 3)
    fetched = await engine.fetch("t", None, isolation="read_uncommitted")
    assert 3 not in [e.value for e in fetched.entries]


async def test_each_send_carries_the_millisecond_it_was_made_in(engine: Engine) -> None:
    """The fast path makes a payload head once per millisecond: a send still gets its own
    time, also when the clock moves on between two sends of one fast path."""
    await engine.create_topic("t")
    txn = await engine.begin()
    windows = []
    for value in range(60):
        before = time.time_ns() // 1_000_000
        await txn.send("t", value)
        windows.append((before, time.time_ns() // 1_000_000))
        if value % 20 == 19:  # let the clock pass a millisecond or more, fast path held
            end = time.monotonic() + 0.002
            while time.monotonic() < end:
                pass
    await txn.commit()
    fetched = await engine.fetch("t", None, max=100)
    times = [round(e.publish_time.timestamp() * 1000) for e in fetched.entries if e.kind == "data"]
    assert len(times) == len(windows)
    assert all(low <= t <= high for t, (low, high) in zip(times, windows, strict=True))
    assert len(set(times)) >= 3


async def test_a_send_to_a_deleted_topic_is_refused(engine: Engine) -> None:
    await engine.create_topic("t")
    txn = await engine.begin()
    await txn.send("t", 1)
    await txn.send("t", 2)
    await engine.delete_topic("t")
    with pytest.raises(TopicNotFoundError):
        await txn.send("t", 3)


async def test_held_back_sends_wait_and_keep_their_order(data_dir: Path) -> None:
    async with Engine.open(data_dir, EngineConfig(max_pending_entries=16)) as engine:
        await engine.create_topic("t")
        txn: Transaction = await engine.begin()
        for value in range(100):
            await txn.send("t", value)
        await txn.send("t", 0, key="last")
        await txn.commit()
        fetched = await engine.fetch("t", None, max=1000)
        data = [(e.value, e.key) for e in fetched.entries if e.kind == "data"]
        assert data == [(v, None) for v in range(100)] + [(0, "last")]
