"""What the broker's API parts share: the engine, the producer registry, the groups and
the offset commit that both OffsetCommit and TxnOffsetCommit make."""

from __future__ import annotations

import asyncio

from txnstream.api import (
    Engine,
    EngineError,
    EngineState,
    TopicOffsets,
    TxnId,
)
from txnstream.api.support import validate_name

from ._codes import ErrorCode, code_of
from ._groups import GroupCoordinator
from ._producers import Producers
from ._session import may


class BrokerBase:
    """The state every API part of :class:`~txnstream.api.kafka._broker.Broker` uses."""

    engine: Engine
    producers: Producers
    groups: GroupCoordinator
    _drain: asyncio.Event  # set at shutdown: long polls answer at once

    def _code_of(self, exc: EngineError, *, coordinator: bool = False) -> ErrorCode:
        """:func:`code_of`, except when this server stepped down meanwhile (it lost the
        lease: its write was fenced, or it failed in doubt): then the error that sends
        the client to the new active, NOT_LEADER_OR_FOLLOWER (NOT_COORDINATOR for
        ``coordinator`` requests). Its retry there is stored once: the new active knows
        every write that committed, and an idempotent batch's sequence numbers."""
        if self.engine.state is EngineState.STANDBY:
            return ErrorCode.NOT_COORDINATOR if coordinator else ErrorCode.NOT_LEADER_OR_FOLLOWER
        return code_of(exc)

    def _offsets(self, topic: str) -> TopicOffsets:
        return self.engine.offsets(topic)

    def _partition(self, topic: str, index: int) -> str | None:
        """The engine topic behind Kafka partition ``index`` of ``topic``: partition
        ``i`` of a partitioned topic is topic ``{topic}-partition-{i}``; any other topic
        has one partition, 0. None for a partition that does not exist."""
        parts = self.engine.partitions_of(topic)
        if parts is None:
            return topic if index == 0 else None
        return parts[index] if 0 <= index < len(parts) else None

    def _kafka_partition(self, name: str) -> tuple[str, int]:
        """The Kafka topic and partition index an engine topic is (the inverse of
        :meth:`_partition`)."""
        return self.engine.parent_of(name) or (name, 0)

    async def _commit_offset(
        self, group: str, topic: str, partition: int, offset: int, txn: TxnId | None = None
    ) -> ErrorCode:
        """Commit ``group``'s offset of ``topic``: its subscription's cursor."""
        if not valid_group(group):
            return ErrorCode.INVALID_GROUP_ID
        if not may("consume", topic):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        if not may("consume", topic, group):  # a group is a subscription: its own rights
            return ErrorCode.GROUP_AUTHORIZATION_FAILED
        target = self._partition(topic, partition)
        if target is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            await self.engine.commit_offset(target, group, offset, txn=txn)
        except EngineError as exc:
            return code_of(exc)
        return ErrorCode.NONE


def valid_group(group: str | None) -> bool:
    """A group id is a subscription name (its offsets are that subscription's cursor)."""
    try:
        validate_name(group, "group")
    except ValueError:
        return False
    return True
