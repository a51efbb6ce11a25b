"""Snapshots: recovery equivalence with sealed segments, damaged snapshots, policy, retention."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from snapshot_format1 import encode_v1, segment_v1
from support import store_sql

import txnstream.snapshots._store as snapshot_store
from txnstream.api import Engine, EngineConfig, Position, SubscriptionHandle
from txnstream.ledger import unpack
from txnstream.snapshots import TxnBufferSnapshot, full_replay
from txnstream.txn_buffer import TxnBuffer

QUIET = EngineConfig(ledger_max_entries=10, snapshot_interval=3600.0)


def _state(buffer: TxnBuffer) -> tuple[object, ...]:
    return (
        buffer.last_confirmed,
        buffer.max_read_position,
        {t: (o.first, o.before_first, o.last) for t, o in buffer.ongoing_txns.items()},
        {t: (a.first, a.last, a.marker) for t, a in buffer.aborted_txns.items()},
    )


async def _history(engine: Engine, rounds: int) -> list[str]:
    """Commits, aborts and plain sends; leaves one transaction open. Returns its id."""
    await engine.create_topic("t")
    for i in range(rounds):
        txn = await engine.begin()
        await txn.send("t", i)
        await engine.send("t", f"plain-{i}")
        await (txn.commit() if i % 3 == 0 else txn.abort())
    still_open = await engine.begin(timeout=600)
    await still_open.send("t", "open")
    await engine.send("t", "after-open")
    return [still_open.id]


async def _assert_equivalent(engine: Engine, topic: str = "t") -> None:
    owner = engine._rt.topics[topic]
    replayed, _ = await full_replay(owner.ledger)
    assert _state(owner.buffer) == _state(replayed)


async def test_recovery_from_sealed_segments_equals_full_replay(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot_store, "SEGMENT_SIZE", 4)
    async with Engine.open(data_dir, QUIET) as engine:
        await _history(engine, 30)
        first = await engine.take_snapshot("t")
        assert first["segments"] == 5  # 20 aborted transactions in sealed segments of 4
        assert first["aborted_txns"] == 20
        txn = await engine.begin()
        await txn.send("t", "late")
        await txn.abort()
        second = await engine.take_snapshot("t")
        # only the unsealed tail and the index are written again, not every aborted id
        assert second["bytes_written"] < first["bytes_written"] / 2
    async with Engine.open(data_dir, QUIET) as engine:
        stats = await engine.stats("t")
        assert stats["recovery"]["from_snapshot"] is True
        assert stats["recovery"]["entries_replayed"] == 0
        assert stats["aborted_txns"] == 21
        assert stats["open_txns"] == 1
        await _assert_equivalent(engine)


def _versions(data_dir: Path) -> set[int]:
    blobs = store_sql(
        data_dir, "SELECT data FROM snapshots UNION ALL SELECT data FROM snapshot_segments"
    )
    return {unpack(bytes(blob))[0] for (blob,) in blobs}


async def test_snapshots_of_format_1_are_still_recovered_from(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data directory written before format 2 (compressed) recovers from its snapshots
    and segments, and its next snapshots, in format 2, are recovered from too."""
    monkeypatch.setattr(snapshot_store, "SEGMENT_SIZE", 4)
    with monkeypatch.context() as old:
        old.setattr(snapshot_store, "seal", segment_v1)
        old.setattr(TxnBufferSnapshot, "encode", encode_v1)
        async with Engine.open(data_dir, QUIET) as engine:
            await _history(engine, 60)
            await engine.take_snapshot("t")
            expected = _state(engine._rt.topics["t"].buffer)
    assert _versions(data_dir) == {1}
    async with Engine.open(data_dir, QUIET) as engine:
        stats = await engine.stats("t")
        assert stats["recovery"]["from_snapshot"] is True
        assert stats["recovery"]["entries_replayed"] == 0
        assert _state(engine._rt.topics["t"].buffer) == expected
        await engine.send("t", "after")
        await engine.take_snapshot("t")
        expected = _state(engine._rt.topics["t"].buffer)
    assert _versions(data_dir) == {1, 2}  # format 1 segments stay, named by a format 2 index
    async with Engine.open(data_dir, QUIET) as engine:
        assert (await engine.stats("t"))["recovery"]["from_snapshot"] is True
        assert _state(engine._rt.topics["t"].buffer) == expected
        await _assert_equivalent(engine)


async def test_tail_after_the_snapshot_is_replayed(data_dir: Path) -> None:
    async with Engine.open(data_dir, QUIET) as engine:
        await _history(engine, 6)
        await engine.take_snapshot("t")
        for i in range(4):
            txn = await engine.begin()
            await txn.send("t", f"tail-{i}")
            await txn.abort()
    async with Engine.open(data_dir, QUIET) as engine:
        stats = await engine.stats("t")
        assert stats["recovery"]["from_snapshot"] is True
        assert stats["recovery"]["entries_replayed"] == 8
        await _assert_equivalent(engine)


