"""Idempotent producers: a resent batch is recognised and appends nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import drain, make_topics, values, wait_until

from txnstream.api import Engine, EngineConfig, InvalidArgumentError, OutgoingMessage


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


async def test_a_producer_idle_past_its_expiry_is_forgotten_and_starts_over(
    data_dir: Path,
) -> None:
    """Kafka's producer.id.expiration.ms: the maintenance pass forgets a producer whose last
    batch is older than ``producer_expiry`` (in memory and in the store, so a restart does
    not bring it back); its next batch is a new producer's. One still producing stays."""
    config = EngineConfig(producer_expiry=0.5)
    async with Engine.open(data_dir, config) as engine:
        await make_topics(engine, "t")
        await engine.produce("t", batch("a", "b"), producer="idle", sequence=0)
        await engine.produce("t", batch("c"), producer="busy", sequence=0)
        sequence = 1

        async def idle_forgotten() -> bool:
            nonlocal sequence  # "busy" keeps producing meanwhile
            await engine.produce("t", batch("d"), producer="busy", sequence=sequence)
            sequence += 1
            return engine.last_sequence("t", "idle") is None

        await wait_until(idle_forgotten, 30, "the idle producer's expiry", interval=0.1)
        assert engine.last_sequence("t", "busy") == sequence - 1
        again = await engine.produce("t", batch("a", "b"), producer="idle", sequence=0)
        assert again.duplicate is False  # no longer known: stored as a new producer's
        entries = (await engine.stats("t"))["entries"]
    async with Engine.open(data_dir, EngineConfig()) as engine:  # the default: a day
        assert engine.last_sequence("t", "idle") == 1  # the new producer's, durable
        assert engine.last_sequence("t", "busy") == sequence - 1
        resent = await engine.produce("t", batch("a", "b"), producer="idle", sequence=0)
        assert resent.duplicate is True
        assert (await engine.stats("t"))["entries"] == entries


async def test_an_expired_producer_stays_forgotten_after_a_restart(data_dir: Path) -> None:
    async with Engine.open(data_dir, EngineConfig(producer_expiry=0.2)) as engine:
        await make_topics(engine, "t")
        await engine.produce("t", batch("a"), producer="p", sequence=0)

        async def forgotten() -> bool:
            return engine.last_sequence("t", "p") is None

        await wait_until(forgotten, 30, "the producer's expiry", interval=0.05)
    async with Engine.open(data_dir, EngineConfig()) as engine:
        assert engine.last_sequence("t", "p") is None
        again = await engine.produce("t", batch("a"), producer="p", sequence=0)
        assert again.duplicate is False


@pytest.mark.parametrize("expiry", [0, -1.0])
def test_a_producer_expiry_must_be_positive(expiry: float) -> None:
    with pytest.raises(ValueError, match="producer_expiry must be positive"):
        EngineConfig(producer_expiry=expiry)
