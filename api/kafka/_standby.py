"""Several servers on one PostgreSQL store: who leads, and what a standby answers.

One server is the active (it holds the store's lease); the others are standbys, whose
engines serve nothing. A Kafka client given several bootstrap addresses may reach any of
them, and must end up at the active, as Kafka clients do when a partition's leader moves
to another broker: the standby's listener is up and answers as a Kafka broker that leads
nothing would.

- ApiVersions and SASL as always.
- Metadata names the active (its advertised Kafka address, from the lease row) as the
  leader of every partition and the controller, and lists as brokers every server
  sharing the store (``Engine.members``: the active and the standbys, as a Kafka
  cluster lists its followers, so a client always knows someone to ask who leads);
  FindCoordinator names the active as the coordinator of every group and transactional
  id. The topics are the store's (read from it: the standby's engine holds none).
- InitProducerId without a transactional id (an idempotent producer's) as the active
  would: a random producer id.
- Every other request gets the retriable error each client takes as "refresh metadata
  and go to the leader": NOT_LEADER_OR_FOLLOWER for partition requests (Produce, Fetch,
  ListOffsets), NOT_COORDINATOR for coordinator requests (transactions, groups, offsets),
  NOT_CONTROLLER for CreateTopics and DeleteTopics. While no active is known (it died
  and its lease has not expired, or nobody took it yet), LEADER_NOT_AVAILABLE and
  COORDINATOR_NOT_AVAILABLE: the same retries, after a backoff.

**Node ids.** Each server's node id is a hash of its advertised Kafka address, so it is
the same for the server's whole life (and across its restarts at that address), and two
servers at different addresses have different ids (a 31-bit hash: a collision between a
few servers is improbable, and harmless for librdkafka, which then moves the id's
connection to the new address). When the lease moves, the partitions' leader id changes
to the new active's, exactly what a Kafka client sees when leadership moves between
brokers: it connects to the new leader and leaves the dead one. (One node id shared by
every server would make a client keep its connection to the id and only re-resolve the
address, which librdkafka does on a nodename change but some clients do not.) The
partitions' leader epoch stays 0: this listener does not serve OffsetForLeaderEpoch, and
a rising epoch would make consumers validate their positions with it.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ._address import parse_address
from ._apis import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    CREATE_TOPICS,
    DELETE_TOPICS,
    END_TXN,
    FETCH,
    HEARTBEAT,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    PRODUCE,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
)
from ._codes import ErrorCode

Leader = tuple[int, str, int]
"""The active's node id, host and port."""


def node_id_of(address: str) -> int:
    """The node id of the server that advertises ``address`` (``HOST:PORT``): stable for
    that address, in 0..2**31-1 (see the module docstring)."""
    digest = hashlib.blake2b(address.encode(), digest_size=4).digest()
    return int.from_bytes(digest) & 0x7FFF_FFFF


def leader_at(address: str | None) -> Leader | None:
    """The active as the lease row names it (None: not known, or no Kafka listener)."""
    if address is None:
        return None
    try:
        host, port = parse_address(address, "the active's Kafka address")
    except ValueError:
        return None  # (written by a server: cannot happen, but never a traceback)
    return node_id_of(address), host, port


def refused(api_key: int, request: Any) -> bool:
    """Whether a standby refuses ``request``: every request in :data:`REFUSED` but an
    InitProducerId without a transactional id, which any broker answers (an idempotent
    producer's id is random, nothing to look up; librdkafka asks any broker it is
    connected to, and would ask a standby that refused it again and again)."""
    if api_key == INIT_PRODUCER_ID.key:
        return request.transactional_id is not None
    return api_key in REFUSED


def refusal(api_key: int, request: Any, version: int, known: bool) -> Any:
    """A standby's answer to a request only the active serves (``known``: whether an
    active is known; None for a Produce with acks=0, which gets no answer)."""
    partition = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.LEADER_NOT_AVAILABLE
    coordinator = ErrorCode.NOT_COORDINATOR if known else ErrorCode.COORDINATOR_NOT_AVAILABLE
    if api_key == PRODUCE.key:
        return None if request.acks == 0 else _produce(request, partition)
    if api_key == FETCH.key:
        return _fetch(request, partition)
    if api_key == LIST_OFFSETS.key:
        topic_type = LIST_OFFSETS.response.ListOffsetsTopicResponse
        return _by_partition(
            LIST_OFFSETS.response,
            topic_type,
            topic_type.ListOffsetsPartitionResponse,
            request,
            partition,
            timestamp=-1,
            offset=-1,
            leader_epoch=-1,
        )
    if api_key == INIT_PRODUCER_ID.key:
        return INIT_PRODUCER_ID.response(
            throttle_time_ms=0, error_code=coordinator, producer_id=-1, producer_epoch=-1
        )
    if api_key == ADD_PARTITIONS_TO_TXN.key:
        return _add_partitions(request, coordinator)
    if api_key == END_TXN.key:
        return END_TXN.response(throttle_time_ms=0, error_code=coordinator)
    if api_key == ADD_OFFSETS_TO_TXN.key:
        return ADD_OFFSETS_TO_TXN.response(throttle_time_ms=0, error_code=coordinator)
    if api_key == TXN_OFFSET_COMMIT.key:
        txn_topic = TXN_OFFSET_COMMIT.response.TxnOffsetCommitResponseTopic
        txn_partition = txn_topic.TxnOffsetCommitResponsePartition
        return _by_partition(
            TXN_OFFSET_COMMIT.response, txn_topic, txn_partition, request, coordinator
        )
    if api_key == JOIN_GROUP.key:
        return JOIN_GROUP.response(
            throttle_time_ms=0,
            error_code=coordinator,
            generation_id=-1,
            protocol_name="",
            leader="",
            member_id=request.member_id or "",
            members=[],
        )
    if api_key == SYNC_GROUP.key:
        return SYNC_GROUP.response(throttle_time_ms=0, error_code=coordinator, assignment=b"")
    if api_key == HEARTBEAT.key:
        return HEARTBEAT.response(throttle_time_ms=0, error_code=coordinator)
    if api_key == LEAVE_GROUP.key:
        return LEAVE_GROUP.response(throttle_time_ms=0, error_code=coordinator, members=[])
    if api_key == OFFSET_COMMIT.key:
        topic = OFFSET_COMMIT.response.OffsetCommitResponseTopic
        partition_type = topic.OffsetCommitResponsePartition
        return _by_partition(OFFSET_COMMIT.response, topic, partition_type, request, coordinator)
    if api_key == OFFSET_FETCH.key:
        return _offset_fetch(request, coordinator)
    if api_key == CREATE_TOPICS.key:
        result = CREATE_TOPICS.response.CreatableTopicResult
        return CREATE_TOPICS.response(
            throttle_time_ms=0,
            topics=[
                result(name=t.name, error_code=ErrorCode.NOT_CONTROLLER, error_message=_NOT_ACTIVE)
                for t in request.topics
            ],
        )
    if api_key == DELETE_TOPICS.key:
        deleted = DELETE_TOPICS.response.DeletableTopicResult
        return DELETE_TOPICS.response(
            throttle_time_ms=0,
            responses=[
                deleted(name=name, error_code=ErrorCode.NOT_CONTROLLER)
                for name in request.topic_names
            ],
        )
    raise KeyError(api_key)  # (every key the broker routes here is above)


