"""Transactions: InitProducerId, AddPartitionsToTxn, EndTxn, AddOffsetsToTxn, TxnOffsetCommit."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
)

from txnstream.api import (
    EngineError,
)

from ._base import BrokerBase, valid_group
from ._codes import ErrorCode, code_of
from ._producers import TxnProducer
from ._session import may, principal


class TxnApi(BrokerBase):
    """The transaction APIs (a part of the broker); one Kafka transaction is one engine
    transaction begun with the same transactional id, its epoch the engine's (see
    :mod:`._producers`)."""

    async def init_producer_id(self, request: Any, version: int) -> Any:
        def answer(error: ErrorCode, producer_id: int = -1, epoch: int = -1) -> Any:
            return InitProducerIdResponse(
                throttle_time_ms=0, error_code=error, producer_id=producer_id, producer_epoch=epoch
            )

        transactional_id = request.transactional_id
        if transactional_id is None:
            return answer(ErrorCode.NONE, self.producers.new_id(), 0)
        timeout_ms = request.transaction_timeout_ms
        max_timeout = self.engine.config.max_txn_timeout
        if timeout_ms <= 0 or timeout_ms / 1000 > max_timeout:
            return answer(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        who = principal()
        producer_id = self.producers.transactional_producer_id(transactional_id, who)
        # v3 (KIP-360): a producer that had an abortable error asks to bump its own epoch,
        # naming its producer id and epoch (-1: a fresh start, as before v3).
        expected_id = request.producer_id if version >= 3 else -1
        expected_epoch = request.producer_epoch if version >= 3 else -1
        lock = self.producers.lock(transactional_id, who)
        async with lock:
            current = self._current(transactional_id)
            if isinstance(current, ErrorCode):
                return answer(current)
            if expected_id >= 0:
                if expected_id != producer_id:
                    return answer(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
                if current is not None and expected_epoch != current.epoch:
                    return answer(ErrorCode.INVALID_PRODUCER_EPOCH)  # an older instance
            # (a bump of an id the engine forgot, after an expiry, goes past the
            # client's epoch: librdkafka requires its next epoch to be newer)
            at_least = expected_epoch + 1 if current is None and expected_epoch >= 0 else 0
            try:
                # fences (aborts) the previous epoch's open transaction, durably
                durable = await self.engine.bump_producer_epoch(
                    transactional_id, at_least=at_least, principal=who
                )
            except EngineError as exc:
                return answer(self._coordinator_code(exc))
            producer = TxnProducer(transactional_id, producer_id, durable, timeout_ms, lock, who)
            self.producers.put(producer)
            return answer(ErrorCode.NONE, producer_id, producer.epoch)

    def _coordinator_code(self, exc: EngineError) -> ErrorCode:
        """A transaction coordinator request's error code: a store that cannot write
        now (recovering, full) is a coordinator not available, which every client
        retries."""
        code = self._code_of(exc, coordinator=True)
        return (
            ErrorCode.COORDINATOR_NOT_AVAILABLE if code is ErrorCode.KAFKA_STORAGE_ERROR else code
        )

    def _current(self, transactional_id: str) -> TxnProducer | ErrorCode | None:
        """The transactional id's producer as the engine knows it now (None: no epoch,
        never initialised or expired): the cached one while it goes with the engine's
        epoch, else rebuilt from the engine (see :mod:`._producers`)."""
        who = principal()
        try:
            durable = self.engine.producer_epoch(transactional_id, principal=who)
            cached = self.producers.get(transactional_id, who)
            if durable is None:
                if cached is not None:
                    self.producers.drop(transactional_id, who)
                return None
            if cached is not None and cached.durable is durable:
                return cached
            txn = self.engine.producer_transaction(transactional_id, principal=who)
        except EngineError as exc:
            return self._coordinator_code(exc)
        producer = TxnProducer(
            transactional_id,
            self.producers.transactional_producer_id(transactional_id, who),
            durable,
            # (the InitProducerId's timeout is not durable: the transaction begun again
            # for a producer rebuilt before it wrote anything gets the default one)
            round(self.engine.config.default_txn_timeout * 1000),
            self.producers.lock(transactional_id, who),
            who,
            txn,
            resumed=True,
        )
        self.producers.put(producer)
        return producer

    def _txn_producer(
        self, transactional_id: str, producer_id: int, epoch: int
    ) -> TxnProducer | ErrorCode:
        producer = self._current(transactional_id)
        if isinstance(producer, ErrorCode):
            return producer
        if producer is None or producer.producer_id != producer_id:
            # an id the engine does not know (expired, or never initialised), as Kafka
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer.epoch != epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH  # a zombie: a newer epoch fenced it
        return producer

    async def add_partitions_to_txn(self, request: Any, version: int) -> Any:
        result = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
        partition_result = result.AddPartitionsToTxnPartitionResult
        producer = self._txn_producer(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
        )
        codes: dict[tuple[str, int], ErrorCode] = {}
        if isinstance(producer, ErrorCode):
            for topic in request.v3_and_below_topics:
                for index in topic.partitions:
                    codes[topic.name, index] = producer
        else:
            async with producer.lock:
                codes = await self._add_partitions(producer, request.v3_and_below_topics)
        by_topic: dict[str, list[Any]] = {}
        for (name, index), code in codes.items():
            by_topic.setdefault(name, []).append(
                partition_result(partition_index=index, partition_error_code=code)
            )
        return AddPartitionsToTxnResponse(
            throttle_time_ms=0,
            results_by_topic_v3_and_below=[
                result(name=name, results_by_partition=parts) for name, parts in by_topic.items()
            ],
        )

    async def _add_partitions(
        self, producer: TxnProducer, topics: Any
    ) -> dict[tuple[str, int], ErrorCode]:
        codes: dict[tuple[str, int], ErrorCode] = {}
        targets: set[str] = set()
        known = set(await self.engine.list_topics())
        for topic in topics:
            for index in topic.partitions:
                target = self._partition(topic.name, index)
                if not may("produce", topic.name):
                    codes[topic.name, index] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif target is None or target not in known:
                    codes[topic.name, index] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    codes[topic.name, index] = ErrorCode.NONE
                    targets.add(target)
        if any(code is not ErrorCode.NONE for code in codes.values()):
            # all or nothing, as Kafka: the others are not added
            return {
                k: ErrorCode.OPERATION_NOT_ATTEMPTED if c is ErrorCode.NONE else c
                for k, c in codes.items()
            }
        error = await self.ensure_txn(producer)
        if error is not ErrorCode.NONE:
            return dict.fromkeys(codes, error)
        producer.topics.update(targets)  # the engine topics (a partition's, for one)
        return codes

    async def ensure_txn(self, producer: TxnProducer) -> ErrorCode:
        """Begin the producer's engine transaction if it is in none (under its lock)."""
        if producer.txn is not None:
            return ErrorCode.NONE
        try:
            producer.txn = await self.engine.begin(
                timeout=producer.timeout_ms / 1000,
                transactional_id=producer.transactional_id,
                label=f"kafka:{producer.transactional_id}",
                principal=producer.principal,
            )
        except EngineError as exc:
            return code_of(exc)
        producer.topics = set()
        return ErrorCode.NONE

    async def end_txn(self, request: Any, version: int) -> Any:
        producer = self._txn_producer(
            request.transactional_id, request.producer_id, request.producer_epoch
        )
        if isinstance(producer, ErrorCode):
            return EndTxnResponse(throttle_time_ms=0, error_code=producer)
        async with producer.lock:
            error = await self._end(producer, commit=request.committed)
        return EndTxnResponse(throttle_time_ms=0, error_code=error)

    async def _end(self, producer: TxnProducer, *, commit: bool) -> ErrorCode:
        """Commit or abort the producer's transaction (none: nothing to do; after a
        failover that is also a commit the previous active decided already)."""
        txn, producer.txn, producer.topics = producer.txn, None, set()
        producer.resumed = False
        if txn is None:
            return ErrorCode.NONE
        try:
            if commit:
                await txn.commit()
            else:
                await txn.abort()
        except EngineError as exc:
            if not commit:
                return ErrorCode.NONE  # it ended anyway (timed out, fenced): aborted
            return self._code_of(exc, coordinator=True)
        return ErrorCode.NONE

    async def add_offsets_to_txn(self, request: Any, version: int) -> Any:
        producer = self._txn_producer(
            request.transactional_id, request.producer_id, request.producer_epoch
        )
        if isinstance(producer, ErrorCode):
            error = producer
        elif not valid_group(request.group_id):
            error = ErrorCode.INVALID_GROUP_ID
        else:
            async with producer.lock:
                error = await self.ensure_txn(producer)
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=error)

    async def txn_offset_commit(self, request: Any, version: int) -> Any:
        topic_type = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
        partition_type = topic_type.TxnOffsetCommitResponsePartition
        producer = self._txn_producer(
            request.transactional_id, request.producer_id, request.producer_epoch
        )
        codes: dict[str, list[tuple[int, ErrorCode]]] = {}
        for topic in request.topics:
            for part in topic.partitions:
                if isinstance(producer, ErrorCode):
                    error = producer
                elif producer.txn is None:
                    error = ErrorCode.INVALID_TXN_STATE
                else:
                    error = await self._commit_offset(
                        request.group_id,
                        topic.name,
                        part.partition_index,
                        part.committed_offset,
                        producer.txn.txn_id,
                    )
                codes.setdefault(topic.name, []).append((part.partition_index, error))
        if any(code is ErrorCode.NONE for parts in codes.values() for _, code in parts):
            # acknowledged once durable: a failover resumes the transaction with them
            try:
                await self.engine.sync()
            except EngineError as exc:
                failed = self._code_of(exc, coordinator=True)
                codes = {
                    name: [(i, failed if c is ErrorCode.NONE else c) for i, c in parts]
                    for name, parts in codes.items()
                }
        topics = [
            topic_type(
                name=name,
                partitions=[partition_type(partition_index=i, error_code=c) for i, c in parts],
            )
            for name, parts in codes.items()
        ]
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=topics)
