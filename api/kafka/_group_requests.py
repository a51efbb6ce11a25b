"""Consumer group requests: membership (see ``_groups``) and committed offsets."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)

from txnstream.api import (
    EngineError,
)

from ._base import BrokerBase, valid_group
from ._codes import ErrorCode
from ._session import may


class GroupApi(BrokerBase):
    """The consumer group APIs (a part of the broker)."""

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

    async def offset_fetch(self, request: Any, version: int) -> Any:
        topic_type = OffsetFetchResponse.OffsetFetchResponseTopic
        partition_type = topic_type.OffsetFetchResponsePartition
        group = request.group_id
        if request.topics is None:  # every topic the group committed on
            found: dict[str, list[int]] = {}
            for n in await self.engine.list_topics():
                name, index = self._kafka_partition(n)
                if may("consume", name, group) and self._committed(group, n) is not None:
                    found.setdefault(name, []).append(index)
            asked = list(found.items())
        else:
            asked = [(t.name, list(t.partition_indexes)) for t in request.topics]
        topics = []
        for name, indexes in asked:
            partitions = []
            for index in indexes:
                error, offset = ErrorCode.NONE, -1
                if not valid_group(group):
                    error = ErrorCode.INVALID_GROUP_ID
                elif not may("consume", name):
                    error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif not may("consume", name, group):
                    error = ErrorCode.GROUP_AUTHORIZATION_FAILED
                elif (target := self._partition(name, index)) is None:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    committed = self._committed(group, target)
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
        if not valid_group(group):
            return None
        try:
            return self.engine.committed_offset(topic, group)
        except EngineError:
            return None
