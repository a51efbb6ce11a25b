"""Recovery reads on the PostgreSQL store, prefetched: a standby taking over loads every
topic, and each per-topic read is a round trip. ``prefetch_recovery`` reads every topic's
ledgers, open ledgers' totals, snapshots and producers in a few queries; each per-topic
read then answers from memory once, with exactly what the database would say."""

from __future__ import annotations

from typing import Any

import pytest

from txnstream.api import Engine, EngineConfig, OutgoingMessage
from txnstream.ledger._pg_store import PgStore

pytestmark = pytest.mark.timeout(90)

TOPICS = 6


async def _reads(store: PgStore, topic_ids: list[int]) -> dict[str, Any]:
    """Every per-topic read the recovery makes, for every topic."""
    answers: dict[str, Any] = {}
    for topic_id in topic_ids:
        ledgers = await store.ledger_rows(topic_id)
        answers[f"{topic_id} ledgers"] = ledgers
        for row in ledgers:
            if row[2] is None:  # open: its totals are counted
                answers[f"{topic_id} totals {row[0]}"] = await store.ledger_totals(topic_id, row[0])
        answers[f"{topic_id} snapshots"] = await store.snapshot_rows(topic_id)
        answers[f"{topic_id} counters"] = await store.snapshot_counters(topic_id)
        answers[f"{topic_id} producers"] = sorted(await store.producer_rows(topic_id))
    return answers


async def test_prefetched_recovery_reads_equal_the_databases_in_a_few_queries(
    pg_url: str,
) -> None:
    async with Engine.open(pg_url, EngineConfig(ledger_max_entries=4)) as engine:
        for i in range(TOPICS):
            await engine.create_topic(f"t{i}")
            if i == 0:
                continue  # one topic with nothing: empty answers, not the database's
            await engine.send_many(f"t{i}", [f"m{j}" for j in range(3 * i)])  # sealed ledgers
            await engine.produce(f"t{i}", [OutgoingMessage("x")], producer=f"p{i}", sequence=0)
            if i % 2:
                await engine.take_snapshot(f"t{i}")
        store = engine._rt.store
        assert isinstance(store, PgStore)
        topic_ids = [int(row[0]) for row in await store.topic_rows()]
        expected = await _reads(store, topic_ids)
        assert any(" totals " in key for key in expected)  # the current ledgers are open
        assert any(value for key, value in expected.items() if key.endswith("snapshots"))

        queries: list[str] = []
        read = store.read

        async def counting(query: str, params: Any = ()) -> list[Any]:
            queries.append(query)
            return await read(query, params)

        store.read = counting  # type: ignore[method-assign]
        await store.prefetch_recovery()
        prefetch_queries = len(queries)
        assert prefetch_queries <= 6
        assert await _reads(store, topic_ids) == expected
        assert len(queries) == prefetch_queries  # every answer came from memory
        assert await _reads(store, topic_ids) == expected  # once: then the database again
        assert len(queries) > prefetch_queries
        await store.end_recovery()
