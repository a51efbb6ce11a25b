"""``engine.recovery``: what an open rebuilt, summed over topics (the serve banner's line)."""

from __future__ import annotations

from pathlib import Path

from txnstream.api import Engine, EngineConfig, RecoverySummary


async def test_recovery_summary_counts_topics_replay_and_snapshots(data_dir: Path) -> None:
    data = data_dir
    config = EngineConfig(min_free_bytes=0)
    async with Engine.open(data, config) as engine:
        assert engine.recovery is not None
        assert engine.recovery.topics == 0
        await engine.create_topic("a")
        await engine.create_topic("b")
        await engine.send_many("a", [1, 2, 3])
        await engine.send_many("b", [1, 2])
        await engine.take_snapshot("b")
        await engine.send("b", 3)
        txn = await engine.begin()
        await txn.send("a", 4)  # stays open across the restart

    async with Engine.open(data, config) as engine:
        summary = engine.recovery
        assert isinstance(summary, RecoverySummary)
        assert summary.topics == 2
        assert summary.from_snapshot == 1  # b
        assert summary.entries_replayed >= 4 + 1  # all of a, b's tail after its snapshot
        assert summary.open_txns == 1
        assert 0 < summary.seconds < 30
        assert summary.as_dict()["topics"] == 2
