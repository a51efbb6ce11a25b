"""Fixtures for the Kafka listener tests: ``kafka``, an engine with a listener on a free
loopback port (see ``kafka_support``).

The synchronous clients (confluent-kafka, kafka-python) run in worker threads
(``asyncio.to_thread``) so the listener keeps its event loop; every client is configured
with short timeouts and every wait is bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kafka_support import Kafka

from txnstream.api import Engine, EngineConfig
from txnstream.api.kafka import KafkaListener


@pytest.fixture
async def kafka(tmp_path: Path) -> AsyncIterator[Kafka]:
    async with Engine.open(tmp_path / "data", EngineConfig()) as engine:
        listener = KafkaListener(engine, "127.0.0.1", 0)
        await listener.start()
        try:
            yield Kafka(engine, listener)
        finally:
            await listener.stop()
