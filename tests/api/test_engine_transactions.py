"""Transaction life: ending twice, errors, timeouts, restarts, fencing, labels, finish."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from support import drain, make_topics, positions, txn_state, values, wait_until

from txnstream.api import (
    Engine,
    FencedError,
    InvalidArgumentError,
    NotFoundError,
    OutgoingMessage,
    Position,
    TxnNotFoundError,
    TxnNotOpenError,
)

# -- ending --------------------------------------------------------------------------


async def test_commit_of_a_committed_transaction_returns_normally(engine: Engine) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    await txn.send("t", 1)
    await txn.commit()
    entries = (await engine.stats("t"))["entries"]

    await txn.commit()
    info = await engine.commit(txn.id)

    assert info.state == "committed"
    assert (await engine.stats("t"))["entries"] == entries  # no second marker


async def test_abort_of_an_aborted_transaction_returns_normally(engine: Engine) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    await txn.send("t", 1)
    await txn.abort()
    entries = (await engine.stats("t"))["entries"]

    await txn.abort()
    info = await engine.abort(txn.id)

    assert info.state == "aborted"
    assert (await engine.stats("t"))["entries"] == entries


async def test_commit_of_an_aborted_transaction_raises_txn_not_open(engine: Engine) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    await txn.send("t", 1)
    await txn.abort()
    with pytest.raises(TxnNotOpenError):
        await txn.commit()
    with pytest.raises(TxnNotOpenError):
        await engine.commit(txn.id)
    assert await txn_state(engine, txn.id) == "aborted"
    assert await drain(await engine.subscribe("t", "s")) == []


async def test_abort_of_a_committed_transaction_raises_txn_not_open(engine: Engine) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    await txn.send("t", "kept")
    await txn.commit()
    with pytest.raises(TxnNotOpenError):
        await txn.abort()
    assert await txn_state(engine, txn.id) == "committed"
    assert values(await drain(await engine.subscribe("t", "s"))) == ["kept"]


@pytest.mark.parametrize(
    "txn_id", ["txn-999999", "txn-abc", "nope", "", "txn--1", "txn-01", "TXN-1", "txn-1 "]
)
async def test_unknown_or_malformed_transaction_id_is_not_found(
    engine: Engine, txn_id: str
) -> None:
    await make_topics(engine, "t")
    for call in (engine.get_transaction, engine.commit, engine.abort):
        with pytest.raises(TxnNotFoundError):
            await call(txn_id)
    with pytest.raises(NotFoundError):
        await engine.produce("t", [OutgoingMessage("v")], txn=txn_id)
    assert (await engine.stats("t"))["entries"] == 0


@pytest.mark.parametrize("ending", ["commit", "abort"])
async def test_send_to_an_ended_transaction_raises_and_stores_nothing(
    engine: Engine, ending: str
) -> None:
    await make_topics(engine, "t", "other")
    txn = await engine.begin()
    await txn.send("t", "inside")
    await getattr(txn, ending)()
    before = {name: await engine.stats(name) for name in ("t", "other")}

    with pytest.raises(TxnNotOpenError):
        await txn.send("t", "late")
    with pytest.raises(TxnNotOpenError):
        await txn.send_many("other", ["late", "later"])
    with pytest.raises(TxnNotOpenError):
        await engine.produce("other", [OutgoingMessage("late")], txn=txn.id)

    for name in ("t", "other"):
        assert await engine.stats(name) == before[name]
    assert (await engine.get_transaction(txn.id)).topics == ["t"]


@pytest.mark.parametrize("timeout", [0, -1, 901.0, "10", True])
async def test_begin_rejects_a_bad_timeout(engine: Engine, timeout: object) -> None:
    with pytest.raises(InvalidArgumentError):
        await engine.begin(timeout=timeout)  # type: ignore[arg-type]
    assert await engine.transactions() == []


# -- timeouts ------------------------------------------------------------------------


async def test_transaction_times_out_and_is_aborted(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    txn = await engine.begin(timeout=0.3)
    await txn.send("t", "doomed")
    plain = await engine.send("t", "plain")
    assert await sub.receive(timeout=0) == []  # held back while open

    took = await wait_until(
        lambda: _state_is(engine, txn.id, "aborted"), 5.0, "the timeout to abort"
    )
    assert took < 3.0

    with pytest.raises(TxnNotOpenError):
        await txn.commit()
    with pytest.raises(TxnNotOpenError):
        await txn.send("t", "too late")
    stats = await engine.stats("t")
    assert stats["open_txns"] == 0
    assert stats["aborted_txns"] == 1
    assert stats["stable_position"] == stats["last_confirmed"]
    got = await drain(sub)
    assert positions(got) == [plain]


async def test_expired_transaction_refuses_commit_even_before_the_timeout_task_runs(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin(timeout=0.05)
    await txn.send("t", "x")
    await _wall_clock_past(time.time() + 0.1)  # the deadline passes; nothing to wait on
    with pytest.raises(TxnNotOpenError):
        await txn.commit()
    assert await txn_state(engine, txn.id) == "aborted"
    assert await drain(await engine.subscribe("t", "s")) == []


async def test_timeout_keeps_its_absolute_deadline_across_restart(data_dir: Path) -> None:
    timeout = 2.0
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t")
        txn = await engine.begin(timeout=timeout)
        begun = time.time()
        await txn.send("t", "doomed")
        plain = await engine.send("t", "plain")
    # The engine is down while the deadline passes.
    await _wall_clock_past(begun + timeout + 0.05)

    async with Engine.open(data_dir) as engine:
        # With the original deadline the abort is immediate; a deadline restarted at
        # reopen would keep the transaction open for another `timeout` seconds.
        took = await wait_until(
            lambda: _state_is(engine, txn.id, "aborted"), timeout * 0.6, "the restart abort"
        )
        assert took < timeout
        stats = await engine.stats("t")
        assert stats["open_txns"] == 0
        assert stats["stable_position"] == stats["last_confirmed"]
        got = await drain(await engine.subscribe("t", "s"))
        assert positions(got) == [plain]


async def test_open_transaction_survives_clean_restart_and_commits_after(
    data_dir: Path,
) -> None:
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t", "u")
        txn = await engine.begin(timeout=120.0, label="keep-me")
        sent = await txn.send_many("t", ["a", "b"])
        await txn.send("u", "c")  # pipelined: the clean close must make it durable
        plain = await engine.send("t", "plain")

    async with Engine.open(data_dir) as engine:
        info = await engine.get_transaction(txn.id)
        assert info.state == "open"
        assert info.label == "keep-me"
        assert sorted(info.topics) == ["t", "u"]
        assert info.timeout_ms == 120_000
        stats = await engine.stats("t")
        assert stats["open_txns"] == 1
        assert stats["last_confirmed"] == str(plain)
        assert stats["stable_position"] is None
        sub_t = await engine.subscribe("t", "s")
        sub_u = await engine.subscribe("u", "s")
        assert await sub_t.receive(timeout=0.1) == []

        await engine.commit(txn.id)

        got = await sub_t.receive(max=10, timeout=0)
        assert positions(got) == [*sent, plain]
        assert values(await sub_u.receive(max=10, timeout=0)) == ["c"]


async def test_open_transaction_can_be_aborted_after_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t")
        txn = await engine.begin(timeout=120.0)
        await txn.send("t", "never")
    async with Engine.open(data_dir) as engine:
        await engine.abort(txn.id)
        assert await txn_state(engine, txn.id) == "aborted"
        assert await drain(await engine.subscribe("t", "s")) == []
        stats = await engine.stats("t")
        assert stats["stable_position"] == stats["last_confirmed"]


async def test_transaction_ids_are_never_reused_across_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        first = [(await engine.begin()).id for _ in range(3)]
    async with Engine.open(data_dir) as engine:
        second = [(await engine.begin()).id for _ in range(3)]
    assert len(set(first) | set(second)) == 6


async def _state_is(engine: Engine, txn_id: str, state: str) -> bool:
    return await txn_state(engine, txn_id) == state


async def _wall_clock_past(when: float) -> None:
    """Let wall-clock time pass ``when`` (time passing is the scenario, not a sync)."""
    await asyncio.sleep(max(0.0, when - time.time()) + 0.01)
    assert time.time() > when


# -- fencing -------------------------------------------------------------------------


async def test_transactional_id_fences_the_previous_holder(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    await engine.send("t", "to-ack")
    (delivered,) = await sub.receive(timeout=0)
    old = await engine.begin(transactional_id="billing-worker")
    await old.send("t", "from old")

    new = await engine.begin(transactional_id="billing-worker")
    before = await engine.stats("t")

    with pytest.raises(FencedError):
        await old.send("t", "zombie")
    with pytest.raises(FencedError):
        await engine.produce("t", [OutgoingMessage("zombie")], txn=old.id)
    with pytest.raises(FencedError):
        await old.ack("t", "s", [delivered.position])
    with pytest.raises(FencedError):
        await old.commit()
    with pytest.raises(FencedError):
        await old.abort()
    assert await engine.stats("t") == before

    await new.send("t", "from new")
    await new.commit()
    info = await engine.get_transaction(old.id)
    assert info.state == "aborted"
    assert info.fenced is True
    assert (await engine.get_transaction(new.id)).fenced is False
    await sub.ack(delivered.position)  # the fenced ack left nothing pending
    assert values(await drain(sub)) == ["from new"]


async def test_fenced_transaction_reads_as_aborted_as_soon_as_begin_returns(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    old = await engine.begin(transactional_id="worker")
    await old.send("t", "from old")

    await engine.begin(transactional_id="worker")

    info = await engine.get_transaction(old.id)
    assert info.fenced is True
    assert info.state == "aborted"


async def test_fencing_survives_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t")
        old = await engine.begin(transactional_id="w", timeout=120.0)
        await old.send("t", "old")
        new = await engine.begin(transactional_id="w", timeout=120.0)
        await new.send("t", "new")
    async with Engine.open(data_dir) as engine:
        with pytest.raises(FencedError):
            await engine.commit(old.id)
        info = await engine.get_transaction(old.id)
        assert (info.state, info.fenced) == ("aborted", True)
        await engine.commit(new.id)
        assert values(await drain(await engine.subscribe("t", "s"))) == ["new"]


def _flushes(engine: Engine) -> float:
    return engine.metrics.registry.get_sample_value("txnstream_flush_duration_seconds_count") or 0


async def test_begin_waits_for_no_flush_when_the_holder_already_decided(data_dir: Path) -> None:
    """A holder already committed (or aborted) only gets its fenced flag, which rides the
    new transaction's first flush: one fsync a transaction, not two (a crash before that
    flush forgets the new, empty transaction and leaves the old one's outcome as it was)."""
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t")
        old = await engine.begin(transactional_id="w")
        await old.send("t", "old")
        await old.commit()
        flushes = _flushes(engine)

        new = await engine.begin(transactional_id="w")

        assert _flushes(engine) == flushes
        with pytest.raises(FencedError):  # fenced at once, in memory
            await old.commit()
        await new.send("t", "new")
        await new.commit()  # (its flush carries the old holder's fence)
    async with Engine.open(data_dir) as engine:
        info = await engine.get_transaction(old.id)
        assert (info.state, info.fenced) == ("committed", True)
        with pytest.raises(FencedError):
            await engine.commit(old.id)
        assert values(await drain(await engine.subscribe("t", "s"))) == ["old", "new"]