def _damage_newest(store: Path) -> None:
    [(newest, data)] = store_sql(
        store, "SELECT snapshot_id, data FROM snapshots ORDER BY snapshot_id DESC LIMIT 1"
    )
    damaged = bytes(data)[:20] + b"\x00\xff\x00\xff"
    store_sql(store, "UPDATE snapshots SET data = ? WHERE snapshot_id = ?", (damaged, newest))


def _damage(table: str, sql: str, *params: object) -> Callable[[Path], None]:
    def damage(store: Path) -> None:
        assert store_sql(store, f"SELECT count(*) FROM {table}")[0][0] > 0  # there to damage
        store_sql(store, sql, params)

    return damage


@pytest.mark.parametrize(
    ("damage", "from_snapshot"),
    [
        # newest snapshot damaged: the previous one is used, then a longer tail
        (_damage_newest, True),
        # every snapshot damaged: full replay
        (_damage("snapshots", "UPDATE snapshots SET data = ?", b"\xc1"), False),
        # a sealed segment both snapshots need is damaged: full replay
        (
            _damage(
                "snapshot_segments",
                "UPDATE snapshot_segments SET data = ? WHERE segment_id = 0",
                b"\x00",
            ),
            False,
        ),
        (_damage("snapshot_segments", "DELETE FROM snapshot_segments"), False),
    ],
    ids=["newest", "every-snapshot", "a-segment", "no-segments"],
)
async def test_damaged_snapshot_falls_back_and_state_is_still_right(
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    damage: Callable[[Path], None],
    from_snapshot: bool,
) -> None:
    monkeypatch.setattr(snapshot_store, "SEGMENT_SIZE", 4)
    async with Engine.open(data_dir, QUIET) as engine:
        await _history(engine, 15)
        await engine.take_snapshot("t")
        await engine.send("t", "between")
        await engine.take_snapshot("t")
        expected = _state(engine._rt.topics["t"].buffer)
    damage(data_dir)
    with caplog.at_level(logging.WARNING, logger="txnstream.snapshots"):
        async with Engine.open(data_dir, QUIET) as engine:
            assert _state(engine._rt.topics["t"].buffer) == expected
            stats = await engine.stats("t")
            assert stats["recovery"]["from_snapshot"] is from_snapshot
            await _assert_equivalent(engine)
            # the next snapshot is usable again
            await engine.take_snapshot("t")
    assert any("snapshot" in r.getMessage() for r in caplog.records)
    async with Engine.open(data_dir, QUIET) as engine:
        assert (await engine.stats("t"))["recovery"]["from_snapshot"] is True
        assert _state(engine._rt.topics["t"].buffer) == expected


