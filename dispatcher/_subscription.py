"""Subscriptions: durable named cursors with consumers, and delivery below the read limit.

Delivery reads the ledger from ``read_position`` up to the *read limit*: the topic's
``max_read_position`` for read_committed, last confirmed for read_uncommitted. Markers,
and for read_committed the entries of aborted transactions, are acknowledged by the
dispatcher itself so they never block the mark-delete position or count as backlog. A
receiver that finds nothing waits on the topic's change event (no polling); a caught-up
subscription reads nothing because ``read_position`` is past the limit.

Positions read but not delivered yet (nacked, released by a detached consumer or an
aborted transactional ack, or kept for another key_shared consumer) wait in ``_replay``
and are delivered before new entries, re-read by position: memory holds positions, never
message payloads.
"""

from __future__ import annotations

import asyncio
import enum
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sortedcontainers import SortedSet

from ledger import (
    AckConflictError,
    ClosedError,
    ConsumerBusyError,
    Entry,
    EntryKind,
    InvalidArgumentError,
    Position,
    SubscriptionNotFoundError,
    TopicNotFoundError,
    TxnId,
    WriteBatch,
    ms_to_datetime,
)
from txn_buffer import Topic

from ._cursor import Cursor

_READ_CHUNK = 500
_KEY_SHARED_LOOKAHEAD = 2000


class SubscriptionType(enum.StrEnum):
    """How a subscription shares its messages among consumers."""

    EXCLUSIVE = "exclusive"
    FAILOVER = "failover"
    SHARED = "shared"
    KEY_SHARED = "key_shared"


class Isolation(enum.StrEnum):
    """What a subscription may read."""

    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"


