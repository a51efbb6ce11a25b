"""Real Kafka clients (confluent-kafka, kafka-python, aiokafka) against the listener."""

from __future__ import annotations

import pytest
from kafka_clients import CLIENTS, consume, produce_transactions
from kafka_support import Kafka

pytestmark = pytest.mark.timeout(90)


@pytest.mark.parametrize("client", CLIENTS)
async def test_read_committed_sees_exactly_the_committed_transactions_in_order(
    kafka: Kafka, client: str
) -> None:
    for topic in ("orders", "audit"):
        await kafka.engine.create_topic(topic)
    plan = [
        (True, [("orders", b"o1"), ("audit", b"a1"), ("orders", b"o2")]),
        (False, [("orders", b"x1"), ("audit", b"x2")]),
        (True, [("audit", b"a2")]),
        (False, [("orders", b"x3")]),
        (True, [("orders", b"o3"), ("audit", b"a3")]),
    ]
    await produce_transactions(client, kafka.bootstrap, f"{client}-txn", plan)
    # the aborted data is stored: read_uncommitted sees it, in order
    assert await consume(client, kafka.bootstrap, "orders", "read_uncommitted", b"o3") == [
        b"o1",
        b"o2",
        b"x1",
        b"x3",
        b"o3",
    ]
    assert await consume(client, kafka.bootstrap, "orders", "read_committed", b"o3") == [
        b"o1",
        b"o2",
        b"o3",
    ]
    assert await consume(client, kafka.bootstrap, "audit", "read_committed", b"a3") == [
        b"a1",
        b"a2",
        b"a3",
    ]
    # one engine transaction per Kafka transaction: 3 committed, 2 aborted
    ended = await kafka.engine.transactions()
    assert sorted(t.state for t in ended) == ["aborted"] * 2 + ["committed"] * 3
