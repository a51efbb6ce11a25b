"""The Kafka APIs this listener serves: one table, by kafka-python request/response class.

The broker routes by :attr:`Api.key` and answers with :attr:`Api.response`; a standby
(``_standby``) refuses the same keys with the same response classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


@dataclass(frozen=True, slots=True)
class Api:
    """A served API: its request and response classes and the versions served."""

    request: Any
    response: Any
    min_version: int
    max_version: int
    key: int = field(init=False)
    """The request's API key (a plain attribute: compared on every request)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.request.API_KEY)


# Non-flexible versions (librdkafka and the Python clients negotiate down to them), but
# InitProducerId v3: KIP-360's epoch bump, without which librdkafka makes an abortable
# UNKNOWN_PRODUCER_ID (a restart forgot the producer's epoch) a fatal error.
PRODUCE = Api(ProduceRequest, ProduceResponse, 3, 8)
FETCH = Api(FetchRequest, FetchResponse, 4, 11)
LIST_OFFSETS = Api(ListOffsetsRequest, ListOffsetsResponse, 1, 5)
METADATA = Api(MetadataRequest, MetadataResponse, 0, 8)
FIND_COORDINATOR = Api(FindCoordinatorRequest, FindCoordinatorResponse, 0, 2)
API_VERSIONS = Api(ApiVersionsRequest, ApiVersionsResponse, 0, 2)
INIT_PRODUCER_ID = Api(InitProducerIdRequest, InitProducerIdResponse, 0, 3)  # v3: KIP-360
ADD_PARTITIONS_TO_TXN = Api(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 2)
END_TXN = Api(EndTxnRequest, EndTxnResponse, 0, 2)
ADD_OFFSETS_TO_TXN = Api(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 2)
TXN_OFFSET_COMMIT = Api(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 2)
JOIN_GROUP = Api(JoinGroupRequest, JoinGroupResponse, 0, 5)
SYNC_GROUP = Api(SyncGroupRequest, SyncGroupResponse, 0, 3)
HEARTBEAT = Api(HeartbeatRequest, HeartbeatResponse, 0, 3)
LEAVE_GROUP = Api(LeaveGroupRequest, LeaveGroupResponse, 0, 3)
OFFSET_COMMIT = Api(OffsetCommitRequest, OffsetCommitResponse, 2, 7)
OFFSET_FETCH = Api(OffsetFetchRequest, OffsetFetchResponse, 1, 5)
CREATE_TOPICS = Api(CreateTopicsRequest, CreateTopicsResponse, 2, 4)
DELETE_TOPICS = Api(DeleteTopicsRequest, DeleteTopicsResponse, 1, 3)
# v1 only: v0 would exchange raw SASL tokens outside Kafka's framing
SASL_HANDSHAKE = Api(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1)
SASL_AUTHENTICATE = Api(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 1)

APIS: dict[int, Api] = {
    api.key: api
    for api in (
        PRODUCE,
        FETCH,
        LIST_OFFSETS,
        METADATA,
        FIND_COORDINATOR,
        API_VERSIONS,
        INIT_PRODUCER_ID,
        ADD_PARTITIONS_TO_TXN,
        END_TXN,
        ADD_OFFSETS_TO_TXN,
        TXN_OFFSET_COMMIT,
        JOIN_GROUP,
        SYNC_GROUP,
        HEARTBEAT,
        LEAVE_GROUP,
        OFFSET_COMMIT,
        OFFSET_FETCH,
        CREATE_TOPICS,
        DELETE_TOPICS,
        SASL_HANDSHAKE,
        SASL_AUTHENTICATE,
    )
}
"""Every served API by key (ApiVersions lists them)."""
