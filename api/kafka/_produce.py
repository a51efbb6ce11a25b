"""Produce: record batches v2 into the engine, idempotent and transactional, pipelined."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kafka.protocol.producer import (
    ProduceResponse,
)

from txnstream.api import (
    EngineError,
    OutgoingMessage,
    TxnId,
)

from ._codes import ErrorCode
from ._producers import TxnProducer, producer_name
from ._records import RecordsError, read_batches
from ._session import may, principal
from ._transactions import TxnApi

log = logging.getLogger("txnstream.kafka")

# Decoding a produced record set into messages takes ~2 us a record (the codec is
# compiled; the messages are Python objects): past this size (~2,000 small records, ~5 ms)
# that runs in a worker thread, so that the loop is not held (it gets the GIL every 5 ms).
_THREAD_BYTES = 256 * 1024


class ProduceApi(TxnApi):
    """Produce (a part of the broker; a transactional producer's batches go into its
    transaction, see :class:`TxnApi`)."""

    async def produce(self, request: Any, version: int, assigned: asyncio.Event) -> Any:
        """Store every partition's batches; set ``assigned`` once they all have their
        offsets (the connection's next request may start then), answer once durable."""
        txn_producer: TxnProducer | ErrorCode | None = None
        if request.transactional_id is not None:
            txn_producer = self._current(request.transactional_id)
        stored = []
        try:
            for topic in request.topic_data:
                for data in topic.partition_data:
                    outcome = await self._produce_partition(
                        topic.name, data.index, data.records, request.transactional_id, txn_producer
                    )
                    stored.append((topic.name, data.index, outcome))
        finally:
            assigned.set()
        if isinstance(txn_producer, TxnProducer) and any(
            error is ErrorCode.NONE for _, _, (error, _, _) in stored
        ):
            # A transaction's records are acknowledged once durable (they were pipelined,
            # so this one flush carries them with whatever else is queued): a failover
            # or a restart then resumes the transaction with every record its producer
            # was told was stored, and its commit never loses one.
            try:
                await self.engine.sync()
            except EngineError as exc:
                failed = self._code_of(exc)
                stored = [
                    (name, index, (failed, -1, d) if e is ErrorCode.NONE else (e, b, d))
                    for name, index, (e, b, d) in stored
                ]
        results: dict[str, list[Any]] = {}
        for name, index, (error, base, durable) in stored:
            for future in durable:
                try:
                    await future
                except EngineError as exc:
                    error, base = self._code_of(exc), -1
            target = self._partition(name, index)
            start = -1
            if error is ErrorCode.NONE and target is not None:
                start = self._offsets(target).log_start
            results.setdefault(name, []).append(
                ProduceResponse.TopicProduceResponse.PartitionProduceResponse(
                    index=index,
                    error_code=error,
                    base_offset=base,
                    log_append_time_ms=-1,
                    log_start_offset=start,
                    record_errors=[],
                    error_message=None if error is ErrorCode.NONE else error.name,
                )
            )
        if request.acks == 0:
            return None
        return ProduceResponse(
            responses=[
                ProduceResponse.TopicProduceResponse(name=name, partition_responses=parts)
                for name, parts in results.items()
            ],
            throttle_time_ms=0,
        )

    async def _produce_partition(
        self,
        topic: str,
        partition: int,
        records: Any,
        transactional_id: str | None,
        txn_producer: TxnProducer | ErrorCode | None,
    ) -> tuple[ErrorCode, int, list[asyncio.Future[None]]]:
        """Start storing one partition's batches: (error, base offset of the first
        batch, the futures of their durability)."""
        if not may("produce", topic):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, []
        target = self._partition(topic, partition)
        if target is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, []
        topic = target  # (a partitioned topic's partition i: its topic, from here on)
        try:
            if records is not None and len(records) > _THREAD_BYTES:
                batches = await asyncio.to_thread(read_batches, records)
            else:
                batches = read_batches(records)
        except RecordsError as exc:
            log.info("refused a produced record set for %s: %s", topic, exc)
            return ErrorCode.CORRUPT_MESSAGE, -1, []
        base = -1
        durable: list[asyncio.Future[None]] = []
        for batch in batches:
            txn = None
            if batch.transactional:
                if isinstance(txn_producer, ErrorCode):
                    return txn_producer, -1, durable  # (the engine cannot answer now)
                if txn_producer is None:
                    # The transactional id is not known (it expired, or was never
                    # initialised): as a Kafka partition leader without the producer's
                    # state, UNKNOWN_PRODUCER_ID. Clients take it as abortable (KIP-360):
                    # abort, get an epoch, go on; nothing of the transaction was stored.
                    return ErrorCode.UNKNOWN_PRODUCER_ID, -1, durable
                if (
                    txn_producer.producer_id != batch.producer_id
                    or txn_producer.epoch != batch.producer_epoch
                ):
                    return ErrorCode.INVALID_PRODUCER_EPOCH, -1, durable
                if txn_producer.resumed:
                    # rebuilt after a failover or restart: the partitions it added are
                    # not known, and a transaction it began but did not write to yet
                    # (nothing of it durable) begins again here
                    async with txn_producer.lock:
                        error = await self.ensure_txn(txn_producer)
                    if error is not ErrorCode.NONE:
                        return error, -1, durable
                    txn_producer.topics.add(topic)
                if txn_producer.txn is None or topic not in txn_producer.topics:
                    return ErrorCode.INVALID_TXN_STATE, -1, durable
                txn = txn_producer.txn.txn_id
            elif transactional_id is not None:
                return ErrorCode.INVALID_REQUEST, -1, durable  # a transactional id's plain batch
            session = txn_producer.session if isinstance(txn_producer, TxnProducer) else None
            error, first, done = await self._store(topic, batch.messages, batch, txn, session)
            if error is not ErrorCode.NONE:
                return error, -1, durable
            if done is not None:
                durable.append(done)
            if base < 0:
                base = first
        return ErrorCode.NONE, base, durable

    async def _store(
        self,
        topic: str,
        messages: list[OutgoingMessage],
        batch: Any,
        txn: TxnId | None,
        session: str | None = None,
    ) -> tuple[ErrorCode, int, asyncio.Future[None] | None]:
        """Store one batch (``session``: its transactional producer's InitProducerId,
        under whose name the sequence numbers are kept)."""
        producer = sequence = None
        try:
            if batch.producer_id >= 0 and batch.base_sequence >= 0:
                producer = producer_name(batch.producer_id, batch.producer_epoch, session)
                sequence = batch.base_sequence
                last = self.engine.last_sequence(topic, producer)
                if last is None and sequence > 0:
                    # No state (it expired, EngineConfig.producer_expiry, or never was):
                    # as Kafka (KIP-360), the client then starts over with a new id.
                    return ErrorCode.UNKNOWN_PRODUCER_ID, -1, None
                expected = 0 if last is None else last + 1
                if sequence > expected:
                    return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, None
            result, done = await self.engine.produce_start(
                topic,
                messages,
                txn=txn,
                producer=producer,
                sequence=sequence,
                principal=principal(),
            )
        except EngineError as exc:
            return self._code_of(exc), -1, None
        if not result.positions:  # an older duplicate: stored, its offsets forgotten
            return ErrorCode.DUPLICATE_SEQUENCE_NUMBER, -1, None
        # In a transaction ``done`` is None: the records are pipelined as txn.send's, and
        # :meth:`produce` makes them durable with one flush for the whole request before
        # it answers.
        return ErrorCode.NONE, self.engine.offset_of(topic, result.positions[0]), done
