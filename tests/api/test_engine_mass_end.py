"""Ending many transactions at once (a large ``finish``, a mass timeout) is done in slices
of ``END_SLICE`` so that no loop step handles them all; the outcome must be the same as
ending them one by one, and a cut after the decision is completed by recovery."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import drain, eventually

from txnstream.api import Engine, EngineConfig, Transaction
from txnstream.txn_buffer import Coordinator
from txnstream.txn_buffer._coordinator import END_SLICE

pytestmark = pytest.mark.timeout(120)

COUNT = 2 * END_SLICE + 200  # three slices
TOPICS = ("left", "right")


async def begin_many(engine: Engine, count: int, timeout: float | None = None) -> list[Transaction]:
    """``count`` transactions, the i-th sending ``i`` to one of two topics."""
    txns = []
    for i in range(count):
        txn = await engine.begin(timeout=timeout)
        await txn.send(TOPICS[i % 2], i)
        txns.append(txn)
    return txns


async def delivered(engine: Engine, sub: str) -> dict[str, list[int]]:
    out = {}
    for topic in TOPICS:
        handle = await engine.subscribe(topic, sub, initial_position="earliest")
        out[topic] = [m.value for m in await drain(handle)]
        await handle.close()
    return out


def expected(committed: set[int]) -> dict[str, list[int]]:
    return {
        topic: [i for i in range(COUNT) if i % 2 == n and i in committed]
        for n, topic in enumerate(TOPICS)
    }


async def open_engine(path: Path) -> Engine:
    engine = await Engine.open(path, EngineConfig())
    for topic in TOPICS:
        if topic not in await engine.list_topics():
            await engine.create_topic(topic)
    return engine


async def test_a_large_finish_commits_and_aborts_every_listed_transaction(data_dir: Path) -> None:
    engine = await open_engine(data_dir)
    txns = await begin_many(engine, COUNT)
    commit = {i for i in range(COUNT) if i % 3 == 0}
    result = await engine.finish(
        commit=[t.id for i, t in enumerate(txns) if i in commit],
        abort=[t.id for i, t in enumerate(txns) if i not in commit],
    )
    assert len(result.committed) == len(commit)
    assert len(result.aborted) == COUNT - len(commit)
    for i in (0, 1, COUNT - 1):
        info = await txns[i].info()
        assert info.state == ("committed" if i in commit else "aborted")
    assert await delivered(engine, "before") == expected(commit)
    await engine.close()
    engine = await open_engine(data_dir)
    try:
        assert await delivered(engine, "after") == expected(commit)
        assert (await engine.stats("left"))["open_txns"] == 0
    finally:
        await engine.close()


async def test_a_finish_cut_after_its_decision_is_completed_by_recovery(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = await open_engine(data_dir)
    txns = await begin_many(engine, COUNT)
    commit = {i for i in range(COUNT) if i % 2 == 0}

    def cut(*args: object, **kwargs: object) -> None:
        raise RuntimeError("cut after the decision")

    monkeypatch.setattr(Coordinator, "_prepare_markers", cut)
    with pytest.raises(RuntimeError, match="cut after the decision"):
        await engine.finish(
            commit=[t.id for i, t in enumerate(txns) if i in commit],
            abort=[t.id for i, t in enumerate(txns) if i not in commit],
        )
    monkeypatch.undo()
    await engine.close()  # no marker was written: the topics still hold them open
    engine = await open_engine(data_dir)
    try:
        assert await delivered(engine, "after") == expected(commit)
        for i in (0, 1, COUNT - 2, COUNT - 1):
            info = await engine.get_transaction(txns[i].id)
            assert info.state == ("committed" if i in commit else "aborted")
        assert (await engine.stats("right"))["open_txns"] == 0
    finally:
        await engine.close()


async def test_a_mass_timeout_aborts_them_all_and_the_topic_moves_on(data_dir: Path) -> None:
    engine = await open_engine(data_dir)
    try:
        txns = await begin_many(engine, COUNT, timeout=0.5)
        after = await engine.begin()
        await after.send("left", "after")
        await after.commit()
        await eventually(
            lambda: engine._rt.coordinator.get(txns[-1].txn_id).state.is_ended, "expiry"
        )
        for txn in txns:
            info = await txn.info()
            assert (info.state, info.reason) == ("aborted", "timeout")
        sub = await engine.subscribe("left", "s", initial_position="earliest")
        assert [m.value for m in await drain(sub)] == ["after"]
        assert (await engine.stats("left"))["open_txns"] == 0
    finally:
        await engine.close()
