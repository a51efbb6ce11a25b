"""Seek and fetch by publish time (issue 31 item 5): ``sub.seek(datetime)``,
``engine.seek(topic, sub, datetime)`` and ``engine.fetch(topic, datetime)`` start at the
first entry published at or after the time, across ledgers and aborted data."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from support import drain, values, wait_for

from txnstream.api import Engine, EngineConfig, InvalidArgumentError, Position


def _later_than(moment: datetime) -> None:
    """Wait (bounded) until the wall clock is past ``moment``'s millisecond."""
    wait_for(lambda: time.time() * 1000 > moment.timestamp() * 1000 + 1, 5, "the clock")


async def test_seek_and_fetch_by_publish_time(data_dir: Path) -> None:
    # Ledgers of 3 entries: the search crosses ledger boundaries.
    async with Engine.open(data_dir, EngineConfig(ledger_max_entries=3)) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", ["a", "b", "c", "d"])
        sub = await engine.subscribe("t", "s")
        first = await drain(sub)
        _later_than(first[-1].publish_time)
        cut = datetime.now(UTC)  # after "d", before the aborted transaction
        txn = await engine.begin()
        await txn.send("t", "aborted")
        await txn.abort()
        await engine.send_many("t", ["e", "f"])
        later = next(m for m in await drain(sub) if m.value == "e")
        await sub.ack([m.position for m in first], cumulative=False)

        went = await sub.seek(cut)
        assert isinstance(went, Position)
        assert went < later.position  # the aborted entry
        assert values(await drain(sub)) == ["e", "f"]
        assert await engine.seek("t", "s", first[0].publish_time) == first[0].position
        assert values(await drain(sub)) == ["a", "b", "c", "d", "e", "f"]
        assert await sub.seek(later.publish_time + timedelta(days=1)) == "latest"
        assert await drain(sub) == []

        fetched = await engine.fetch("t", cut)
        assert [e.value for e in fetched.entries if e.kind == "data"] == ["aborted", "e", "f"]
        assert [a.txn for a in fetched.aborted] == [str(txn.txn_id)]
        past = await engine.fetch("t", datetime.now(UTC) + timedelta(days=1))
        assert past.entries == []
        assert (await engine.fetch("t", past.next)).entries == []

        with pytest.raises(InvalidArgumentError, match="time zone"):
            await sub.seek(datetime(2026, 11, 27, 4, 0))  # naive: ambiguous