def parse_enum(kind: type[enum.StrEnum], value: Any, what: str) -> Any:
    """``kind(value)`` with an :class:`InvalidArgumentError` naming the allowed values."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise InvalidArgumentError(f"invalid {what} {value!r}: one of {allowed}") from None


@dataclass(frozen=True, slots=True)
class Message:
    """A delivered message."""

    position: Position
    value: Any
    key: str | None
    properties: dict[str, str]
    txn: str | None
    publish_time: datetime
    redelivery_count: int


@dataclass(slots=True)
class Consumer:
    """A consumer attached to a subscription."""

    name: str
    expires: bool
    last_seen: float
    polling: int = 0
    """Receives in progress: a consumer waiting in a long poll is not idle."""


class Subscription:
    """A durable, named cursor on a topic, with its consumers and delivery state."""

    def __init__(
        self,
        topic: Topic,
        name: str,
        type: SubscriptionType,
        isolation: Isolation,
        cursor: Cursor,
        created_ms: int,
    ) -> None:
        self.topic = topic
        self.name = name
        self.type = type
        self.isolation = isolation
        self.cursor = cursor
        self.created_ms = created_ms
        self.consumers: dict[str, Consumer] = {}
        self.deleted = False
        self.closed = False
        md = cursor.mark_delete
        self.read_position = (
            Position(0, 0) if md is None else Position(md.ledger_id, md.entry_id + 1)
        )
        self._pending: dict[Position, str] = {}  # delivered, unacknowledged -> consumer
        # key_shared only: keys of pending and replay positions, and per receive pass the
        # consumer holding each key's unacknowledged messages and the keys waiting in replay.
        self._keys: dict[Position, str | None] = {}
        self._key_holders: dict[str | None, str] = {}
        self._held_keys: set[str | None] = set()
        self._replay: SortedSet = SortedSet()
        self._redelivery: dict[Position, int] = {}
        self.redeliveries = 0
        """Messages released for redelivery (nack, detach, abort of a transactional ack)
        since the engine opened."""
        self._txn_acks: dict[Position, TxnId] = {}
        self._txn_cumulative: dict[TxnId, Position] = {}
        self._lock = asyncio.Lock()

    # -- limits and persistence ------------------------------------------------------

    @property
    def read_limit(self) -> Position | None:
        """The newest position this subscription may read."""
        buffer = self.topic.buffer
        if self.isolation is Isolation.READ_COMMITTED:
            return buffer.max_read_position
        return buffer.last_confirmed

    def prepare_cursor_write(self, batch: WriteBatch) -> None:
        """Add the cursor's current durable form to ``batch``."""
        batch.add(
            "UPDATE subscriptions SET cursor = ? WHERE topic_id = ? AND name = ?",
            (self.cursor.encode(), self.topic.topic_id, self.name),
        )

    # -- consumers -----------------------------------------------------------------

    def attach(self, name: str, *, expires: bool, expiry: float = 30.0) -> Consumer:
        """Attach (or touch) consumer ``name``; an exclusive subscription takes one."""
        self._check_usable()
        now = time.monotonic()
        self.expire(now, expiry)
        consumer = self.consumers.get(name)
        if consumer is None:
            if self.type is SubscriptionType.EXCLUSIVE and self.consumers:
                other = next(iter(self.consumers))
                raise ConsumerBusyError(
                    f"exclusive subscription {self.name} already has consumer {other!r}"
                )
            consumer = Consumer(name, expires, now)
            self.consumers[name] = consumer
        consumer.last_seen = now
        return consumer

    def detach(self, name: str) -> None:
        """Detach ``name``; its unacknowledged messages are redelivered to others."""
        if self.consumers.pop(name, None) is None:
            return
        released = [p for p, c in self._pending.items() if c == name]
        for position in released:
            del self._pending[position]
            self._count_redelivery(position)
            self._replay.add(position)
        self.topic.notify()

    def expire(self, now: float, expiry: float) -> None:
        """Detach expiring consumers that have not polled for ``expiry`` seconds."""
        stale = [
            c.name
            for c in self.consumers.values()
            if c.expires and not c.polling and now - c.last_seen > expiry
        ]
        for name in stale:
            self.detach(name)

    def _target(self, entry: Entry, consumer: str) -> str | None:
        if self.type is SubscriptionType.SHARED:
            return consumer
        if self.type is SubscriptionType.KEY_SHARED:
            names = sorted(self.consumers)
            if not names:
                return None
            target = names[zlib.crc32((entry.key or "").encode()) % len(names)]
            holder = self._key_holders.get(entry.key)
            if holder is not None and holder != target:
                # The key's earlier messages are unacknowledged at another consumer (the
                # consumer set changed): hold this one back so the key keeps its order.
                return None
            return target
        return next(iter(self.consumers), None)  # exclusive, or failover's active consumer

    # -- delivery ------------------------------------------------------------------

    async def receive(
        self, consumer: str, max_messages: int, timeout: float, max_bytes: int | None = None
    ) -> list[Message]:
        """Up to ``max_messages`` for ``consumer``, waiting up to ``timeout`` for the first;
        with ``max_bytes``, no more stored bytes than that (but always at least one)."""
        attached = self.consumers.get(consumer)
        if attached is None:
            return []
        attached.polling += 1
        try:
            return await self._receive(attached, max_messages, timeout, max_bytes)
        finally:
            attached.polling -= 1
            attached.last_seen = time.monotonic()

    async def _receive(
        self, attached: Consumer, max_messages: int, timeout: float, max_bytes: int | None
    ) -> list[Message]:
        consumer = attached.name
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout)
        while True:
            event = self.topic.change_event()
            self._check_usable()
            async with self._lock:
                messages = await self._collect(consumer, max_messages, max_bytes)
            if messages or consumer not in self.consumers:
                return messages
            remaining = deadline - loop.time()
            if remaining <= 0:
                return []
            try:
                async with asyncio.timeout(remaining):
                    await event.wait()
            except TimeoutError:
                return []

    def _check_usable(self) -> None:
        if self.closed:
            raise ClosedError("the engine is closed")
        if self.topic.deleted:
            raise TopicNotFoundError(f"topic {self.topic.name!r} was deleted")
        if self.deleted:
            raise SubscriptionNotFoundError(f"subscription {self.name!r} was deleted")

    def _skip(self, entry: Entry) -> bool:
        if entry.kind is not EntryKind.DATA:
            return True
        return (
            self.isolation is Isolation.READ_COMMITTED
            and entry.txn_id is not None
            and self.topic.buffer.is_aborted(entry.txn_id)
        )

    def _txn_pending(self, position: Position) -> bool:
        if position in self._txn_acks:
            return True
        return any(position <= upto for upto in self._txn_cumulative.values())

    def _message(self, entry: Entry) -> Message:
        return Message(
            entry.position,
            entry.value,
            entry.key,
            entry.properties,
            None if entry.txn_id is None else str(entry.txn_id),
            ms_to_datetime(entry.publish_time),
            self._redelivery.get(entry.position, 0),
        )

    def _deliver(self, entry: Entry, consumer: str) -> Message:
        self._pending[entry.position] = consumer
        if self.type is SubscriptionType.KEY_SHARED:
            self._keys[entry.position] = entry.key
            self._key_holders[entry.key] = consumer
        return self._message(entry)

    def _hold(self, entry: Entry) -> None:
        """Keep a read entry for later delivery (by position; its key is remembered)."""
        self._replay.add(entry.position)
        if self.type is SubscriptionType.KEY_SHARED:
            self._keys[entry.position] = entry.key
            self._held_keys.add(entry.key)

    def _replay_candidates(self, consumer: str, max_messages: int) -> list[Position]:
        """Replay positions to try for ``consumer``, oldest first.

        For key_shared, a key whose oldest replay entry cannot go to ``consumer`` blocks
        its later entries too, so a key never overtakes itself.
        """
        candidates = [p for p in self._replay if not self._txn_pending(p)]
        if self.type is not SubscriptionType.KEY_SHARED:
            return candidates[: max(max_messages * 4, 64)]
        names = sorted(self.consumers)
        chosen: list[Position] = []
        blocked: set[str | None] = set()
        for position in candidates:
            if position not in self._keys:
                chosen.append(position)  # key unknown (after a restart): read it to decide
            else:
                key = self._keys[position]
                if key in blocked:
                    continue
                target = names[zlib.crc32((key or "").encode()) % len(names)] if names else None
                holder = self._key_holders.get(key)
                if target != consumer or (holder is not None and holder != target):
                    blocked.add(key)
                    continue
                chosen.append(position)
            if len(chosen) >= max_messages:
                break
        return chosen

    async def _collect(
        self, consumer: str, max_messages: int, max_bytes: int | None = None
    ) -> list[Message]:
        out: list[Message] = []
        try:
            await self._collect_into(out, consumer, max_messages, max_bytes)
        except asyncio.CancelledError:
            # the caller is gone (e.g. its HTTP client disconnected): what was taken for
            # it goes back, first in line and not counted as a redelivery
            self.release([message.position for message in out])
            raise
        return out

    async def _collect_into(
        self, out: list[Message], consumer: str, max_messages: int, max_bytes: int | None
    ) -> None:
        if consumer not in self.consumers:
            return  # detached (closed) while waiting
        ordered = self.type in (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER)
        if ordered and next(iter(self.consumers), None) != consumer:
            return  # only the exclusive or active failover consumer receives
        if self.type is SubscriptionType.KEY_SHARED:
            live = self._pending.keys() | self._replay
            self._keys = {p: k for p, k in self._keys.items() if p in live}
            self._key_holders = {self._keys.get(p): c for p, c in self._pending.items()}
            self._held_keys = {self._keys.get(p) for p in self._replay}
        budget = [max_bytes if max_bytes is not None else -1]  # -1: no byte budget

        def fits(entry: Entry) -> bool:
            """Room for ``entry`` in the response (the first one always fits)."""
            if budget[0] < 0:
                return True
            if out and entry.size > budget[0]:
                budget[0] = 0  # full: what follows waits too, so order holds
                return False
            budget[0] = max(0, budget[0] - entry.size)
            return True

        ledger = self.topic.ledger
        cursor = self.cursor
        if self._replay:
            candidates = self._replay_candidates(consumer, max_messages)
            if candidates:
                entries = await ledger.read_positions(candidates)
                found = {e.position for e in entries}
                for position in candidates:
                    if position not in found:  # trimmed by retention
                        self._replay.discard(position)
                for entry in entries:
                    position = entry.position
                    if cursor.is_acked(position) or self._skip(entry):
                        self._replay.discard(position)
                        continue
                    self._keys[position] = entry.key
                    if (
                        len(out) < max_messages
                        and self._target(entry, consumer) == consumer
                        and fits(entry)
                    ):
                        self._replay.discard(position)
                        out.append(self._deliver(entry, consumer))
        if self.type is SubscriptionType.KEY_SHARED:
            self._held_keys = {self._keys.get(p) for p in self._replay}
        scanned = 0
        while len(out) < max_messages and budget[0] != 0:
            limit = self.read_limit
            if limit is None or self.read_position > limit:
                break
            if self.type is SubscriptionType.KEY_SHARED:
                if scanned >= _KEY_SHARED_LOOKAHEAD:
                    break
                chunk = _READ_CHUNK
            else:
                chunk = min(_READ_CHUNK, max_messages - len(out))
            entries = await ledger.read(self.read_position, limit, chunk)
            if not entries:
                break
            scanned += len(entries)
            for entry in entries:
                position = entry.position
                self.read_position = Position(position.ledger_id, position.entry_id + 1)
                if self._skip(entry):
                    cursor.ack(position, ledger)
                    continue
                if cursor.is_acked(position):
                    continue
                if self._txn_pending(position):
                    self._hold(entry)  # deliverable again if that transaction aborts
                    continue
                held = self.type is SubscriptionType.KEY_SHARED and entry.key in self._held_keys
                if (
                    not held
                    and len(out) < max_messages
                    and self._target(entry, consumer) == consumer
                    and fits(entry)
                ):
                    out.append(self._deliver(entry, consumer))
                else:
                    self._hold(entry)  # beyond the budget too: first in line next time

    # -- acknowledgement -----------------------------------------------------------

    def _check_positions(self, positions: Sequence[Position]) -> None:
        last = self.topic.buffer.last_confirmed
        for position in positions:
            if last is None or position > last:
                raise InvalidArgumentError(f"position {position} is beyond the last entry")

    def check_ack(self, positions: Sequence[Position], cumulative: bool, txn: TxnId | None) -> None:
        """Raise :class:`AckConflictError` if an ack would touch another transaction's."""
        self._check_positions(positions)
        if cumulative:
            upto = max(positions, default=None)
            if upto is None:
                return
            for position, owner in self._txn_acks.items():
                if position <= upto and owner != txn:
                    raise AckConflictError(f"position {position} is pending in {owner}")
            for owner, pending in self._txn_cumulative.items():
                if owner != txn:
                    raise AckConflictError(f"positions up to {pending} are pending in {owner}")
        else:
            for position in positions:
                holder = self._txn_acks.get(position)
                if holder is None:
                    holder = next(
                        (t for t, u in self._txn_cumulative.items() if position <= u), None
                    )
                if holder is not None and holder != txn:
                    raise AckConflictError(f"position {position} is pending in {holder}")

    def apply_ack(self, positions: Sequence[Position], cumulative: bool) -> None:
        """Acknowledge in memory (the caller persists the cursor in the same step)."""
        ledger = self.topic.ledger
        if cumulative:
            upto = max(positions)
            self.cursor.ack_cumulative(upto, ledger)
            for position in [p for p in self._pending if p <= upto]:
                del self._pending[position]
            while self._replay and self._replay[0] <= upto:
                self._replay.pop(0)
            if self.read_position <= upto:
                self.read_position = Position(upto.ledger_id, upto.entry_id + 1)
        else:
            for position in positions:
                self.cursor.ack(position, ledger)
                self._pending.pop(position, None)
                self._replay.discard(position)
        for position in [p for p in self._redelivery if self.cursor.is_acked(p)]:
            del self._redelivery[position]

    def hold_for_txn(self, positions: Sequence[Position], cumulative: bool, txn: TxnId) -> None:
        """Make positions pending in ``txn``: not redelivered until it ends."""
        if cumulative:
            upto = max(positions)
            previous = self._txn_cumulative.get(txn)
            self._txn_cumulative[txn] = upto if previous is None else max(previous, upto)
            held = [p for p in self._pending if p <= upto]
            held += [p for p in self._replay if p <= upto]
        else:
            held = list(positions)
        for position in held:
            self._txn_acks[position] = txn
            self._pending.pop(position, None)
            self._replay.discard(position)

    def release_txn(
        self, txn: TxnId, committed: bool, acks: Sequence[tuple[list[Position], bool]]
    ) -> None:
        """End ``txn``'s hold: acknowledge (commit) or release for redelivery (abort)."""
        held = [p for p, owner in self._txn_acks.items() if owner == txn]
        for position in held:
            del self._txn_acks[position]
        self._txn_cumulative.pop(txn, None)
        if committed:
            for positions, cumulative in acks:
                self.apply_ack(positions, cumulative)
        else:
            for position in held:
                if not self.cursor.is_acked(position) and position < self.read_position:
                    self._count_redelivery(position)
                    self._replay.add(position)
        self.topic.notify()

    def nack(self, positions: Sequence[Position]) -> None:
        """Redeliver ``positions`` (those delivered and unacknowledged), count + 1."""
        self._check_positions(positions)
        for position in positions:
            if self._pending.pop(position, None) is not None:
                self._count_redelivery(position)
                self._replay.add(position)
        self.topic.notify()

    def release(self, positions: Sequence[Position]) -> None:
        """Take back delivered positions nobody received (their receiver went away before
        reading them): first in line again, not counted as redeliveries."""
        for position in positions:
            if self._pending.pop(position, None) is not None:
                self._replay.add(position)
        self.topic.notify()

    def seek(self, position: Position | str) -> None:
        """Everything before ``position`` acknowledged, everything from it on not."""
        ledger = self.topic.ledger
        buffer = self.topic.buffer
        if position == "earliest":
            mark_delete: Position | None = None
            start = Position(0, 0)
        elif position == "latest":
            mark_delete = buffer.last_confirmed
            start = (
                Position(0, 0)
                if mark_delete is None
                else Position(mark_delete.ledger_id, mark_delete.entry_id + 1)
            )
        else:
            assert isinstance(position, Position)
            start = position
            mark_delete = ledger.previous(position)
            last = buffer.last_confirmed
            if mark_delete is not None and last is not None and mark_delete >= last:
                # at or past the end: new entries will come after ``last``, not at ``position``
                mark_delete = last
                start = Position(last.ledger_id, last.entry_id + 1)
        self.cursor.reset(mark_delete)
        self._pending.clear()
        self._replay.clear()
        self._redelivery.clear()
        self.read_position = start
        self.topic.notify()

    def _count_redelivery(self, position: Position) -> None:
        self._redelivery[position] = self._redelivery.get(position, 0) + 1
        self.redeliveries += 1

    # -- stats ---------------------------------------------------------------------

    @property
    def unacked(self) -> int:
        """Messages delivered to a consumer and not yet acknowledged (nor released)."""
        return len(self._pending)

    async def backlog(self) -> int:
        """Deliverable entries at or below the read limit not yet acknowledged."""
        limit = self.read_limit
        if limit is None:
            return 0
        md = self.cursor.mark_delete
        start = Position(0, 0) if md is None else Position(md.ledger_id, md.entry_id + 1)
        if start > limit:
            return 0
        aborted = [a.txn_id.seq for a in self.topic.buffer.aborted_in_range(start, limit)]
        acked = [p for p in self.cursor.acked if p <= limit]
        return await self.topic.ledger.count_data(
            start, limit, except_txns=aborted, except_positions=acked
        )
