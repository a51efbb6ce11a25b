"""CreateTopics and DeleteTopics from an admin client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka_clients import TIMEOUT
from kafka_support import Kafka

pytestmark = pytest.mark.timeout(60)


def _outcomes(futures: dict[str, Any]) -> dict[str, Any]:
    """Each future's Kafka error code (None: done). Read with ``exception()``, not by
    catching what ``result()`` raises: a caught exception's traceback holds this frame,
    so the futures and the admin client would live on in a reference cycle, and its
    librdkafka thread would log reconnects to the stopped listener until exit."""
    out = {}
    for name, future in futures.items():
        error = future.exception(TIMEOUT)
        out[name] = None if error is None else error.args[0].code()
    return out


async def test_an_admin_client_creates_and_deletes_topics(kafka: Kafka) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    await kafka.engine.create_topic("exists")

    def create_then_delete() -> tuple[dict[str, Any], dict[str, Any]]:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        created = _outcomes(
            admin.create_topics(
                [
                    NewTopic("fresh", 1, 1),
                    NewTopic("exists", 1, 1),
                    NewTopic("wide", 3, 1),
                    NewTopic("too-wide", 5000, 1),
                    NewTopic("bad name!", 1, 1),
                ],
                operation_timeout=10,
            )
        )
        deleted = _outcomes(admin.delete_topics(["exists", "missing"], operation_timeout=10))
        return created, deleted

    created, deleted = await asyncio.to_thread(create_then_delete)
    assert created == {
        "fresh": None,
        "exists": KafkaError.TOPIC_ALREADY_EXISTS,
        "wide": None,  # a partitioned topic (see test_partitions)
        "too-wide": KafkaError.INVALID_PARTITIONS,
        "bad name!": KafkaError.TOPIC_EXCEPTION,
    }
    assert deleted == {"exists": None, "missing": KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert await kafka.engine.list_topics() == ["fresh", *(f"wide-partition-{i}" for i in range(3))]
