"""Helpers of the Kafka listener tests: an engine with its listener (:class:`Kafka`) and
raw protocol calls (:class:`KafkaWire`) for what clients never send."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

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


@asynccontextmanager
async def serving(path: Path, config: EngineConfig | None = None) -> AsyncIterator[Kafka]:
    """An engine on ``path`` with a Kafka listener on a free loopback port."""
    async with Engine.open(path, config or EngineConfig()) as engine:
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
        # (with the header: a flexible version's response header has tagged fields too)
        return response_type.decode(frame, version=version, header=True)

    async def closed(self, timeout: float = 5.0) -> bool:
        """True once the server closed this connection (EOF within ``timeout``)."""
        data = await asyncio.wait_for(self.reader.read(1), timeout)
        return data == b""

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


def fetch_request(topic: str, offset: int, *, committed: bool, max_wait_ms: int) -> FetchRequest:
    """A Fetch v11 request of partition 0 of ``topic`` from ``offset``."""
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=1 if committed else 0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchTopic.FetchPartition(
                        partition=0,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def record_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    """A record batch v2 of ``values`` (producer id -1: not idempotent)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 20,
    )
    for i, value in enumerate(values):
        builder.append(i, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_request(topic: str, records: bytes) -> ProduceRequest:
    """A Produce (acks=all) of ``records`` to partition 0 of ``topic``."""
    return ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=5000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)
                ],
            )
        ],
    )


def drop_refused(producer: Any) -> None:
    """Drop what a fenced (zombie) confluent-kafka producer still holds: its refused
    messages. Otherwise librdkafka keeps the producer, and its reconnects to a test's
    stopped listener, until the process ends (the log lines after the suite's summary)."""
    producer.purge()
    producer.flush(0)
