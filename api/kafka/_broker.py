"""The Kafka APIs this listener serves, each over the public engine.

One broker, this server, leads every partition and coordinates every transactional id
and group; on a PostgreSQL store served by several servers, the active does, and a
standby's listener names the active and refuses the rest (``_standby``, where the node
ids are explained). A txnstream topic is a Kafka topic with one partition (0); its offsets are the
engine's (:meth:`~txnstream.api.Engine.offsets`).

The :class:`Broker` is assembled from its parts: produce (``_produce``), offsets and
fetch (``_fetch``), transactions (``_transactions``) and consumer groups
(``_group_requests``, over the membership of ``_groups``), routed by the table of
served APIs (``_apis``); this module keeps authentication, metadata and topic
administration.

Every API answers errors in its own response's error fields (:func:`code_of` maps engine
errors once); an unexpected failure is logged by the server and closes the connection,
never a traceback on the wire.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from txnstream.api import (
    ConflictError,
    Engine,
    EngineError,
    EngineState,
)
from txnstream.api.support import validate_name

from ._address import format_address
from ._apis import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    API_VERSIONS,
    APIS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    END_TXN,
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
)
from ._codes import ErrorCode, code_of
from ._fetch import FetchApi
from ._group_requests import GroupApi
from ._groups import GroupCoordinator
from ._produce import ProduceApi
from ._producers import Producers
from ._session import SESSION, Authenticate, Session, may
from ._standby import Leader, leader_at, node_id_of, refusal, refused
from ._transactions import TxnApi

log = logging.getLogger("txnstream.kafka")

MAX_PARTITIONS = 1024
"""The engine's limit on a topic's partitions (``Engine.create_topic``)."""

_EXPIRY_CHECK = 60.0  # seconds between looks for idle transactional ids, at most
CLUSTER_ID = "txnstream"

Handler = Callable[[Any, int], Awaitable[Any]]
_PLAIN = "PLAIN"


PRE_AUTH_KEYS = frozenset({API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key})
"""What a connection may send before it authenticated."""


API_VERSIONS_KEY: int = API_VERSIONS.key


def api_versions_response(error: ErrorCode = ErrorCode.NONE) -> Any:
    """The ApiVersions answer: every served key with its version range."""
    keys = [
        API_VERSIONS.response.ApiVersion(
            api_key=key, min_version=api.min_version, max_version=api.max_version
        )
        for key, api in sorted(APIS.items())
    ]
    return API_VERSIONS.response(error_code=error, api_keys=keys, throttle_time_ms=0)


class Broker(ProduceApi, FetchApi, TxnApi, GroupApi):
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
        self.node_id = node_id_of(format_address(host, port))
        """This server's node id, for its whole life (see ``_standby``)."""
        self._standing_by = False  # what the last request saw: a new term starts clean
        self._drain = drain  # set at shutdown: long polls answer at once
        self.producers = Producers()
        self.groups = GroupCoordinator()
        self._handlers: dict[int, Handler] = {
            FETCH.key: self.fetch,
            LIST_OFFSETS.key: self.list_offsets,
            METADATA.key: self.metadata,
            FIND_COORDINATOR.key: self.find_coordinator,
            API_VERSIONS.key: self.api_versions,
            INIT_PRODUCER_ID.key: self.init_producer_id,
            ADD_PARTITIONS_TO_TXN.key: self.add_partitions_to_txn,
            END_TXN.key: self.end_txn,
            ADD_OFFSETS_TO_TXN.key: self.add_offsets_to_txn,
            TXN_OFFSET_COMMIT.key: self.txn_offset_commit,
            JOIN_GROUP.key: self.join_group,
            SYNC_GROUP.key: self.sync_group,
            HEARTBEAT.key: self.heartbeat,
            LEAVE_GROUP.key: self.leave_group,
            OFFSET_COMMIT.key: self.offset_commit,
            OFFSET_FETCH.key: self.offset_fetch,
            SASL_HANDSHAKE.key: self.sasl_handshake,
            SASL_AUTHENTICATE.key: self.sasl_authenticate,
            CREATE_TOPICS.key: self.create_topics,
            DELETE_TOPICS.key: self.delete_topics,
        }

    async def upkeep(self) -> None:
        """The broker's background work, until cancelled: expire group members whose
        session timed out, and forget idle transactional ids."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.groups.run(), name="kafka-groups")
            group.create_task(self._expire_transactional_ids(), name="kafka-producers")

    async def _expire_transactional_ids(self) -> None:
        expiry = self.engine.config.transactional_id_expiry
        while True:
            await asyncio.sleep(min(expiry / 10, _EXPIRY_CHECK))
            if self.engine.state is not EngineState.OPEN:
                continue  # (a standby's: the active expires them, in the store)
            try:
                expired = await self.engine.expire_producer_epochs(expiry)
                self._drop_forgotten_producers()
            except EngineError as exc:  # (it stepped down, or its store failed, meanwhile)
                log.info("could not expire transactional ids now: %s", exc)
                continue
            if expired:
                log.info("forgot %d transactional id(s) idle for %ss", expired, expiry)

    def _drop_forgotten_producers(self) -> None:
        """Drop the cached producers whose epoch the engine no longer has."""
        for producer in self.producers.cached():
            tid, who = producer.transactional_id, producer.principal
            if (
                self.engine.producer_epoch(tid, principal=who) is None
                and not producer.lock.locked()
            ):
                self.producers.drop(tid, who)
        self.producers.prune_locks()

    async def handle(
        self, api_key: int, request: Any, version: int, assigned: asyncio.Event
    ) -> Any:
        """The response to ``request`` (None: the request expects none). ``assigned`` is
        set once the connection's next request may start: a Produce sets it as soon as
        its records have offsets (so a connection's produce requests share flushes),
        every other request when it is answered."""
        if self.engine.state is EngineState.STANDBY:
            await self._stand_by()
            if refused(api_key, request):
                assigned.set()
                return refusal(api_key, request, version, self._leader() is not None)
        else:
            self._standing_by = False
        if api_key == PRODUCE.key:
            return await self.produce(request, version, assigned)
        try:
            return await self._handlers[api_key](request, version)
        finally:
            assigned.set()

    async def _stand_by(self) -> None:
        """This server is (or became) a standby: forget the producers and groups of its
        term as the active. Their state moved with the lease: a producer's epoch and
        transaction are the store's (the next active rebuilds them from it), and a
        group's members join again."""
        if self._standing_by:
            return
        self._standing_by = True
        self.producers.clear()
        await self.groups.reset()

    def _brokers(self, leader: Leader | None) -> list[Leader]:
        """The brokers Metadata lists: the leader, this server, and every other server
        sharing the store with a Kafka listener (``Engine.members``), each once.

        A Kafka client learns the cluster from Metadata and forgets any broker it does not
        list (librdkafka since 2.10, its bootstrap addresses included). Listing the
        standbys, as a Kafka cluster lists its followers, leaves a client someone to ask
        who leads once the active dies; listed alone, the dead active would be the only
        broker it knows, and it would wait minutes for its re-bootstrap timer."""
        found: dict[int, Leader] = {}
        if leader is not None:
            found[leader[0]] = leader
        found.setdefault(self.node_id, (self.node_id, self.host, self.port))
        for member in self.engine.members:
            if (peer := leader_at(member.kafka)) is not None:
                found.setdefault(peer[0], peer)
        return list(found.values())

    def _leader(self) -> Leader | None:
        """The broker that leads every partition now: this one, or on a standby the active
        as the lease row says (None: not known)."""
        if self.engine.state is EngineState.STANDBY:
            return leader_at(self.engine.active_kafka)
        return self.node_id, self.host, self.port

    # -- authentication and grants --------------------------------------------------

    async def sasl_handshake(self, request: Any, version: int) -> Any:
        if self.authenticate is None or request.mechanism != _PLAIN:
            SESSION.get().failed = True
            return SASL_HANDSHAKE.response(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                mechanisms=[] if self.authenticate is None else [_PLAIN],
            )
        return SASL_HANDSHAKE.response(error_code=ErrorCode.NONE, mechanisms=[_PLAIN])

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
                if found is not None and found.name == user:
                    identity = found
        if identity is None:
            session.failed = True
            log.info("Kafka SASL/PLAIN authentication failed")
            return SASL_AUTHENTICATE.response(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                error_message="authentication failed: unknown user or wrong token",
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
        session.identity = identity
        return SASL_AUTHENTICATE.response(
            error_code=ErrorCode.NONE, error_message=None, auth_bytes=b"", session_lifetime_ms=0
        )

    # -- cluster ------------------------------------------------------------------

    async def api_versions(self, request: Any, version: int) -> Any:
        return api_versions_response()

    async def metadata(self, request: Any, version: int) -> Any:
        """Topics with their partitions: a partitioned topic's N (partition i is topic
        ``{topic}-partition-{i}``, listed under the parent only), one for any other; the
        leader of each is the active (``_leader``); the brokers are every server sharing
        the store (``_brokers``)."""
        identity = SESSION.get(Session()).identity
        leader = self._leader()
        counts, plain = await self._catalog()
        names = sorted(n for n in counts if identity is None or identity.sees(n))
        asked = (
            names
            if request.topics is None or (version == 0 and not request.topics)
            else [t.name for t in request.topics]
        )
        known = set(names)
        if request.topics:  # a partition named itself: a one-partition topic
            known.update(
                n
                for n in asked
                if n not in counts and n in plain and (identity is None or identity.sees(n))
            )
        node = -1 if leader is None else leader[0]
        topics = []
        for name in asked:
            if name in known:
                partitions = [
                    METADATA.response.MetadataResponseTopic.MetadataResponsePartition(
                        # no active known (a standby, between two actives): retry later
                        error_code=ErrorCode.LEADER_NOT_AVAILABLE if leader is None else 0,
                        partition_index=index,
                        leader_id=node,
                        leader_epoch=0,  # (constant: see _standby)
                        replica_nodes=[] if leader is None else [node],
                        isr_nodes=[] if leader is None else [node],
                        offline_replicas=[],
                    )
                    for index in range(counts.get(name, 1))
                ]
                error = ErrorCode.NONE
            elif identity is not None and not identity.sees(name):
                error, partitions = ErrorCode.TOPIC_AUTHORIZATION_FAILED, []
            else:
                error, partitions = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []
            topics.append(
                METADATA.response.MetadataResponseTopic(
                    error_code=error,
                    name=name,
                    is_internal=False,
                    partitions=partitions,
                )
            )
        brokers = [
            METADATA.response.MetadataResponseBroker(node_id=node, host=host, port=port, rack=None)
            for node, host, port in self._brokers(leader)
        ]
        return METADATA.response(
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=CLUSTER_ID,
            controller_id=node,
            topics=topics,
        )

    async def _catalog(self) -> tuple[dict[str, int], set[str]]:
        """``({topic: partitions}, every engine topic)``: the topics Metadata lists (the
        partitions of a partitioned topic under their parent only; asked for by name, a
        partition is a one-partition topic of its own). A standby reads them from the
        store (empty when it cannot now: the client asks again)."""
        if self.engine.state is EngineState.STANDBY:
            try:
                names, partitioned = await self.engine.standby_catalog()
            except EngineError as exc:
                log.info("Metadata on a standby without the store's topics: %s", exc)
                return {}, set()
            parts = {f"{p}-partition-{i}" for p, n in partitioned.items() for i in range(n)}
        else:
            names = await self.engine.list_topics()
            partitioned = await self.engine.partitioned_topics()
            parts = {n for n in names if self.engine.parent_of(n) is not None}
        counts = {name: 1 for name in names if name not in parts}
        counts.update(partitioned)
        return counts, set(names)

    async def create_topics(self, request: Any, version: int) -> Any:
        """Topics: ``num_partitions`` 1 or -1 (the default) a plain topic, N > 1 a
        partitioned one (N topics ``{name}-partition-{i}``); ``replication_factor`` 1 or
        -1; topic configs are not supported. Needs ``manage`` on the topic."""
        results = []
        for topic in request.topics:
            error, message = ErrorCode.NONE, None
            if not may("manage", topic.name):
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not -1 <= topic.num_partitions <= MAX_PARTITIONS or topic.num_partitions == 0:
                error = ErrorCode.INVALID_PARTITIONS
                message = f"num_partitions must be -1 or in 1..{MAX_PARTITIONS}"
            elif topic.assignments:
                error = ErrorCode.INVALID_REQUEST
                message = "one broker: replica assignments are not taken"
            elif topic.replication_factor not in (-1, 1):
                error = ErrorCode.INVALID_REPLICATION_FACTOR
                message = "one broker: the replication factor is 1"
            elif topic.configs:
                error = ErrorCode.INVALID_CONFIG
                message = "topic configs are not supported (use the HTTP API's policies)"
            else:
                try:
                    validate_name(topic.name)
                    count = topic.num_partitions if topic.num_partitions > 1 else None
                    if not request.validate_only and not await self.engine.create_topic(
                        topic.name, partitions=count
                    ):
                        error = ErrorCode.TOPIC_ALREADY_EXISTS
                except ConflictError as exc:  # it exists, partitioned otherwise
                    error, message = ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)
                except EngineError as exc:
                    error, message = code_of(exc), str(exc)
                    if error is ErrorCode.INVALID_REQUEST:
                        error = ErrorCode.INVALID_TOPIC_EXCEPTION
            results.append(
                CREATE_TOPICS.response.CreatableTopicResult(
                    name=topic.name, error_code=error, error_message=message
                )
            )
        return CREATE_TOPICS.response(throttle_time_ms=0, topics=results)

    async def delete_topics(self, request: Any, version: int) -> Any:
        """Delete topics (``manage``), their subscriptions (groups' offsets) with them."""
        results = []
        for name in request.topic_names:
            error = ErrorCode.NONE
            if not may("manage", name):
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                try:
                    await self.engine.delete_topic(name)
                except EngineError as exc:
                    error = code_of(exc)
            results.append(DELETE_TOPICS.response.DeletableTopicResult(name=name, error_code=error))
        return DELETE_TOPICS.response(throttle_time_ms=0, responses=results)

    async def find_coordinator(self, request: Any, version: int) -> Any:
        """The active coordinates every group and transactional id."""
        leader = self._leader()
        if leader is None:
            return FIND_COORDINATOR.response(
                throttle_time_ms=0,
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                error_message="no active server is known yet",
                node_id=-1,
                host="",
                port=-1,
            )
        node, host, port = leader
        return FIND_COORDINATOR.response(
            throttle_time_ms=0, error_code=0, error_message=None, node_id=node, host=host, port=port
        )
