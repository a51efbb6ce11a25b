"""Fixtures for the Kafka listener tests: an engine with a listener on a free loopback
port (``kafka``), and raw protocol calls (``KafkaWire``) for what clients never send.

The synchronous clients (confluent-kafka, kafka-python) run in worker threads
(``asyncio.to_thread``) so the listener keeps its event loop; every client is configured
with short timeouts and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from txnstream.api import Engine, EngineConfig
from txnstream.api.kafka import KafkaListener


@dataclass
class Kafka:
    """An engine and its Kafka listener."""

    engine: Engine
    listener: KafkaListener

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.listener.port}"


@pytest.fixture
async def kafka(tmp_path: Path) -> AsyncIterator[Kafka]:
    async with Engine.open(tmp_path / "data", EngineConfig()) as engine:
        listener = KafkaListener(engine, "127.0.0.1", 0)
        await listener.start()
        try:
            yield Kafka(engine, listener)
        finally:
            await listener.stop()


class KafkaWire:
    """One raw connection: send kafka-python request objects, read framed responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._correlation = 0

    @classmethod
    async def open(cls, port: int) -> KafkaWire:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send_raw(self, frame: bytes) -> None:
        self.writer.write(frame)
        await self.writer.drain()

    async def read_frame(self, timeout: float = 5.0) -> bytes:
        """The next response frame (without its size); IncompleteReadError when closed."""
        head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        (size,) = struct.unpack(">i", head)
        return await asyncio.wait_for(self.reader.readexactly(size), timeout)

    async def call(self, request: Any, response_type: Any, version: int) -> Any:
        """Send ``request`` at ``version``; decode the answer as ``response_type``."""
        self._correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation, client_id="wire-test")
        await self.send_raw(bytes(request.encode(header=True, framed=True)))
        frame = await self.read_frame()
        (correlation,) = struct.unpack_from(">i", frame)
        assert correlation == self._correlation
        return response_type.decode(frame[4:], version=version)

    async def closed(self, timeout: float = 5.0) -> bool:
        """True once the server closed this connection (EOF within ``timeout``)."""
        data = await asyncio.wait_for(self.reader.read(1), timeout)
        return data == b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def poll_until(
    step: Callable[[], Any], done: Callable[[], bool], timeout: float, what: str
) -> None:
    """Call ``step()`` until ``done()``; fail after ``timeout`` s (for client poll loops)."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        step()
