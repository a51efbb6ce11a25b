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
from kafka_support import Kafka, serving


@pytest.fixture
async def kafka(tmp_path: Path) -> AsyncIterator[Kafka]:
    async with serving(tmp_path / "data") as kafka:
        yield kafka