async def test_begin_fencing_an_open_holder_returns_once_its_abort_is_durable(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    old = await engine.begin(transactional_id="w")
    await old.send("t", "old")
    flushes = _flushes(engine)

    await engine.begin(transactional_id="w")

    assert _flushes(engine) > flushes
    assert (await engine.get_transaction(old.id)).state == "aborted"


async def test_produce_start_in_a_transaction_rides_the_commit_flush(engine: Engine) -> None:
    """A front door's transactional produce (Kafka's) is pipelined as txn.send: no flush
    of its own, so the commit is one fsync, not one behind another."""
    await make_topics(engine, "t")
    _, plain_done = await engine.produce_start("t", [OutgoingMessage("plain")])
    assert plain_done is not None  # outside a transaction: durable when the future is
    await plain_done
    txn = await engine.begin()
    flushes = _flushes(engine)

    result, done = await engine.produce_start(
        "t", [OutgoingMessage("a"), OutgoingMessage("b")], txn=txn.id, producer="p", sequence=0
    )

    assert done is None
    assert len(result.positions) == 2
    assert _flushes(engine) == flushes
    await txn.commit()
    assert _flushes(engine) == flushes + 1
    assert values(await drain(await engine.subscribe("t", "s"))) == ["plain", "a", "b"]
    assert engine.last_sequence("t", "p") == 1


# -- labels and listing ----------------------------------------------------------------


async def test_transactions_listing_filters_by_state_and_label_prefix(engine: Engine) -> None:
    a = await engine.begin(label="job-7:part-0")
    b = await engine.begin(label="job-7:part-1")
    c = await engine.begin(label="job-8:part-0")
    d = await engine.begin()

    open_job7 = await engine.transactions(state="open", label_prefix="job-7:")
    assert sorted(t.txn for t in open_job7) == sorted([a.id, b.id])
    assert {t.label for t in open_job7} == {"job-7:part-0", "job-7:part-1"}
    assert sorted(t.txn for t in await engine.transactions(label_prefix="job-")) == sorted(
        [a.id, b.id, c.id]
    )
    assert sorted(t.txn for t in await engine.transactions(state="open")) == sorted(
        [a.id, b.id, c.id, d.id]
    )

    await a.commit()
    await c.abort()
    assert [t.txn for t in await engine.transactions(state="committed")] == [a.id]
    assert [t.txn for t in await engine.transactions(state="aborted", label_prefix="job")] == [c.id]
    assert [t.txn for t in await engine.transactions(state="open", label_prefix="job-7:")] == [b.id]
    assert await engine.transactions(label_prefix="job-9") == []


async def test_transactions_listing_rejects_an_unknown_state(engine: Engine) -> None:
    with pytest.raises(InvalidArgumentError):
        await engine.transactions(state="bogus")


async def test_label_too_long_is_rejected(engine: Engine) -> None:
    with pytest.raises(InvalidArgumentError):
        await engine.begin(label="x" * 201)
    assert await engine.transactions() == []


# -- finish ----------------------------------------------------------------------------


async def test_finish_commits_and_aborts_in_one_step(engine: Engine) -> None:
    await make_topics(engine, "t", "u")
    sub_t = await engine.subscribe("t", "s")
    sub_u = await engine.subscribe("u", "s")
    a = await engine.begin(label="job-7:part-0")
    b = await engine.begin(label="job-7:part-1")
    c = await engine.begin(label="job-7:part-2")
    await a.send("t", "a")
    await b.send("u", "b")
    await c.send("t", "c")

    result = await engine.finish(commit=[a.id, b.id], abort=[c.id], idempotence_key="job-7")

    assert sorted(result.committed) == sorted([a.id, b.id])
    assert result.aborted == [c.id]
    assert result.duplicate is False
    assert [await txn_state(engine, t.id) for t in (a, b, c)] == [
        "committed",
        "committed",
        "aborted",
    ]
    # Durable and visible on every topic when finish returns.
    assert values(await sub_t.receive(max=10, timeout=0)) == ["a"]
    assert values(await sub_u.receive(max=10, timeout=0)) == ["b"]
    assert await engine.transactions(state="open", label_prefix="job-7:") == []


async def test_finish_with_a_commit_that_is_not_open_changes_nothing(engine: Engine) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    a = await engine.begin()
    b = await engine.begin()
    gone = await engine.begin()
    await a.send("t", "a")
    await b.send("t", "b")
    await gone.send("t", "gone")
    await gone.abort()
    before = await engine.stats("t")

    with pytest.raises(TxnNotOpenError):
        await engine.finish(commit=[a.id, gone.id], abort=[b.id])

    assert await txn_state(engine, a.id) == "open"
    assert await txn_state(engine, b.id) == "open"
    assert await engine.stats("t") == before
    assert await sub.receive(timeout=0.1) == []

    # The same call without the bad one goes through.
    await engine.finish(commit=[a.id], abort=[b.id])
    assert values(await drain(sub)) == ["a"]


async def test_finish_with_an_abort_of_a_committed_transaction_changes_nothing(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    a = await engine.begin()
    done = await engine.begin()
    await a.send("t", "a")
    await done.send("t", "done")
    await done.commit()
    with pytest.raises(TxnNotOpenError):
        await engine.finish(commit=[a.id], abort=[done.id])
    assert await txn_state(engine, a.id) == "open"
    assert await txn_state(engine, done.id) == "committed"


async def test_finish_with_an_unknown_transaction_changes_nothing(engine: Engine) -> None:
    await make_topics(engine, "t")
    a = await engine.begin()
    await a.send("t", "a")
    with pytest.raises(TxnNotFoundError):
        await engine.finish(commit=[a.id, "txn-424242"])
    with pytest.raises(InvalidArgumentError):
        await engine.finish(commit=[a.id], abort=[a.id])
    assert await txn_state(engine, a.id) == "open"


async def test_finish_repeated_with_the_same_key_aborts_the_newly_listed(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    a = await engine.begin()
    b = await engine.begin()
    await a.send("t", "a")
    await b.send("t", "b")
    first = await engine.finish(commit=[a.id, b.id], idempotence_key="job-7")
    assert first.duplicate is False

    # A retried job attempt wrote new transactions and finishes with the same key.
    c = await engine.begin()
    d = await engine.begin()
    await c.send("t", "c")
    await d.send("t", "d")
    second = await engine.finish(commit=[c.id, d.id], idempotence_key="job-7")

    assert second.duplicate is True
    assert sorted(second.aborted) == sorted([c.id, d.id])
    assert second.committed == []
    assert await txn_state(engine, c.id) == "aborted"
    assert await txn_state(engine, d.id) == "aborted"
    assert values(await drain(sub)) == ["a", "b"]


async def test_failed_finish_does_not_use_up_its_idempotence_key(engine: Engine) -> None:
    await make_topics(engine, "t")
    a = await engine.begin()
    gone = await engine.begin()
    await a.send("t", "a")
    await gone.abort()
    with pytest.raises(TxnNotOpenError):
        await engine.finish(commit=[a.id, gone.id], idempotence_key="job-3")
    result = await engine.finish(commit=[a.id], idempotence_key="job-3")
    assert result.duplicate is False
    assert result.committed == [a.id]
    assert values(await drain(await engine.subscribe("t", "s"))) == ["a"]


async def test_finish_idempotence_key_survives_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t")
        a = await engine.begin()
        await a.send("t", "a")
        await engine.finish(commit=[a.id], idempotence_key="job-9")
    async with Engine.open(data_dir) as engine:
        c = await engine.begin()
        await c.send("t", "c")
        result = await engine.finish(commit=[c.id], idempotence_key="job-9")
        assert result.duplicate is True
        assert await txn_state(engine, c.id) == "aborted"
        assert values(await drain(await engine.subscribe("t", "s"))) == ["a"]


async def test_commit_makes_positions_returned_by_pipelined_sends_readable(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    sent = await asyncio.gather(*(txn.send("t", i) for i in range(50)))
    assert sorted(sent) == list(sent)
    assert all(isinstance(p, Position) for p in sent)
    await txn.commit()
    got = await engine.subscribe("t", "s")
    delivered = await got.receive(max=100, timeout=0)
    assert positions(delivered) == list(sent)
    assert values(delivered) == list(range(50))
