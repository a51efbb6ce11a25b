"""The engine's garbage-collector policy (``EngineConfig.gc_freeze``): what exists once an
engine is open is frozen out of full collections, collection resumes as the host had it,
the last close hands frozen objects back to the collector, and while engines are open
the young generation is collected every ``YOUNG_THRESHOLD`` net new containers."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from txnstream.api import Engine, EngineConfig, _gc

pytestmark = pytest.mark.timeout(60)


class Node:
    """An object in a reference cycle: only the cyclic collector can free it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def clean_collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Engines other tests keep open (a session's server) would hold the freeze past
    # these tests' closes: count only this test's engines.
    monkeypatch.setattr(_gc, "_frozen", 0)
    monkeypatch.setattr(_gc, "_young", 0)
    monkeypatch.setattr(_gc, "_host_thresholds", None)
    gc.unfreeze()
    enabled = gc.isenabled()
    thresholds = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's defaults, whatever the session set
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    if enabled:
        gc.enable()


def cycle() -> weakref.ref[Node]:
    node = Node()
    ref = weakref.ref(node)
    del node
    return ref


async def test_an_open_engine_freezes_and_its_close_releases(tmp_path: Path) -> None:
    gc.disable()  # no automatic collection between making the cycle and the freeze
    garbage = cycle()  # unreachable already, but no collection has run
    async with Engine.open(tmp_path / "d", EngineConfig()) as engine:
        await engine.create_topic("t")
        assert gc.get_freeze_count() > 0
        gc.collect()
        assert garbage() is not None, "a frozen cycle is not collected while open"
        fresh = cycle()  # made after the freeze: collected as usual
        gc.collect()
        assert fresh() is None
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert garbage() is None, "after the last close the cycle is collected"


async def test_the_last_of_several_engines_releases(tmp_path: Path) -> None:
    first = await Engine.open(tmp_path / "a", EngineConfig())
    second = await Engine.open(tmp_path / "b", EngineConfig())
    await first.close()
    assert gc.get_freeze_count() > 0, "one engine is still open"
    await second.close()
    assert gc.get_freeze_count() == 0
    await second.close()  # idempotent: no second release
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("host_enabled", [True, False])
async def test_the_hosts_collector_setting_is_kept(tmp_path: Path, host_enabled: bool) -> None:
    if host_enabled:
        gc.enable()
    else:
        gc.disable()
    async with Engine.open(tmp_path / "d", EngineConfig()):
        assert gc.isenabled() is host_enabled
    assert gc.isenabled() is host_enabled


async def test_gc_freeze_off_leaves_the_collector_alone(tmp_path: Path) -> None:
    garbage = cycle()
    async with Engine.open(tmp_path / "d", EngineConfig(gc_freeze=False)):
        assert gc.get_freeze_count() == 0
        assert gc.get_threshold() == (700, 10, 10)
        gc.collect()
        assert garbage() is None


async def test_open_engines_collect_the_young_generation_less_often(tmp_path: Path) -> None:
    first = await Engine.open(tmp_path / "a", EngineConfig())
    assert gc.get_threshold() == (_gc.YOUNG_THRESHOLD, 10, 10)
    second = await Engine.open(tmp_path / "b", EngineConfig())
    await first.close()
    assert gc.get_threshold() == (_gc.YOUNG_THRESHOLD, 10, 10), "one engine is still open"
    await second.close()
    assert gc.get_threshold() == (700, 10, 10)
    await second.close()  # idempotent
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("host", [(0, 10, 10), (20_000, 5, 5)])
async def test_a_host_threshold_that_is_off_or_higher_is_kept(
    tmp_path: Path, host: tuple[int, int, int]
) -> None:
    gc.set_threshold(*host)
    async with Engine.open(tmp_path / "d", EngineConfig()):
        assert gc.get_threshold() == host
    assert gc.get_threshold() == host


async def test_thresholds_the_host_set_while_open_are_not_undone(tmp_path: Path) -> None:
    async with Engine.open(tmp_path / "d", EngineConfig()):
        gc.set_threshold(1000, 20, 20)
    assert gc.get_threshold() == (1000, 20, 20)


async def test_a_failed_open_leaves_the_thresholds_alone(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(FileExistsError):
        await Engine.open(tmp_path / "file", EngineConfig())
    assert gc.get_threshold() == (700, 10, 10)


async def test_a_consumer_draining_a_backlog_rarely_runs_a_young_collection(
    tmp_path: Path,
) -> None:
    """Receive + cumulative ack of 1,000 at a time: each batch holds thousands of young
    containers until its messages are made, so at CPython's 700 every batch ran a young
    collection (25 in 20 batches here) walking objects about to be freed."""
    async with Engine.open(tmp_path / "d", EngineConfig()) as engine:
        await engine.create_topic("t")
        for _ in range(20):
            txn = await engine.begin()
            await txn.send_many("t", [b"x" * 100] * 1000)
            await txn.commit()
        sub = await engine.subscribe("t", "s", initial_position="earliest")
        young: list[int] = []

        def count(phase: str, info: dict[str, int]) -> None:
            if phase == "start" and info["generation"] == 0:
                young.append(1)

        gc.collect()
        gc.callbacks.append(count)
        try:
            read = 0
            while read < 20_000:
                got = await sub.receive(max=1000, timeout=5.0)
                assert got, f"the backlog ended early, at {read}"
                read += len(got)
                await sub.ack(got[-1].position, cumulative=True)
        finally:
            gc.callbacks.remove(count)
    assert read == 20_000
    assert len(young) <= 5, f"{len(young)} young collections for 20 batches"


async def test_a_failed_open_releases_nothing_it_did_not_take(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(FileExistsError):
        await Engine.open(tmp_path / "file", EngineConfig())
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


async def test_the_hot_paths_leave_no_garbage_for_the_cyclic_collector(data_dir: Path) -> None:
    """Sends, transactions, mass ends, batches, receives and acks free what they made by
    reference counting: nothing waits for a full collection (a collection walks the live
    state, so garbage cycles per commit become event-loop stalls and memory)."""
    async with Engine.open(data_dir, EngineConfig()) as engine:
        await engine.create_topic("t")
        await engine.create_topic("u")
        exclusive = await engine.subscribe("t", "x", initial_position="earliest")
        shared = await engine.subscribe("t", "s", initial_position="earliest", type="shared")
        await engine.send("t", "warm-up")
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection frees is kept in gc.garbage
        try:
            for n in range(20):
                await engine.send("t", n)
                await engine.send_many("t", [n] * 5)
                txn = await engine.begin()
                await txn.send("t", n)
                await txn.send_many("u", [n, n])
                await (txn.commit() if n % 2 else txn.abort())
            await engine.send_batch([("t", "a"), ("u", "b")])
            held = []
            for _ in range(30):
                txn = await engine.begin()
                await txn.send("u", "held")
                held.append(txn.id)
            await engine.finish(commit=held[:10], abort=held[10:])
            for _ in range(3):
                got = await exclusive.receive(max=20, timeout=1.0)
                await exclusive.ack(got[-1].position, cumulative=True)
                got = await shared.receive(max=20, timeout=1.0)
                await shared.ack([m.position for m in got])
            del got, txn
            gc.collect()
            leftovers = [type(o).__qualname__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert leftovers == []


async def test_a_new_topic_gives_the_collector_few_objects_to_walk(data_dir: Path) -> None:
    """Topics created while an engine is open stay in the collected generations until the
    next open; each one that has seen no transaction is a handful of tracked objects (a
    sorted container each for open and aborted transactions would be ~11 more), so ten
    thousand of them keep a full collection short."""
    async with Engine.open(data_dir, EngineConfig(durability="normal")) as engine:
        await engine.create_topic("warm-up")
        await engine.send("warm-up", b"x")
        gc.collect()
        before = len(gc.get_objects())
        for i in range(200):
            await engine.create_topic(f"t{i}")
        gc.collect()
        per_topic = (len(gc.get_objects()) - before) / 200
        assert per_topic <= 12, per_topic
        # the containers appear when needed: a transaction and an abort still work
        txn = await engine.begin()
        await txn.send("t0", b"v")
        await txn.abort()
        stats = await engine.stats("t0")
        assert stats["open_txns"] == 0
