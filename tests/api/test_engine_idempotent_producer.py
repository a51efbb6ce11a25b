"""Idempotent producers: a resent batch is recognised and appends nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import drain, make_topics, values

from txnstream.api import Engine, InvalidArgumentError, OutgoingMessage


def batch(*items: str) -> list[OutgoingMessage]:
    return [OutgoingMessage(item) for item in items]


async def test_duplicate_batch_returns_original_positions_and_appends_nothing(
    engine: Engine,
) -> None:
    await make_topics(engine, "t")
    first = await engine.produce("t", batch("a", "b"), producer="p1", sequence=0)
    assert first.duplicate is False
    assert len(first.positions) == 2
    before = await engine.stats("t")

    again = await engine.produce("t", batch("a", "b"), producer="p1", sequence=0)

    assert again.duplicate is True
    assert again.positions == first.positions
    assert await engine.stats("t") == before
    assert values(await drain(await engine.subscribe("t", "s"))) == ["a", "b"]


async def test_batch_at_or_below_the_last_sequence_is_a_duplicate(engine: Engine) -> None:
    await make_topics(engine, "t")
    await engine.produce("t", batch("a", "b", "c"), producer="p1", sequence=0)  # seqs 0..2
    entries = (await engine.stats("t"))["entries"]
    for sequence in (1, 2):
        result = await engine.produce("t", batch("x"), producer="p1", sequence=sequence)
        assert result.duplicate is True
    assert (await engine.stats("t"))["entries"] == entries


async def test_sequence_gap_is_accepted(engine: Engine) -> None:
    await make_topics(engine, "t")
    await engine.produce("t", batch("a"), producer="p1", sequence=0)
    gap = await engine.produce("t", batch("b"), producer="p1", sequence=10)
    assert gap.duplicate is False
    assert len(gap.positions) == 1
    below = await engine.produce("t", batch("c"), producer="p1", sequence=5)
    assert below.duplicate is True
    nxt = await engine.produce("t", batch("d"), producer="p1", sequence=11)
    assert nxt.duplicate is False
    assert values(await drain(await engine.subscribe("t", "s"))) == ["a", "b", "d"]


async def test_producers_and_topics_have_separate_sequences(engine: Engine) -> None:
    await make_topics(engine, "t", "u")
    await engine.produce("t", batch("t-p1"), producer="p1", sequence=0)
    other_producer = await engine.produce("t", batch("t-p2"), producer="p2", sequence=0)
    other_topic = await engine.produce("u", batch("u-p1"), producer="p1", sequence=0)
    assert other_producer.duplicate is False
    assert other_topic.duplicate is False
    assert values(await drain(await engine.subscribe("t", "s"))) == ["t-p1", "t-p2"]
    assert values(await drain(await engine.subscribe("u", "s"))) == ["u-p1"]


async def test_duplicate_detection_survives_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir) as engine:
        await make_topics(engine, "t")
        first = await engine.produce("t", batch("a", "b"), producer="p1", sequence=7)
    async with Engine.open(data_dir) as engine:
        before = await engine.stats("t")
        again = await engine.produce("t", batch("a", "b"), producer="p1", sequence=7)
        assert again.duplicate is True
        assert again.positions == first.positions
        assert await engine.stats("t") == before
        fresh = await engine.produce("t", batch("c"), producer="p1", sequence=9)
        assert fresh.duplicate is False


async def test_transactional_idempotent_batch_is_deduplicated(engine: Engine) -> None:
    await make_topics(engine, "t")
    txn = await engine.begin()
    first = await engine.produce("t", batch("a"), txn=txn.id, producer="p1", sequence=0)
    again = await engine.produce("t", batch("a"), txn=txn.id, producer="p1", sequence=0)
    assert again.duplicate is True
    assert again.positions == first.positions
    await txn.commit()
    assert values(await drain(await engine.subscribe("t", "s"))) == ["a"]


@pytest.mark.parametrize(
    ("producer", "sequence"),
    [("p1", None), (None, 0), ("p1", -1), ("p1", 1.5), ("p1", True), ("", 0), ("x" * 201, 0)],
)
async def test_bad_producer_arguments_are_rejected(
    engine: Engine, producer: str | None, sequence: int | None
) -> None:
    await make_topics(engine, "t")
    with pytest.raises(InvalidArgumentError):
        await engine.produce("t", batch("a"), producer=producer, sequence=sequence)
    assert (await engine.stats("t"))["entries"] == 0