async def _wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Poll a condition the engine exposes no event for, with a bounded deadline."""
    async with asyncio.timeout(timeout):
        while not await predicate():  # noqa: ASYNC110 - bounded condition poll in a test
            await asyncio.sleep(0.02)


async def test_policy_snapshots_after_n_markers_and_idle_topic_writes_none(data_dir: Path) -> None:
    config = EngineConfig(snapshot_every=3, snapshot_interval=3600.0)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        await engine.create_topic("idle")
        for i in range(3):
            async with engine.transaction() as txn:
                await txn.send("t", i)

        async def taken() -> bool:
            return (await engine.stats("t"))["snapshot"] is not None

        await _wait_for(taken)
        snapshot = (await engine.stats("t"))["snapshot"]
        assert snapshot["position"] == (await engine.stats("t"))["last_confirmed"]
        assert (await engine.stats("idle"))["snapshot"] is None


async def test_interval_policy_snapshots_a_changed_topic(data_dir: Path) -> None:
    config = EngineConfig(snapshot_every=1000, snapshot_interval=0.2)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        await engine.send("t", 1)

        async def taken() -> bool:
            return (await engine.stats("t"))["snapshot"] is not None

        await _wait_for(taken)


async def _alternating(engine: Engine, count: int) -> SubscriptionHandle:
    """Topic "t" with subscription "s" and ``count`` one-message transactions, every
    second one aborted."""
    await engine.create_topic("t")
    sub = await engine.subscribe("t", "s")
    for i in range(count):
        txn = await engine.begin()
        await txn.send("t", i)
        await (txn.abort() if i % 2 else txn.commit())
    return sub


async def test_retention_deletes_acknowledged_ledgers_and_prunes_aborted_state(
    data_dir: Path,
) -> None:
    config = EngineConfig(ledger_max_entries=4, snapshot_interval=3600.0)
    async with Engine.open(data_dir, config) as engine:
        sub = await _alternating(engine, 10)
        await engine.set_retention("t", max_bytes=0)
        before = await engine.stats("t")
        assert before["aborted_txns"] == 5
        # nothing acknowledged yet: retention keeps everything
        assert await engine.apply_retention("t") == 0
        got = []
        while batch := await sub.receive(max=100, timeout=0):
            got.extend(batch)
            await sub.ack(batch[-1].position, cumulative=True)
        assert [m.value for m in got] == [0, 2, 4, 6, 8]
        removed = await engine.apply_retention("t")
        after = await engine.stats("t")
        assert removed == before["ledgers"] - 1
        assert after["ledgers"] == 1
        assert after["entries"] < before["entries"]
        assert after["aborted_txns"] == 1  # only the abort in the open ledger remains
        assert after["subscriptions"]["s"]["backlog"] == 0
        assert store_sql(data_dir, "SELECT count(*) FROM aborted_txns") == [(1,)]
        await engine.send("t", "new")
        assert [m.value for m in await sub.receive(max=10, timeout=1)] == ["new"]
    async with Engine.open(data_dir, config) as engine:
        await _assert_equivalent(engine)
        fetched = await engine.fetch("t")
        assert fetched.entries[0].position > Position(0, 0)


async def test_retention_that_deletes_every_entry_forgets_every_aborted_transaction(
    data_dir: Path,
) -> None:
    """When retention leaves no entry at all, the aborted set empties too (it used to
    keep every aborted transaction until the next entry and the next retention run)."""
    config = EngineConfig(ledger_max_entries=4, snapshot_interval=3600.0)
    async with Engine.open(data_dir, config) as engine:
        sub = await _alternating(engine, 10)  # 20 entries: five whole ledgers
        got = await sub.receive(max=100, timeout=0)
        await sub.ack(got[-1].position, cumulative=True)
        await engine.set_retention("t", max_bytes=0)
    async with Engine.open(data_dir, config) as engine:  # (the full ledger is sealed)
        assert await engine.apply_retention("t") == 5
        stats = await engine.stats("t")
        assert (stats["entries"], stats["aborted_txns"]) == (0, 0)
    async with Engine.open(data_dir, config) as engine:
        assert (await engine.stats("t"))["aborted_txns"] == 0
        await engine.send("t", "new")
        await _assert_equivalent(engine)


async def test_retention_never_deletes_above_the_stable_position(data_dir: Path) -> None:
    config = EngineConfig(ledger_max_entries=2, snapshot_interval=3600.0)
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        await engine.send("t", "before")
        txn = await engine.begin(timeout=600)
        await txn.send("t", "open")
        for i in range(6):
            await engine.send("t", i)
        await engine.set_retention("t", max_bytes=0, require_ack=False)
        await engine.apply_retention("t")
        await txn.commit()
        sub = await engine.subscribe("t", "late")
        values = [m.value for m in await sub.receive(max=100, timeout=0)]
        assert "open" in values
        assert values[-6:] == list(range(6))


async def test_retention_after_a_full_replay_seals_segments_in_slices(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the first snapshot after a full replay, every aborted transaction of a topic
    is unsealed: the snapshot that goes with a retention trim must not seal them all in
    one event-loop step (a million took seconds), only the slices of a sliced snapshot."""
    monkeypatch.setattr(snapshot_store, "SEGMENT_SIZE", 4)
    config = EngineConfig(ledger_max_entries=4, snapshot_interval=3600.0)
    async with Engine.open(data_dir, config) as engine:
        sub = await _alternating(engine, 60)
        got = await sub.receive(max=100, timeout=0)
        await sub.ack(got[len(got) // 2].position, cumulative=True)  # half: half goes
        await engine.set_retention("t", max_bytes=0)
        # (no snapshot yet: 30 markers, an hour's interval; the next open replays in full)
    seal = snapshot_store._seal
    unsliced: list[int] = []  # segments sealed by a call without a deadline

    def spy(unsealed, deadline):  # type: ignore[no-untyped-def]
        sealed = seal(unsealed, deadline)
        if deadline is None:
            unsliced.append(len(sealed))
        return sealed

    monkeypatch.setattr(snapshot_store, "_seal", spy)
    async with Engine.open(data_dir, config) as engine:
        assert (await engine.stats("t"))["recovery"]["from_snapshot"] is False
        assert await engine.apply_retention("t") > 0
        assert unsliced  # the trim's snapshot was prepared...
        assert not any(unsliced)  # ...with every whole segment sealed before it, in slices
        assert 0 < (await engine.stats("t"))["aborted_txns"] < 30
        expected = _state(engine._rt.topics["t"].buffer)
        await _assert_equivalent(engine)
    async with Engine.open(data_dir, config) as engine:
        assert (await engine.stats("t"))["recovery"]["from_snapshot"] is True
        assert _state(engine._rt.topics["t"].buffer) == expected
