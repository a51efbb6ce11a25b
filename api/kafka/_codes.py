"""Kafka's error codes (the protocol's numbers) and how engine errors map onto them."""

from __future__ import annotations

import enum

from txnstream.api import (
    ClosedError,
    EngineError,
    EngineFailedError,
    FencedError,
    ForbiddenError,
    InsufficientStorageError,
    InvalidArgumentError,
    TooLargeError,
    TopicNotFoundError,
    TxnNotFoundError,
    TxnNotOpenError,
)


class ErrorCode(enum.IntEnum):
    """The error codes this listener answers with (names as in Kafka's ``Errors``)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    INVALID_TOPIC_EXCEPTION = 17
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    MEMBER_ID_REQUIRED = 79
    INVALID_RECORD = 87


def code_of(exc: EngineError) -> ErrorCode:
    """The Kafka error code of an engine error (one mapping for every API)."""
    if isinstance(exc, TopicNotFoundError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, TooLargeError):
        return ErrorCode.MESSAGE_TOO_LARGE
    if isinstance(exc, FencedError):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if isinstance(exc, TxnNotOpenError | TxnNotFoundError):
        return ErrorCode.INVALID_TXN_STATE
    if isinstance(exc, ForbiddenError):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if isinstance(exc, InvalidArgumentError):
        return ErrorCode.INVALID_REQUEST
    if isinstance(exc, InsufficientStorageError | ClosedError | EngineFailedError):
        return ErrorCode.KAFKA_STORAGE_ERROR  # retriable: the client tries again
    return ErrorCode.UNKNOWN_SERVER_ERROR
