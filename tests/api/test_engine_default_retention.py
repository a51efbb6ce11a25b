"""``EngineConfig.default_retention`` (``serve --default-retention``, issue 31 item 10): the
retention of topics without a policy of their own; a topic's own policy wins, including
one that keeps everything."""

from __future__ import annotations

from pathlib import Path

import pytest

from txnstream.api import Engine, EngineConfig, RetentionPolicy


async def test_the_default_applies_to_topics_without_their_own(data_dir: Path) -> None:
    config = EngineConfig(
        ledger_max_entries=2, default_retention=RetentionPolicy(max_bytes=0, require_ack=False)
    )
    async with Engine.open(data_dir, config) as engine:
        for name in ("plain", "kept"):
            await engine.create_topic(name)
            await engine.send_many(name, list(range(6)))
        await engine.set_retention("kept")  # its own: keep everything
        stats = await engine.stats("plain")
        assert stats["retention"]["size_bytes"] == 0
        assert (await engine.stats("kept"))["retention"]["size_bytes"] is None
        assert await engine.apply_retention("plain") > 0
        assert await engine.apply_retention("kept") == 0
        assert (await engine.stats("kept"))["entries"] == 6


def test_the_default_must_be_a_policy() -> None:
    with pytest.raises(ValueError, match="RetentionPolicy"):
        EngineConfig(default_retention=3600)  # type: ignore[arg-type]
