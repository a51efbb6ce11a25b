"""Consumer groups: Kafka's group membership protocol, in memory, one coordinator.

Members join (JoinGroup), the leader assigns partitions and hands the assignments to
everyone (SyncGroup), members heartbeat within their session timeout and leave. A join,
a leave or a session timeout starts a rebalance: the group waits until every known
member joined again (or its rebalance timeout passes, dropping the ones that did not),
then starts the next generation. The committed offsets are not here: they are the
engine's subscriptions (durable cursors, visible as lag in stats), see ``_broker``.

A group lives in memory: after a restart its members join again (their heartbeats get
UNKNOWN_MEMBER_ID) and carry on from the durable offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
import uuid
from dataclasses import dataclass, field

from ._codes import ErrorCode

_INITIAL_DELAY = 0.05  # seconds an empty group waits for more first members
_SWEEP_INTERVAL = 0.25  # seconds between session-timeout checks


class GroupState(enum.Enum):
    """Where a group is in its rebalance cycle (Kafka's names)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


@dataclass(slots=True)
class Member:
    """A group member: its protocols, session and the assignment the leader gave it."""

    member_id: str
    client_id: str
    session_timeout: float
    rebalance_timeout: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    deadline: float = 0.0
    assignment: bytes = b""

    def touch(self) -> None:
        self.deadline = time.monotonic() + self.session_timeout


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A JoinGroup answer (``members`` only for the leader)."""

    error: ErrorCode
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class Group:
    """One group's members and rebalance state."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    joins: dict[str, asyncio.Future[JoinResult]] = field(default_factory=dict)
    syncs: dict[str, asyncio.Future[tuple[ErrorCode, bytes]]] = field(default_factory=dict)
    timer: asyncio.Task[None] | None = None


class GroupCoordinator:
    """Every group of one listener; :meth:`run` expires silent members."""

    def __init__(self) -> None:
        self._groups: dict[str, Group] = {}

    def group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = Group(group_id)
        return group

    def generation_of(self, group_id: str, member_id: str) -> int | None:
        """The group's generation if ``member_id`` is a member of it (else None)."""
        group = self._groups.get(group_id)
        if group is None or member_id not in group.members:
            return None
        return group.generation

    # -- join and sync -------------------------------------------------------------------

    async def join(
        self,
        group_id: str,
        member_id: str,
        client_id: str,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
    ) -> JoinResult:
        """Join (or rejoin) and wait for the generation this join completes."""
        group = self.group(group_id)
        if not protocols:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.members and any(m.protocol_type != protocol_type for m in group.members.values()):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if member_id and member_id not in group.members:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id)
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = Member(
                member_id,
                client_id,
                session_timeout_ms / 1000,
                max(rebalance_timeout_ms, session_timeout_ms) / 1000,
                protocol_type,
                protocols,
            )
        else:
            member.protocols = protocols
        member.touch()
        previous = group.joins.pop(member_id, None)
        if previous is not None and not previous.done():
            previous.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID))  # a newer join wins
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.joins[member_id] = future
        self._prepare_rebalance(group)
        everyone = set(group.joins) >= set(group.members)
        # (a group forming from empty waits _INITIAL_DELAY for more first members)
        if everyone and (group.generation > 0 or len(group.members) > 1):
            self._complete_join(group)
        return await future

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            return
        initial = group.state is GroupState.EMPTY
        group.state = GroupState.PREPARING_REBALANCE
        for future in group.syncs.values():  # a sync in flight must join again
            if not future.done():
                future.set_result((ErrorCode.REBALANCE_IN_PROGRESS, b""))
        group.syncs.clear()
        wait = (
            _INITIAL_DELAY
            if initial
            else max((m.rebalance_timeout for m in group.members.values()), default=0.0)
        )
        group.timer = asyncio.get_running_loop().create_task(
            self._complete_after(group, wait, initial), name=f"kafka-group-{group.group_id}"
        )

    async def _complete_after(self, group: Group, delay: float, initial: bool) -> None:
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, delay))
            if not initial and set(group.joins) >= set(group.members):
                break  # everyone is back
        group.timer = None
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End the join phase: drop who did not rejoin, start the next generation."""
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        timer, group.timer = group.timer, None
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        for member_id in [m for m in group.members if m not in group.joins]:
            del group.members[member_id]
        joins, group.joins = group.joins, {}
        group.generation += 1
        if not group.members:
            group.state, group.leader, group.protocol = GroupState.EMPTY, None, None
            return
        group.protocol = _common_protocol(list(group.members.values()))
        if group.protocol is None:
            for future in joins.values():
                if not future.done():
                    future.set_result(JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            group.members.clear()
            group.state = GroupState.EMPTY
            return
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        metadata = [
            (m.member_id, dict(m.protocols)[group.protocol]) for m in group.members.values()
        ]
        for member_id, future in joins.items():
            group.members[member_id].touch()
            if not future.done():
                future.set_result(
                    JoinResult(
                        ErrorCode.NONE,
                        group.generation,
                        group.protocol,
                        group.leader,
                        member_id,
                        metadata if member_id == group.leader else [],
                    )
                )

    async def sync(
        self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes]
    ) -> tuple[ErrorCode, bytes]:
        """SyncGroup: the leader hands out assignments; everyone gets theirs."""
        group = self.group(group_id)
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, b""
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION, b""
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS, b""
        member.touch()
        if group.state is GroupState.STABLE:
            return ErrorCode.NONE, member.assignment
        if member_id == group.leader:
            for other in group.members.values():
                other.assignment = assignments.get(other.member_id, b"")
            group.state = GroupState.STABLE
            for waiting, pending in group.syncs.items():
                if not pending.done() and waiting in group.members:
                    pending.set_result((ErrorCode.NONE, group.members[waiting].assignment))
            group.syncs.clear()
            return ErrorCode.NONE, member.assignment
        future: asyncio.Future[tuple[ErrorCode, bytes]] = asyncio.get_running_loop().create_future()
        group.syncs[member_id] = future
        return await future

    # -- heartbeat and leave ----------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, generation: int) -> ErrorCode:
        group = self._groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member.touch()
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def leave(self, group_id: str, member_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove(group, member_id)
        return ErrorCode.NONE

    def _remove(self, group: Group, member_id: str) -> None:
        del group.members[member_id]
        join = group.joins.pop(member_id, None)
        if join is not None and not join.done():
            join.set_result(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID))
        sync = group.syncs.pop(member_id, None)
        if sync is not None and not sync.done():
            sync.set_result((ErrorCode.UNKNOWN_MEMBER_ID, b""))
        if group.leader == member_id:
            group.leader = None
        if not group.members and group.state is not GroupState.PREPARING_REBALANCE:
            group.state, group.protocol = GroupState.EMPTY, None
            group.generation += 1
            return
        self._prepare_rebalance(group)
        if set(group.joins) >= set(group.members):
            self._complete_join(group)

    # -- upkeep -------------------------------------------------------------------------

    async def run(self) -> None:
        """Expire members whose session timed out (until cancelled)."""
        while True:
            await asyncio.sleep(_SWEEP_INTERVAL)
            now = time.monotonic()
            for group in list(self._groups.values()):
                for member_id, member in list(group.members.items()):
                    if member.deadline < now and member_id not in group.joins:
                        self._remove(group, member_id)

    async def reset(self) -> None:
        """Forget every group (this server stopped coordinating them): waiting joins and
        syncs answer NOT_COORDINATOR, so their members find the new coordinator."""
        await self.close(ErrorCode.NOT_COORDINATOR)
        self._groups.clear()

    async def close(self, error: ErrorCode = ErrorCode.COORDINATOR_NOT_AVAILABLE) -> None:
        """Cancel every rebalance timer and answer every waiting join and sync (with
        ``error``)."""
        timers = []
        for group in self._groups.values():
            if group.timer is not None:
                group.timer.cancel()
                timers.append(group.timer)
            for join in group.joins.values():
                if not join.done():
                    join.set_result(JoinResult(error))
            for sync in group.syncs.values():
                if not sync.done():
                    sync.set_result((error, b""))
        for timer in timers:
            with contextlib.suppress(asyncio.CancelledError):
                await timer


def _common_protocol(members: list[Member]) -> str | None:
    """The first protocol of the first member that every member supports."""
    for name, _ in members[0].protocols:
        if all(name in dict(m.protocols) for m in members[1:]):
            return name
    return None
