"""The transaction coordinator on its own: a real Store and real Topics, no Engine.

Begin, commit, abort, finish (atomic, idempotence keys), timeouts, fencing by
``transactional_id``, the low watermark, and ``load()`` after reopening the store.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from coordinator_support import LONG, Harness
from support import eventually, write_lock

from txnstream.ledger import (
    DB_FILE,
    FencedError,
    InvalidArgumentError,
    TxnId,
    TxnNotFoundError,
    TxnNotOpenError,
    WriteBatch,
    _sqlite_sql,
    now_ms,
)
from txnstream.ledger._schema import migrate
from txnstream.ledger._sql_reads import outcome_codes
from txnstream.txn_buffer import Coordinator, TxnRecord, TxnState
from txnstream.txn_buffer._records import _REASON_CODES, REASONS, _outcome_code

pytestmark = pytest.mark.timeout(20)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / DB_FILE


@pytest.fixture
async def harness(path: Path) -> AsyncIterator[Harness]:
    opened = Harness(path)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.store.close()


@pytest.fixture
def coord(harness: Harness) -> Coordinator:
    return harness.coordinator


async def past_deadline(record: TxnRecord) -> None:
    await eventually(lambda: now_ms() >= record.deadline_ms, "the deadline to pass")


# -- begin -----------------------------------------------------------------------------


async def test_begin_hands_out_increasing_ids(harness: Harness, coord: Coordinator) -> None:
    first = coord.begin(label="one")
    second = coord.begin(timeout=1.5, transactional_id="p")
    assert second.txn_id.seq == first.txn_id.seq + 1
    assert first.state is TxnState.OPEN
    assert first.timeout_ms == round(LONG * 1000)
    assert second.timeout_ms == 1500
    assert second.deadline_ms == second.created_ms + 1500
    assert coord.get(str(first.txn_id)) is first
    assert coord.get(second.txn_id) is second
    assert coord.check_open(first.txn_id) is first
    assert [r.txn for r in await coord.list_txns()] == [str(first.txn_id), str(second.txn_id)]
    assert (await coord.list_txns(label_prefix="on"))[0].label == "one"
    assert await coord.list_txns(state="committed") == []
    await harness.store.flush()
    assert coord.id_is_durable(second.txn_id)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": -1},
        {"timeout": 2 * LONG + 1},
        {"timeout": True},
        {"timeout": "5"},
        {"label": "x" * 201},
        {"label": 5},
        {"transactional_id": ""},
        {"transactional_id": "x" * 201},
    ],
)
async def test_begin_rejects_bad_arguments(coord: Coordinator, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        coord.begin(**kwargs)
    assert coord.begin().txn_id == TxnId(0)  # nothing was consumed


async def test_unknown_and_malformed_ids(coord: Coordinator) -> None:
    for txn in ("txn-42", "garbage", TxnId(42)):
        with pytest.raises(TxnNotFoundError):
            coord.get(txn)
        with pytest.raises(TxnNotFoundError):
            await coord.commit(txn)
        with pytest.raises(TxnNotFoundError):
            await coord.abort(txn)
    with pytest.raises(InvalidArgumentError):
        await coord.list_txns(state="limbo")


# -- commit and abort ------------------------------------------------------------------


async def test_commit_writes_a_marker_on_every_touched_topic(
    harness: Harness, coord: Coordinator
) -> None:
    txn = coord.begin()
    seq = txn.txn_id.seq
    await harness.send(txn, "a", 1)
    await harness.send(txn, "b", 2)
    assert await harness.rows() == {seq: ("open", 0)}  # the row came with the first entry
    assert await coord.commit(txn.txn_id) is txn
    assert txn.state is TxnState.COMMITTED
    assert txn.ended_ms is not None
    assert harness.ended == [(str(txn.txn_id), True)]
    assert await harness.log("a") == [("data", seq), ("commit", seq)]
    assert await harness.log("b") == [("data", seq), ("commit", seq)]
    assert harness.topics["a"].buffer.ongoing_txns == {}
    assert await harness.rows() == {seq: ("committed", 0)}
    with pytest.raises(TxnNotOpenError):
        coord.check_open(txn.txn_id)
    with pytest.raises(TxnNotOpenError):
        await harness.send(txn, "a")


async def test_abort_writes_abort_markers(harness: Harness, coord: Coordinator) -> None:
    txn = coord.begin()
    seq = txn.txn_id.seq
    await harness.send(txn, "a")
    assert await coord.abort(str(txn.txn_id)) is txn
    assert txn.state is TxnState.ABORTED
    assert not txn.timed_out
    assert harness.ended == [(str(txn.txn_id), False)]
    assert await harness.log("a") == [("data", seq), ("abort", seq)]
    assert await harness.log("b") == []
    assert harness.topics["a"].buffer.is_aborted(txn.txn_id)
    assert await harness.rows() == {seq: ("aborted", 0)}


async def test_ends_are_idempotent_but_never_flip(harness: Harness, coord: Coordinator) -> None:
    committed, aborted = coord.begin(), coord.begin()
    await harness.send(committed, "a")
    await harness.send(aborted, "a")
    await coord.commit(committed.txn_id)
    await coord.abort(aborted.txn_id)
    before = await harness.log("a")
    assert await coord.commit(committed.txn_id) is committed  # again: fine, no new marker
    assert await coord.abort(aborted.txn_id) is aborted
    with pytest.raises(TxnNotOpenError):
        await coord.abort(committed.txn_id)
    with pytest.raises(TxnNotOpenError):
        await coord.commit(aborted.txn_id)
    assert await harness.log("a") == before
    assert committed.state is TxnState.COMMITTED
    assert aborted.state is TxnState.ABORTED
    assert len(harness.ended) == 2


async def test_a_transaction_that_wrote_nothing_ends_without_markers(
    harness: Harness, coord: Coordinator
) -> None:
    txn = coord.begin()
    await coord.commit(txn.txn_id)
    assert txn.state is TxnState.COMMITTED
    assert await harness.log("a") == []
    assert await harness.rows() == {txn.txn_id.seq: ("committed", 0)}


async def test_forget_drops_a_deleted_topic_from_open_transactions(
    harness: Harness, coord: Coordinator
) -> None:
    txn = coord.begin()
    await harness.send(txn, "a")
    await harness.send(txn, "b")
    batch = WriteBatch()
    coord.forget(batch, "a")
    await harness.store.write(batch)
    assert list(txn.topics) == ["b"]
    await coord.commit(txn.txn_id)
    seq = txn.txn_id.seq
    assert await harness.log("a") == [("data", seq)]  # no marker for the old topic
    assert await harness.log("b") == [("data", seq), ("commit", seq)]


# -- timeouts --------------------------------------------------------------------------


async def test_run_timeouts_aborts_expired_transactions(
    harness: Harness, coord: Coordinator
) -> None:
    short = coord.begin(timeout=0.05)
    long = coord.begin()
    await harness.send(short, "a")
    await harness.send(long, "a")
    task = asyncio.create_task(coord.run_timeouts())
    try:
        await eventually(lambda: short.state is TxnState.ABORTED, "the timeout to abort")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert short.timed_out
    assert long.state is TxnState.OPEN
    seq = short.txn_id.seq
    assert ("abort", seq) in await harness.log("a")
    assert harness.ended == [(str(short.txn_id), False)]
    with pytest.raises(TxnNotOpenError):
        coord.check_open(short.txn_id)


async def test_commit_after_the_deadline_aborts(harness: Harness, coord: Coordinator) -> None:
    txn = coord.begin(timeout=0.02)
    await harness.send(txn, "a")
    await past_deadline(txn)
    with pytest.raises(TxnNotOpenError, match="timed out"):
        coord.check_open(txn.txn_id)
    assert coord.open_records() == [txn]  # check_open only wakes the timeout task
    with pytest.raises(TxnNotOpenError, match="timed out"):
        await coord.commit(txn.txn_id)
    assert txn.state is TxnState.ABORTED
    assert txn.timed_out
    assert await harness.log("a") == [("data", txn.txn_id.seq), ("abort", txn.txn_id.seq)]
    with pytest.raises(TxnNotOpenError):
        await coord.commit(txn.txn_id)
    assert await coord.abort(txn.txn_id) is txn


async def test_long_ended_transactions_are_forgotten(path: Path) -> None:
    harness = Harness(path, ended_retention=0.0)
    coord = await harness.open()
    try:
        ended = coord.begin()
        await harness.send(ended, "a")
        await coord.commit(ended.txn_id)
        still_open = coord.begin()
        await harness.send(still_open, "a")
        ended_ms = ended.ended_ms
        assert ended_ms is not None
        await eventually(lambda: now_ms() > ended_ms, "a millisecond to pass")
        task = asyncio.create_task(coord.run_timeouts())
        try:
            await eventually(lambda: ended not in list(coord.records()), "the prune")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        with pytest.raises(TxnNotFoundError):
            coord.get(ended.txn_id)
        assert set(await harness.rows()) == {still_open.txn_id.seq}
        coord = await harness.reopen()
        assert [r.txn_id for r in coord.records()] == [still_open.txn_id]
    finally:
        await harness.store.close()


# -- fencing ---------------------------------------------------------------------------


async def test_a_new_begin_fences_the_open_holder(harness: Harness, coord: Coordinator) -> None:
    old = coord.begin(transactional_id="producer-1")
    await harness.send(old, "a")
    other = coord.begin(transactional_id="producer-2")
    new = coord.begin(transactional_id="producer-1")
    await harness.store.flush()
    assert old.fenced
    assert old.state is TxnState.ABORTED  # aborted by the fencing begin
    assert not other.fenced
    assert await harness.log("a") == [("data", old.txn_id.seq), ("abort", old.txn_id.seq)]
    assert (await harness.rows())[old.txn_id.seq] == ("aborted", 1)
    for call in (coord.commit, coord.abort):
        with pytest.raises(FencedError):
            await call(old.txn_id)
    with pytest.raises(FencedError):
        coord.check_open(old.txn_id)
    with pytest.raises(FencedError):
        await coord.finish(commit=[old.txn_id])
    await harness.send(new, "a")
    await coord.commit(new.txn_id)
    assert new.state is TxnState.COMMITTED
    assert [i.fenced for i in await coord.list_txns()] == [True, False, False]


async def test_a_new_begin_fences_an_ended_holder(harness: Harness, coord: Coordinator) -> None:
    old = coord.begin(transactional_id="p")
    await harness.send(old, "a")
    await coord.commit(old.txn_id)
    coord.begin(transactional_id="p")
    await harness.store.flush()
    assert old.fenced
    assert old.state is TxnState.COMMITTED
    assert (await harness.rows())[old.txn_id.seq] == ("committed", 1)
    assert await harness.log("a") == [("data", old.txn_id.seq), ("commit", old.txn_id.seq)]


async def test_fencing_a_holder_whose_commit_is_in_flight(
    harness: Harness, coord: Coordinator, path: Path
) -> None:
    old = coord.begin(transactional_id="p")
    await harness.send(old, "a")
    with write_lock(path):
        commit = asyncio.create_task(coord.commit(old.txn_id))
        await eventually(lambda: old.state is TxnState.COMMITTING, "the commit to start")
        assert coord.low_watermark() == old.txn_id.seq  # undecided while in flight
        new = coord.begin(transactional_id="p")
    await commit
    await harness.store.flush()
    assert old.state is TxnState.COMMITTED
    assert old.fenced
    assert coord.low_watermark() == new.txn_id.seq
    # The durable row must say what memory says, never the transient "committing".
    assert (await harness.rows())[old.txn_id.seq][0] == "committed"
    coord = await harness.reopen()
    assert coord.get(old.txn_id).state is TxnState.COMMITTED


# -- finish ----------------------------------------------------------------------------


async def test_finish_decides_several_transactions(harness: Harness, coord: Coordinator) -> None:
    one, two, three = coord.begin(), coord.begin(), coord.begin()
    for txn, topic in ((one, "a"), (two, "b"), (three, "a")):
        await harness.send(txn, topic)
    result = await coord.finish(commit=[one.txn_id, str(two.txn_id)], abort=[three.txn_id])
    assert result.committed == [str(one.txn_id), str(two.txn_id)]
    assert result.aborted == [str(three.txn_id)]
    assert not result.duplicate
    assert [one.state, two.state, three.state] == [
        TxnState.COMMITTED,
        TxnState.COMMITTED,
        TxnState.ABORTED,
    ]
    s1, s2, s3 = (t.txn_id.seq for t in (one, two, three))
    assert await harness.log("a") == [("data", s1), ("data", s3), ("commit", s1), ("abort", s3)]
    assert await harness.log("b") == [("data", s2), ("commit", s2)]
    # Already-decided transactions in the same direction are fine.
    again = await coord.finish(commit=[one.txn_id], abort=[three.txn_id])
    assert again.committed == [str(one.txn_id)]
    assert again.aborted == [str(three.txn_id)]


async def _bad_finish(coord: Coordinator, harness: Harness, case: str) -> dict[str, Any]:
    """Open ``ok`` (sent to a) plus one offending transaction; the finish arguments."""
    ok = coord.begin()
    await harness.send(ok, "a")
    bad = coord.begin(timeout=0.02 if case == "expired" else None, transactional_id="p")
    await harness.send(bad, "b")
    if case == "commit-of-aborted":
        await coord.abort(bad.txn_id)
        return {"commit": [ok.txn_id, bad.txn_id]}
    if case == "abort-of-committed":
        await coord.commit(bad.txn_id)
        return {"commit": [ok.txn_id], "abort": [bad.txn_id]}
    if case == "fenced":
        coord.begin(transactional_id="p")
        await harness.store.flush()
        return {"commit": [ok.txn_id], "abort": [bad.txn_id]}
    if case == "expired":
        await past_deadline(bad)
        return {"commit": [ok.txn_id, bad.txn_id]}
    if case == "unknown":
        return {"commit": [ok.txn_id], "abort": ["txn-999"]}
    assert case == "listed-twice"
    return {"commit": [ok.txn_id], "abort": [str(ok.txn_id)]}


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("commit-of-aborted", TxnNotOpenError),
        ("abort-of-committed", TxnNotOpenError),
        ("fenced", FencedError),
        ("expired", TxnNotOpenError),
        ("unknown", TxnNotFoundError),
        ("listed-twice", InvalidArgumentError),
    ],
)
async def test_finish_is_all_or_nothing(
    harness: Harness, coord: Coordinator, case: str, error: type[Exception]
) -> None:
    arguments = await _bad_finish(coord, harness, case)
    before = await harness.everything()
    with pytest.raises(error):
        await coord.finish(**arguments, idempotence_key="key")
    assert await harness.everything() == before
    with pytest.raises(error):  # the key was not used up
        await coord.finish(**arguments, idempotence_key="key")
    assert await harness.everything() == before
    assert coord.get("txn-0").state is TxnState.OPEN


async def test_finish_replay_with_the_same_key_aborts(harness: Harness, coord: Coordinator) -> None:
    first, second = coord.begin(), coord.begin()
    await harness.send(first, "a")
    await harness.send(second, "a")
    result = await coord.finish(commit=[first.txn_id], idempotence_key="k1")
    assert not result.duplicate
    # A retry of the same finish reports what happened.
    replay = await coord.finish(commit=[first.txn_id], idempotence_key="k1")
    assert replay.duplicate
    assert replay.committed == [str(first.txn_id)]
    # The key was used: a listed transaction still open is aborted, not committed.
    reuse = await coord.finish(commit=[second.txn_id], idempotence_key="k1")
    assert reuse.duplicate
    assert reuse.committed == []
    assert reuse.aborted == [str(second.txn_id)]
    assert second.state is TxnState.ABORTED
    # Keys survive a restart.
    coord = await harness.reopen()
    third = coord.begin()
    await harness.send(third, "b")
    after = await coord.finish(commit=[third.txn_id], idempotence_key="k1")
    assert after.duplicate
    assert after.aborted == [str(third.txn_id)]
    assert coord.get(third.txn_id).state is TxnState.ABORTED
    with pytest.raises(InvalidArgumentError):
        await coord.finish(idempotence_key="")


# -- low watermark ---------------------------------------------------------------------


async def test_low_watermark(harness: Harness, coord: Coordinator) -> None:
    assert coord.low_watermark() == 0
    t0, t1, t2 = coord.begin(), coord.begin(), coord.begin()
    assert coord.low_watermark() == 0
    await coord.commit(t1.txn_id)
    assert coord.low_watermark() == 0
    await coord.abort(t0.txn_id)
    assert coord.low_watermark() == t2.txn_id.seq
    await coord.commit(t2.txn_id)
    assert coord.low_watermark() == 3  # nothing open: the next id
    assert coord.open_records() == []


# -- recovery --------------------------------------------------------------------------


async def test_load_restores_the_transaction_log(harness: Harness, coord: Coordinator) -> None:
    open_txn = coord.begin(transactional_id="p", label="kept", timeout=LONG)
    await harness.send(open_txn, "a")
    committed = coord.begin(label="done")
    await harness.send(committed, "a")
    await harness.send(committed, "b")
    await coord.commit(committed.txn_id)
    aborted = coord.begin()
    await harness.send(aborted, "b")
    await coord.abort(aborted.txn_id)
    fenced = coord.begin(transactional_id="q")
    await harness.send(fenced, "b")
    cleanly_closed = coord.begin(timeout=0.3)
    batch = WriteBatch()
    coord.persist_open(batch)  # what a clean close writes
    await harness.store.write(batch)
    fencer = coord.begin(transactional_id="q")  # fences it; writes nothing itself
    unused = coord.begin()  # no row: a crash forgets it
    short = coord.begin(timeout=0.3)
    await harness.send(short, "b")
    await harness.store.flush()
    forgotten = {str(unused.txn_id), str(fencer.txn_id)}
    kept = [i for i in await coord.list_txns() if i.txn not in forgotten]
    deadlines = {r.txn_id: r.deadline_ms for r in coord.records()}
    handed_out = max(r.txn_id.seq for r in coord.records())

    coord = await harness.reopen()
    assert await coord.list_txns() == kept
    assert [r.txn for r in await coord.list_txns(state="open")] == [
        str(t.txn_id) for t in (open_txn, cleanly_closed, short)
    ]
    for record in coord.records():
        assert record.deadline_ms == deadlines[record.txn_id]
    for txn in (unused, fencer):
        with pytest.raises(TxnNotFoundError):
            coord.get(txn.txn_id)
    assert coord.low_watermark() == open_txn.txn_id.seq
    with pytest.raises(FencedError):
        coord.check_open(fenced.txn_id)

    # Ids are never handed out twice, not even the forgotten one's.
    fresh = coord.begin()
    assert fresh.txn_id.seq > handed_out
    assert coord.id_is_durable(open_txn.txn_id)

    # The loaded transactions keep working: deadlines, topics and holders.
    task = asyncio.create_task(coord.run_timeouts())
    try:
        await eventually(
            lambda: coord.get(short.txn_id).state is TxnState.ABORTED, "the loaded deadline"
        )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert ("abort", short.txn_id.seq) in await harness.log("b")
    coord.begin(transactional_id="p")  # fences and aborts the loaded holder
    await harness.store.flush()
    loaded = coord.get(open_txn.txn_id)
    assert loaded.fenced
    assert loaded.state is TxnState.ABORTED
    assert (await harness.log("a"))[-1] == ("abort", open_txn.txn_id.seq)


async def test_ended_transactions_keep_little_memory_and_still_end_idempotently(
    path: Path,
) -> None:
    harness = Harness(path, ended_in_memory=3, outcomes_kept=5)
    coord = await harness.open()
    try:
        ended = []
        for n in range(10):
            record = coord.begin(label=f"job:{n}", transactional_id=f"w{n}")
            await harness.send(record, "a", n)
            await (coord.commit if n % 2 else coord.abort)(record.txn_id)
            ended.append(record.txn_id)
        full = [r for r in coord.records() if r.state.is_ended]
        assert [r.txn_id for r in full] == ended[-3:]
        assert all(not r.acks for r in full)
        for n, txn in enumerate(ended[2:], start=2):  # 3 in full + 5 outcomes
            again = await (coord.commit if n % 2 else coord.abort)(txn)
            assert again.state == ("committed" if n % 2 else "aborted")
            info = await coord.read_info(coord.get(txn))  # the rest comes from its row
            assert (info.label, info.topics, info.reason) == (f"job:{n}", ["a"], "client")
            assert info.timeout_ms == int(LONG * 1000)
        with pytest.raises(TxnNotOpenError):
            await coord.commit(ended[4])  # aborted, known by its outcome alone
        for txn in ended[:2]:
            with pytest.raises(TxnNotFoundError):
                coord.get(txn)
        coord = await harness.reopen()  # a restart loads the same tiers
        assert [r.txn_id for r in coord.records() if r.state.is_ended] == ended[-3:]
        assert coord.get(ended[5]).state == "committed"
    finally:
        await harness.store.close()


async def test_a_listing_names_every_transaction_a_get_finds(path: Path) -> None:
    """Ended transactions pushed out of memory are still listed, from their rows (a
    crash drill asking for its in-doubt commits by label found only the newest 1,000)."""
    harness = Harness(path, ended_in_memory=2, outcomes_kept=100)
    coord = await harness.open()
    try:
        ids = []
        for n in range(7):
            record = coord.begin(label=f"job:{n % 2}:{n}")
            await harness.send(record, "a", n)
            await (coord.commit if n % 3 else coord.abort)(record.txn_id)
            ids.append(record.txn_id)
        still_open = coord.begin(label="job:0:open")
        await harness.send(still_open, "b")
        ids.append(still_open.txn_id)
        for attempt in ("running", "reopened"):
            gets = [await coord.read_info(coord.get(txn)) for txn in ids]
            assert await coord.list_txns() == gets, attempt
            assert await coord.list_txns(label_prefix="job:0:") == [
                info for info in gets if info.label and info.label.startswith("job:0:")
            ]
            assert [i.txn for i in await coord.list_txns(state="aborted")] == [
                str(ids[n]) for n in (0, 3, 6)
            ]
            assert await coord.list_txns(state="open", label_prefix="job:0") == [gets[-1]]
            assert await coord.list_txns(older_than_ms=3_600_000) == []
            coord = await harness.reopen()
    finally:
        await harness.store.close()


@pytest.mark.parametrize("seed", range(4))
async def test_listing_pages_merge_memory_and_rows_in_id_order(path: Path, seed: int) -> None:
    """Pages of a listing, any page size, joined: every transaction a GET finds, in id
    order, though open and recently ended ones come from memory and older ones from
    rows read page by page (the two interleave whenever an old transaction stays open)."""
    rng = random.Random(seed)
    harness = Harness(path, ended_in_memory=2, outcomes_kept=100)
    coord = await harness.open()
    try:
        ids, open_ = [], []
        for n in range(25):
            record = coord.begin(label=f"job:{n % 2}:{n}")
            ids.append(record.txn_id)
            if rng.random() < 0.3:
                open_.append(record)  # stays open: listed from memory among older rows
            else:
                await harness.send(record, "a", n)
                await (coord.commit if rng.random() < 0.6 else coord.abort)(record.txn_id)
        gets = [await coord.read_info(coord.get(txn)) for txn in ids]
        for page in (1, 2, 3, 7, 100):
            for state, prefix in ((None, None), ("aborted", None), (None, "job:1:")):
                pages = [p async for p in coord.iter_txns(state, prefix, page=page)]
                assert all(pages)
                assert [i for p in pages for i in p] == [
                    info
                    for info in gets
                    if (state is None or info.state == state)
                    and (prefix is None or (info.label or "").startswith(prefix))
                ], (page, state, prefix)
    finally:
        await harness.store.close()


def test_outcome_codes_read_by_sqlite_equal_the_ones_made_in_memory() -> None:
    """Recovery computes outcome codes in SQL; every state x fenced x reason agrees."""
    conn = sqlite3.connect(":memory:")
    migrate(conn)
    combos = list(itertools.product(("committed", "aborted"), (0, 1), (*REASONS, None)))
    conn.executemany(
        "INSERT INTO txns (seq, state, timeout_ms, deadline_ms, fenced, topics, acks,"
        " created_ms, ended_ms, reason) VALUES (?, ?, 0, 0, ?, x'90', x'90', 0, 5, ?)",
        [(seq, state, fenced, reason) for seq, (state, fenced, reason) in enumerate(combos)],
    )
    query = outcome_codes(_sqlite_sql, _REASON_CODES)
    codes = dict(conn.execute(query, (0, len(combos), len(combos))).fetchall())
    assert codes == {
        seq: _outcome_code(state == "committed", bool(fenced), reason)
        for seq, (state, fenced, reason) in enumerate(combos)
    }


async def test_outcomes_load_in_slices(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restart loads outcome-only transactions a slice at a time (chunks of 4 seqs and
    slices of 3 here), each as it ended."""
    harness = Harness(path, ended_in_memory=1, outcomes_kept=100)
    coord = await harness.open()
    try:
        ended = {}
        for n in range(11):
            record = coord.begin()
            await harness.send(record, "a", n)
            await (coord.commit if n % 3 else coord.abort)(record.txn_id)
            ended[record.txn_id] = "committed" if n % 3 else "aborted"
        monkeypatch.setattr("txnstream.txn_buffer._table._LOAD_SLICE", 3)
        coord = await harness.reopen()
        assert {txn: coord.get(txn).state for txn in ended} == ended
        assert coord.begin().txn_id.seq > max(t.seq for t in ended)
    finally:
        await harness.store.close()