REFUSED = frozenset(
    {
        PRODUCE.key,
        FETCH.key,
        LIST_OFFSETS.key,
        INIT_PRODUCER_ID.key,
        ADD_PARTITIONS_TO_TXN.key,
        END_TXN.key,
        ADD_OFFSETS_TO_TXN.key,
        TXN_OFFSET_COMMIT.key,
        JOIN_GROUP.key,
        SYNC_GROUP.key,
        HEARTBEAT.key,
        LEAVE_GROUP.key,
        OFFSET_COMMIT.key,
        OFFSET_FETCH.key,
        CREATE_TOPICS.key,
        DELETE_TOPICS.key,
    }
)
"""The requests only the active serves (a standby answers them with :func:`refusal`)."""

_NOT_ACTIVE = "this server is a standby: the active serves this (see Metadata)"


def _produce(request: Any, error: ErrorCode) -> Any:
    topic_type = PRODUCE.response.TopicProduceResponse
    partition_type = topic_type.PartitionProduceResponse
    return PRODUCE.response(
        responses=[
            topic_type(
                name=topic.name,
                partition_responses=[
                    partition_type(
                        index=data.index,
                        error_code=error,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        record_errors=[],
                        error_message=_NOT_ACTIVE,
                    )
                    for data in topic.partition_data
                ],
            )
            for topic in request.topic_data
        ],
        throttle_time_ms=0,
    )


def _fetch(request: Any, error: ErrorCode) -> Any:
    topic_type = FETCH.response.FetchableTopicResponse
    return FETCH.response(
        throttle_time_ms=0,
        error_code=0,
        session_id=0,
        responses=[
            topic_type(
                topic=topic.topic,
                partitions=[
                    topic_type.PartitionData(
                        partition_index=part.partition,
                        error_code=error,
                        high_watermark=-1,
                        last_stable_offset=-1,
                        log_start_offset=-1,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=b"",
                    )
                    for part in topic.partitions
                ],
            )
            for topic in request.topics
        ],
    )


def _add_partitions(request: Any, error: ErrorCode) -> Any:
    result = ADD_PARTITIONS_TO_TXN.response.AddPartitionsToTxnTopicResult
    partition = result.AddPartitionsToTxnPartitionResult
    return ADD_PARTITIONS_TO_TXN.response(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            result(
                name=topic.name,
                results_by_partition=[
                    partition(partition_index=index, partition_error_code=error)
                    for index in topic.partitions
                ],
            )
            for topic in request.v3_and_below_topics
        ],
    )


def _by_partition(
    response: Any,
    topic_type: Any,
    partition: Any,
    request: Any,
    error: ErrorCode,
    **unknown: int,
) -> Any:
    """A ListOffsets, OffsetCommit or TxnOffsetCommit answer (``response``, its topic and
    partition types) with ``error`` for every partition of ``request.topics`` (and
    ``unknown``: the partition type's other fields): the three have the same shape."""
    return response(
        throttle_time_ms=0,
        topics=[
            topic_type(
                name=topic.name,
                partitions=[
                    partition(partition_index=p.partition_index, error_code=error, **unknown)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ],
    )


def _offset_fetch(request: Any, error: ErrorCode) -> Any:
    # v2 and later carry the group's error at the top; v1 only per partition
    topic_type = OFFSET_FETCH.response.OffsetFetchResponseTopic
    partition = topic_type.OffsetFetchResponsePartition
    return OFFSET_FETCH.response(
        throttle_time_ms=0,
        error_code=error,
        topics=[
            topic_type(
                name=topic.name,
                partitions=[
                    partition(
                        partition_index=index,
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=error,
                    )
                    for index in topic.partition_indexes
                ],
            )
            for topic in request.topics or ()
        ],
    )
