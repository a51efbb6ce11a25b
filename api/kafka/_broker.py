"""The Kafka APIs this listener serves, each over the public engine.

One broker (node 0) leads every partition and coordinates every transactional id and
group. A txnstream topic is a Kafka topic with one partition (0); its offsets are the
engine's (:meth:`~txnstream.api.Engine.offsets`).

Every API answers errors in its own response's error fields (:func:`code_of` maps engine
errors once); an unexpected failure is logged here and closes the connection, never a
traceback on the wire.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from txnstream.api import (
    Engine,
    EngineError,
    FetchResult,
    OutgoingMessage,
    Principal,
    TopicOffsets,
    TxnId,
    validate_name,
)

from ._codes import ErrorCode, code_of
from ._groups import GroupCoordinator
from ._producers import Producers, TxnProducer, next_epoch, producer_name
from ._records import RecordsError, build_batches, producer_id_of, read_batches

log = logging.getLogger("txnstream.kafka")

NODE_ID = 0
CLUSTER_ID = "txnstream"
_EARLIEST, _LATEST = -2, -1
_READ_COMMITTED = 1
_FETCH_ENTRIES = 5000  # the most entries one partition's fetch reads in one step
_MAX_WAIT_MS = 30_000  # a longer long poll is cut here (clients ask for ~0.1-1 s)
# Record sets decoded and built in Python cost ~10 us a record: past these sizes that
# runs in a worker thread, so that the loop is not held (it gets the GIL every 5 ms).
_THREAD_BYTES = 64 * 1024
_THREAD_ENTRIES = 500

Handler = Callable[[Any, int], Awaitable[Any]]
_PLAIN = "PLAIN"


class Identity(Protocol):
    """Who authenticated on a connection (the HTTP server's principals fit this)."""

    @property
    def principal(self) -> Principal: ...

    def may(self, actions: Iterable[str], topic: str) -> bool:
        """True if it may do any of ``actions`` on ``topic``."""
        ...

    def sees(self, topic: str) -> bool:
        """True if it has any grant on ``topic``."""
        ...


Authenticate = Callable[[str, str], Identity | None]
"""``(user, password)`` -> the principal (None: refused), for SASL/PLAIN."""


@dataclass(slots=True)
class Session:
    """One connection's authentication: who it is, and whether it failed (then the
    connection closes once that answer is written)."""

    identity: Identity | None = None
    failed: bool = False


SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar("kafka_session")
"""The connection's :class:`Session` (set by the connection's reader; its request tasks
inherit it)."""

PRE_AUTH_KEYS = frozenset(
    {ApiVersionsRequest.API_KEY, SaslHandshakeRequest.API_KEY, SaslAuthenticateRequest.API_KEY}
)
"""What a connection may send before it authenticated."""


@dataclass(frozen=True, slots=True)
class Api:
    """A served API: its request and response classes and the versions served."""

    request: Any
    response: Any
    min_version: int
    max_version: int


# Only non-flexible versions (librdkafka and the Python clients negotiate down to them).
APIS: dict[int, Api] = {
    api.request.API_KEY: api
    for api in (
        Api(ProduceRequest, ProduceResponse, 3, 8),
        Api(FetchRequest, FetchResponse, 4, 11),
        Api(ListOffsetsRequest, ListOffsetsResponse, 1, 5),
        Api(MetadataRequest, MetadataResponse, 0, 8),
        Api(FindCoordinatorRequest, FindCoordinatorResponse, 0, 2),
        Api(ApiVersionsRequest, ApiVersionsResponse, 0, 2),
        Api(InitProducerIdRequest, InitProducerIdResponse, 0, 1),
        Api(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 2),
        Api(EndTxnRequest, EndTxnResponse, 0, 2),
        Api(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 2),
        Api(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 2),
        Api(JoinGroupRequest, JoinGroupResponse, 0, 5),
        Api(SyncGroupRequest, SyncGroupResponse, 0, 3),
        Api(HeartbeatRequest, HeartbeatResponse, 0, 3),
        Api(LeaveGroupRequest, LeaveGroupResponse, 0, 3),
        Api(OffsetCommitRequest, OffsetCommitResponse, 2, 7),
        Api(OffsetFetchRequest, OffsetFetchResponse, 1, 5),
        Api(CreateTopicsRequest, CreateTopicsResponse, 2, 4),
        Api(DeleteTopicsRequest, DeleteTopicsResponse, 1, 3),
        # v1 only: v0 would exchange raw SASL tokens outside Kafka's framing
        Api(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1),
        Api(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 1),
    )
}
API_VERSIONS_KEY: int = ApiVersionsRequest.API_KEY


def api_versions_response(error: ErrorCode = ErrorCode.NONE) -> Any:
    """The ApiVersions answer: every served key with its version range."""
    keys = [
        ApiVersionsResponse.ApiVersion(
            api_key=key, min_version=api.min_version, max_version=api.max_version
        )
        for key, api in sorted(APIS.items())
    ]
    return ApiVersionsResponse(error_code=error, api_keys=keys, throttle_time_ms=0)


class Broker:
    """Answers decoded requests over ``engine`` (one per listener)."""

    def __init__(
        self,
        engine: Engine,
        host: str,
        port: int,
        drain: asyncio.Event,
        authenticate: Authenticate | None = None,
    ) -> None:
        self.engine = engine
        self.authenticate = authenticate
        """SASL/PLAIN is required when set; the grants then apply as over HTTP."""
        self.host = host
        self.port = port
        self._drain = drain  # set at shutdown: long polls answer at once
        self.producers = Producers()
        self.groups = GroupCoordinator()
        self._handlers: dict[int, Handler] = {
            FetchRequest.API_KEY: self.fetch,
            ListOffsetsRequest.API_KEY: self.list_offsets,
            MetadataRequest.API_KEY: self.metadata,
            FindCoordinatorRequest.API_KEY: self.find_coordinator,
            ApiVersionsRequest.API_KEY: self.api_versions,
            InitProducerIdRequest.API_KEY: self.init_producer_id,
            AddPartitionsToTxnRequest.API_KEY: self.add_partitions_to_txn,
            EndTxnRequest.API_KEY: self.end_txn,
            AddOffsetsToTxnRequest.API_KEY: self.add_offsets_to_txn,
            TxnOffsetCommitRequest.API_KEY: self.txn_offset_commit,
            JoinGroupRequest.API_KEY: self.join_group,
            SyncGroupRequest.API_KEY: self.sync_group,
            HeartbeatRequest.API_KEY: self.heartbeat,
            LeaveGroupRequest.API_KEY: self.leave_group,
            OffsetCommitRequest.API_KEY: self.offset_commit,
            OffsetFetchRequest.API_KEY: self.offset_fetch,
            SaslHandshakeRequest.API_KEY: self.sasl_handshake,
            SaslAuthenticateRequest.API_KEY: self.sasl_authenticate,
            CreateTopicsRequest.API_KEY: self.create_topics,
            DeleteTopicsRequest.API_KEY: self.delete_topics,
        }

    async def handle(
        self, api_key: int, request: Any, version: int, assigned: asyncio.Event
    ) -> Any:
        """The response to ``request`` (None: the request expects none). ``assigned`` is
        set once the connection's next request may start: a Produce sets it as soon as
        its records have offsets (so a connection's produce requests share flushes),
        every other request when it is answered."""
        if api_key == ProduceRequest.API_KEY:
            return await self.produce(request, version, assigned)
        try:
            return await self._handlers[api_key](request, version)
        finally:
            assigned.set()

    # -- authentication and grants --------------------------------------------------

    async def sasl_handshake(self, request: Any, version: int) -> Any:
        if self.authenticate is None or request.mechanism != _PLAIN:
            SESSION.get().failed = True
            return SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                mechanisms=[] if self.authenticate is None else [_PLAIN],
            )
        return SaslHandshakeResponse(error_code=ErrorCode.NONE, mechanisms=[_PLAIN])

    async def sasl_authenticate(self, request: Any, version: int) -> Any:
        """PLAIN (RFC 4616): ``authzid NUL user NUL password``; the user is the
        principal's name and the password its token."""
        session = SESSION.get()
        identity = None
        parts = bytes(request.auth_bytes or b"").split(b"\0")
        if self.authenticate is not None and len(parts) == 3:
            try:
                authzid, user, password = (part.decode() for part in parts)
            except UnicodeDecodeError:
                authzid = user = password = ""
            if authzid in ("", user) and user and password:
                found = await asyncio.to_thread(self.authenticate, user, password)
                if found is not None and found.principal.name == user:
                    identity = found
        if identity is None:
            session.failed = True
            log.info("Kafka SASL/PLAIN authentication failed")
            return SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                error_message="authentication failed: unknown user or wrong token",
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
        session.identity = identity
        return SaslAuthenticateResponse(
            error_code=ErrorCode.NONE, error_message=None, auth_bytes=b"", session_lifetime_ms=0
        )

    @staticmethod
    def _may(action: str, topic: str) -> bool:
        """Whether the connection's principal may ``action`` on ``topic`` (always,
        without authentication)."""
        identity = SESSION.get(Session()).identity
        return identity is None or identity.may((action,), topic)

    @staticmethod
    def _principal() -> Principal | None:
        identity = SESSION.get(Session()).identity
        return None if identity is None else identity.principal

    # -- cluster ------------------------------------------------------------------

    async def api_versions(self, request: Any, version: int) -> Any:
        return api_versions_response()

    async def metadata(self, request: Any, version: int) -> Any:
        identity = SESSION.get(Session()).identity
        names = [n for n in await self.engine.list_topics() if identity is None or identity.sees(n)]
        known = set(names)
        asked = (
            names
            if request.topics is None or (version == 0 and not request.topics)
            else [t.name for t in request.topics]
        )
        topics = []
        for name in asked:
            if name in known:
                partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(
                    error_code=0,
                    partition_index=0,
                    leader_id=NODE_ID,
                    leader_epoch=0,
                    replica_nodes=[NODE_ID],
                    isr_nodes=[NODE_ID],
                    offline_replicas=[],
                )
                error, partitions = ErrorCode.NONE, [partition]
            elif identity is not None and not identity.sees(name):
                error, partitions = ErrorCode.TOPIC_AUTHORIZATION_FAILED, []
            else:
                error, partitions = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []
            topics.append(
                MetadataResponse.MetadataResponseTopic(
                    error_code=error,
                    name=name,
                    is_internal=False,
                    partitions=partitions,
                )
            )
        broker = MetadataResponse.MetadataResponseBroker(
            node_id=NODE_ID, host=self.host, port=self.port, rack=None
        )
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=[broker],
            cluster_id=CLUSTER_ID,
            controller_id=NODE_ID,
            topics=topics,
        )

    async def create_topics(self, request: Any, version: int) -> Any:
        """One-partition topics (``num_partitions`` and ``replication_factor`` 1 or -1,
        the default); topic configs are not supported. Needs ``manage`` on the topic."""
        results = []
        for topic in request.topics:
            error, message = ErrorCode.NONE, None
            if not self._may("manage", topic.name):
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic.num_partitions not in (-1, 1) or topic.assignments:
                error = ErrorCode.INVALID_PARTITIONS
                message = "a topic has one partition (partitioned topics are not served yet)"
            elif topic.replication_factor not in (-1, 1):
                error = ErrorCode.INVALID_REPLICATION_FACTOR
                message = "one broker: the replication factor is 1"
            elif topic.configs:
                error = ErrorCode.INVALID_CONFIG
                message = "topic configs are not supported (use the HTTP API's policies)"
            else:
                try:
                    validate_name(topic.name)
                    if not request.validate_only and not await self.engine.create_topic(topic.name):
                        error = ErrorCode.TOPIC_ALREADY_EXISTS
                except EngineError as exc:
                    error, message = code_of(exc), str(exc)
                    if error is ErrorCode.INVALID_REQUEST:
                        error = ErrorCode.INVALID_TOPIC_EXCEPTION
            results.append(
                CreateTopicsResponse.CreatableTopicResult(
                    name=topic.name, error_code=error, error_message=message
                )
            )
        return CreateTopicsResponse(throttle_time_ms=0, topics=results)

    async def delete_topics(self, request: Any, version: int) -> Any:
        """Delete topics (``manage``), their subscriptions (groups' offsets) with them."""
        results = []
        for name in request.topic_names:
            error = ErrorCode.NONE
            if not self._may("manage", name):
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                try:
                    await self.engine.delete_topic(name)
                except EngineError as exc:
                    error = code_of(exc)
            results.append(DeleteTopicsResponse.DeletableTopicResult(name=name, error_code=error))
        return DeleteTopicsResponse(throttle_time_ms=0, responses=results)

    async def find_coordinator(self, request: Any, version: int) -> Any:
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            error_code=0,
            error_message=None,
            node_id=NODE_ID,
            host=self.host,
            port=self.port,
        )

    # -- produce ------------------------------------------------------------------

    async def produce(self, request: Any, version: int, assigned: asyncio.Event) -> Any:
        """Store every partition's batches; set ``assigned`` once they all have their
        offsets (the connection's next request may start then), answer once durable."""
        txn_producer = None
        if request.transactional_id is not None:
            txn_producer = self.producers.get(request.transactional_id, self._principal())
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
        results: dict[str, list[Any]] = {}
        for name, index, (error, base, durable) in stored:
            for future in durable:
                try:
                    await future
                except EngineError as exc:
                    error, base = code_of(exc), -1
            start = self._offsets(name).log_start if error is ErrorCode.NONE else -1
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
        txn_producer: TxnProducer | None,
    ) -> tuple[ErrorCode, int, list[asyncio.Future[None]]]:
        """Start storing one partition's batches: (error, base offset of the first
        batch, the futures of their durability)."""
        if not self._may("produce", topic):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, []
        if partition != 0:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, []
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
                if (
                    txn_producer is None
                    or txn_producer.producer_id != batch.producer_id
                    or txn_producer.epoch != batch.producer_epoch
                ):
                    return ErrorCode.INVALID_PRODUCER_EPOCH, -1, durable
                if txn_producer.txn is None or topic not in txn_producer.topics:
                    return ErrorCode.INVALID_TXN_STATE, -1, durable
                txn = txn_producer.txn.txn_id
            elif transactional_id is not None:
                return ErrorCode.INVALID_REQUEST, -1, durable  # a transactional id's plain batch
            error, first, done = await self._store(topic, batch.messages, batch, txn)
            if error is not ErrorCode.NONE:
                return error, -1, durable
            if done is not None:
                durable.append(done)
            if base < 0:
                base = first
        return ErrorCode.NONE, base, durable

    async def _store(
        self, topic: str, messages: list[OutgoingMessage], batch: Any, txn: TxnId | None
    ) -> tuple[ErrorCode, int, asyncio.Future[None] | None]:
        producer = sequence = None
        try:
            if batch.producer_id >= 0 and batch.base_sequence >= 0:
                producer = producer_name(batch.producer_id, batch.producer_epoch)
                sequence = batch.base_sequence
                last = self.engine.last_sequence(topic, producer)
                expected = 0 if last is None else last + 1
                if sequence > expected:
                    return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, None
            result, done = await self.engine.produce_start(
                topic,
                messages,
                txn=txn,
                producer=producer,
                sequence=sequence,
                principal=self._principal(),
            )
        except EngineError as exc:
            return code_of(exc), -1, None
        if not result.positions:  # an older duplicate: stored, its offsets forgotten
            return ErrorCode.DUPLICATE_SEQUENCE_NUMBER, -1, None
        if txn is not None and done is not None:
            # As the engine's pipelined txn.send: the commit makes these durable before
            # it decides (a crash before then aborts the transaction), so the answer need
            # not wait for their flush; its outcome is the commit's.
            done.add_done_callback(_observed)
            done = None
        return ErrorCode.NONE, self.engine.offset_of(topic, result.positions[0]), done

    # -- offsets and fetch ----------------------------------------------------------

    def _offsets(self, topic: str) -> TopicOffsets:
        return self.engine.offsets(topic)

    async def list_offsets(self, request: Any, version: int) -> Any:
        committed = version >= 2 and request.isolation_level == _READ_COMMITTED
        topics = []
        for topic in request.topics:
            partitions = []
            for part in topic.partitions:
                error, offset = ErrorCode.NONE, -1
                try:
                    offsets = self._offsets(topic.name)
                except EngineError as exc:
                    error = code_of(exc)
                else:
                    if not self._may("consume", topic.name):
                        error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    elif part.partition_index != 0:
                        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif part.timestamp == _EARLIEST:
                        offset = offsets.log_start
                    elif part.timestamp == _LATEST:
                        offset = offsets.last_stable if committed else offsets.high_watermark
                    else:  # no time index: "no offset at or after that time"
                        offset = -1
                partitions.append(
                    ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                        partition_index=part.partition_index,
                        error_code=error,
                        timestamp=-1,
                        offset=offset,
                        leader_epoch=0,
                    )
                )
            topics.append(
                ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions)
            )
        return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    async def fetch(self, request: Any, version: int) -> Any:
        committed = request.isolation_level == _READ_COMMITTED
        wanted = [
            (topic.topic, part.partition, part.fetch_offset, part.partition_max_bytes)
            for topic in request.topics
            for part in topic.partitions
        ]
        deadline = time.monotonic() + min(max(request.max_wait_ms, 0), _MAX_WAIT_MS) / 1000
        while True:
            # the change events first: an append after the reads below still wakes us
            events = [self._watch(name) for name, *_ in wanted]
            answers, size = await self._fetch_all(wanted, committed, request.max_bytes)
            remaining = deadline - time.monotonic()
            if size >= max(request.min_bytes, 1) or remaining <= 0 or self._drain.is_set():
                break
            waits = [e for e in events if e is not None]
            if not waits:
                break
            await _first_of([*waits, self._drain], remaining)
        topics: dict[str, list[Any]] = {}
        for name, partition in answers:
            topics.setdefault(name, []).append(partition)
        return FetchResponse(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,  # no fetch sessions: every fetch names its partitions
            responses=[
                FetchResponse.FetchableTopicResponse(topic=name, partitions=parts)
                for name, parts in topics.items()
            ],
        )

    def _watch(self, topic: str) -> asyncio.Event | None:
        try:
            return self.engine.watch(topic)
        except EngineError:
            return None

    async def _fetch_all(
        self, wanted: list[tuple[str, int, int, int]], committed: bool, max_bytes: int
    ) -> tuple[list[tuple[str, Any]], int]:
        answers = []
        total = 0
        for name, partition, offset, partition_max in wanted:
            budget = min(partition_max, max_bytes - total)
            answer, size = await self._fetch_partition(
                name, partition, offset, committed, budget if total == 0 else max(budget, 0)
            )
            total += size
            answers.append((name, answer))
        return answers, total

    async def _fetch_partition(
        self, topic: str, partition: int, offset: int, committed: bool, budget: int
    ) -> tuple[Any, int]:
        part = FetchResponse.FetchableTopicResponse.PartitionData
        error, records = ErrorCode.NONE, b""
        aborted: list[Any] = []
        offsets = TopicOffsets(-1, -1, -1)
        try:
            if not self._may("consume", topic):
                raise _PartitionError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            if partition != 0:
                raise _PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            offsets = self._offsets(topic)
            limit = offsets.last_stable if committed else offsets.high_watermark
            if offset < offsets.log_start or offset > offsets.high_watermark:
                raise _PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE)
            if offset < limit and budget > 0:
                records, aborted = await self._read(topic, offset, committed, budget)
        except _PartitionError as exc:
            error = exc.code
        except EngineError as exc:
            error = code_of(exc)
        answer = part(
            partition_index=partition,
            error_code=error,
            high_watermark=offsets.high_watermark,
            last_stable_offset=offsets.last_stable,
            log_start_offset=offsets.log_start,
            aborted_transactions=aborted if committed else None,
            preferred_read_replica=-1,
            records=records,
        )
        return answer, len(records)

    async def _read(
        self, topic: str, offset: int, committed: bool, budget: int
    ) -> tuple[bytes, list[Any]]:
        engine = self.engine
        position = engine.position_at(topic, offset)
        if position is None:
            raise _PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE)
        result: FetchResult = await engine.fetch(
            topic,
            position,
            max=_FETCH_ENTRIES,
            isolation="read_committed" if committed else "read_uncommitted",
            max_bytes=budget,
        )
        if not result.entries:
            return b"", []
        entries = result.entries
        first = engine.offset_of(topic, entries[0].position)
        if engine.offset_of(topic, entries[-1].position) == first + len(entries) - 1:
            offsets: Sequence[int] = range(first, first + len(entries))  # contiguous, as always
        else:  # (a range cannot skip an entry; should one ever, map each)
            offsets = [engine.offset_of(topic, entry.position) for entry in entries]
        if len(entries) > _THREAD_ENTRIES:
            records = await asyncio.to_thread(build_batches, entries, offsets)
        else:
            records = build_batches(entries, offsets)
        aborted_type = FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction
        aborted = [
            aborted_type(
                producer_id=producer_id_of(a.txn),
                first_offset=engine.offset_of(topic, a.first_position),
            )
            for a in result.aborted
        ]
        return records, aborted

    # -- transactions ---------------------------------------------------------------

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
        producer = self.producers.entry(transactional_id, self._principal())
        async with producer.lock:
            if producer.txn is not None:  # the previous epoch's open transaction
                await self._end(producer, commit=False)
            producer.epoch = next_epoch(producer.epoch)
            producer.timeout_ms = timeout_ms
            return answer(ErrorCode.NONE, producer.producer_id, producer.epoch)

    def _txn_producer(
        self, transactional_id: str, producer_id: int, epoch: int
    ) -> TxnProducer | ErrorCode:
        producer = self.producers.get(transactional_id, self._principal())
        if producer is None or producer.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer.epoch != epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
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
        known = set(await self.engine.list_topics())
        for topic in topics:
            for index in topic.partitions:
                if not self._may("produce", topic.name):
                    codes[topic.name, index] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif topic.name not in known or index != 0:
                    codes[topic.name, index] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    codes[topic.name, index] = ErrorCode.NONE
        if any(code is not ErrorCode.NONE for code in codes.values()):
            # all or nothing, as Kafka: the others are not added
            return {
                k: ErrorCode.OPERATION_NOT_ATTEMPTED if c is ErrorCode.NONE else c
                for k, c in codes.items()
            }
        error = await self._ensure_txn(producer)
        if error is not ErrorCode.NONE:
            return dict.fromkeys(codes, error)
        producer.topics.update(name for name, _ in codes)
        return codes

    async def _ensure_txn(self, producer: TxnProducer) -> ErrorCode:
        """Begin the producer's engine transaction if none is open (under its lock)."""
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
        """Commit or abort the producer's open transaction (none: nothing to do)."""
        txn, producer.txn, producer.topics = producer.txn, None, set()
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
            return code_of(exc)
        return ErrorCode.NONE

    async def add_offsets_to_txn(self, request: Any, version: int) -> Any:
        producer = self._txn_producer(
            request.transactional_id, request.producer_id, request.producer_epoch
        )
        if isinstance(producer, ErrorCode):
            error = producer
        elif not _valid_group(request.group_id):
            error = ErrorCode.INVALID_GROUP_ID
        else:
            async with producer.lock:
                error = await self._ensure_txn(producer)
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=error)

    async def txn_offset_commit(self, request: Any, version: int) -> Any:
        topic_type = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
        partition_type = topic_type.TxnOffsetCommitResponsePartition
        producer = self._txn_producer(
            request.transactional_id, request.producer_id, request.producer_epoch
        )
        topics = []
        for topic in request.topics:
            partitions = []
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
                partitions.append(
                    partition_type(partition_index=part.partition_index, error_code=error)
                )
            topics.append(topic_type(name=topic.name, partitions=partitions))
        return TxnOffsetCommitResponse(throttle_time_ms=0, topics=topics)

    # -- consumer groups --------------------------------------------------------------

    async def join_group(self, request: Any, version: int) -> Any:
        client_id = request.header.client_id if request.header is not None else None
        rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else -1
        result = await self.groups.join(
            request.group_id,
            request.member_id,
            client_id or "",
            request.protocol_type,
            [(p.name, bytes(p.metadata)) for p in request.protocols],
            request.session_timeout_ms,
            rebalance_timeout if rebalance_timeout > 0 else request.session_timeout_ms,
        )
        member_type = JoinGroupResponse.JoinGroupResponseMember
        return JoinGroupResponse(
            throttle_time_ms=0,
            error_code=result.error,
            generation_id=result.generation,
            protocol_name=result.protocol or "",
            leader=result.leader,
            member_id=result.member_id,
            members=[
                member_type(member_id=m, group_instance_id=None, metadata=meta)
                for m, meta in result.members
            ],
        )

    async def sync_group(self, request: Any, version: int) -> Any:
        error, assignment = await self.groups.sync(
            request.group_id,
            request.member_id,
            request.generation_id,
            {a.member_id: bytes(a.assignment) for a in request.assignments},
        )
        return SyncGroupResponse(throttle_time_ms=0, error_code=error, assignment=assignment)

    async def heartbeat(self, request: Any, version: int) -> Any:
        error = self.groups.heartbeat(request.group_id, request.member_id, request.generation_id)
        return HeartbeatResponse(throttle_time_ms=0, error_code=error)

    async def leave_group(self, request: Any, version: int) -> Any:
        if version < 3:
            error = self.groups.leave(request.group_id, request.member_id)
            return LeaveGroupResponse(throttle_time_ms=0, error_code=error)
        member_type = LeaveGroupResponse.MemberResponse
        members = [
            member_type(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                error_code=self.groups.leave(request.group_id, m.member_id),
            )
            for m in request.members
        ]
        return LeaveGroupResponse(throttle_time_ms=0, error_code=0, members=members)

    async def offset_commit(self, request: Any, version: int) -> Any:
        topic_type = OffsetCommitResponse.OffsetCommitResponseTopic
        partition_type = topic_type.OffsetCommitResponsePartition
        group_error = ErrorCode.NONE
        generation = request.generation_id_or_member_epoch
        if generation >= 0:  # a member's commit (-1: a consumer outside the group protocol)
            current = self.groups.generation_of(request.group_id, request.member_id)
            if current is None:
                group_error = ErrorCode.UNKNOWN_MEMBER_ID
            elif current != generation:
                group_error = ErrorCode.ILLEGAL_GENERATION
        topics = []
        for topic in request.topics:
            partitions = []
            for part in topic.partitions:
                error = group_error
                if error is ErrorCode.NONE:
                    error = await self._commit_offset(
                        request.group_id, topic.name, part.partition_index, part.committed_offset
                    )
                partitions.append(
                    partition_type(partition_index=part.partition_index, error_code=error)
                )
            topics.append(topic_type(name=topic.name, partitions=partitions))
        return OffsetCommitResponse(throttle_time_ms=0, topics=topics)

    async def _commit_offset(
        self, group: str, topic: str, partition: int, offset: int, txn: TxnId | None = None
    ) -> ErrorCode:
        """Commit ``group``'s offset of ``topic``: its subscription's cursor."""
        if not _valid_group(group):
            return ErrorCode.INVALID_GROUP_ID
        if not self._may("consume", topic):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if partition != 0:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            await self.engine.commit_offset(topic, group, offset, txn=txn)
        except EngineError as exc:
            return code_of(exc)
        return ErrorCode.NONE

    async def offset_fetch(self, request: Any, version: int) -> Any:
        topic_type = OffsetFetchResponse.OffsetFetchResponseTopic
        partition_type = topic_type.OffsetFetchResponsePartition
        group = request.group_id
        if request.topics is None:  # every topic the group committed on
            names = await self.engine.list_topics()
            asked = [
                (n, [0])
                for n in names
                if self._may("consume", n) and self._committed(group, n) is not None
            ]
        else:
            asked = [(t.name, list(t.partition_indexes)) for t in request.topics]
        topics = []
        for name, indexes in asked:
            partitions = []
            for index in indexes:
                error, offset = ErrorCode.NONE, -1
                if not _valid_group(group):
                    error = ErrorCode.INVALID_GROUP_ID
                elif not self._may("consume", name):
                    error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif index != 0:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    committed = self._committed(group, name)
                    offset = -1 if committed is None else committed
                partitions.append(
                    partition_type(
                        partition_index=index,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=error,
                    )
                )
            topics.append(topic_type(name=name, partitions=partitions))
        return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=0)

    def _committed(self, group: str, topic: str) -> int | None:
        if not _valid_group(group):
            return None
        try:
            return self.engine.committed_offset(topic, group)
        except EngineError:
            return None


def _valid_group(group: str | None) -> bool:
    """A group id is a subscription name (its offsets are that subscription's cursor)."""
    try:
        validate_name(group, "group")
    except ValueError:
        return False
    return True


def _observed(future: asyncio.Future[None]) -> None:
    """Retrieve a flush future's outcome nobody awaits (the commit reports it)."""
    if not future.cancelled():
        future.exception()


class _PartitionError(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


async def _first_of(events: list[asyncio.Event], timeout: float) -> None:
    """Wait until one of ``events`` is set or ``timeout`` seconds pass."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
