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
import bisect
import enum
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat
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
    Row,
    SubscriptionNotFoundError,
    TopicNotFoundError,
    TxnId,
    WriteBatch,
    decode_payloads,
    decode_row,
    ms_to_datetime,
)
from txn_buffer import Topic

from ._cursor import Cursor

_READ_CHUNK = 500
_MAX_ROWS = 12_000  # rows read at once by an ordered delivery (receive takes up to 10,000)
_NOTHING: frozenset[int] = frozenset()
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


class Message(tuple):  # type: ignore[type-arg]
    """A delivered message: ``position``, ``value``, ``key``, ``properties``, ``txn``,
    ``publish_time`` and ``redelivery_count``, read-only.

    Underneath it is the stored row, the decoded payload and the redelivery count in a
    tuple, so a delivery batch makes its messages without a Python call per message;
    the fields are computed when read.
    """

    __slots__ = ()

    # (row, body, redelivery_count): row = (ledger_id, entry_id, kind, txn seq, payload),
    # body = [key, properties, publish_time_ms, value] (see ledger.decode_payloads)

    @property
    def position(self) -> Position:
        """Where the message lies in its topic."""
        row = self[0]
        return Position(row[0], row[1])

    @property
    def value(self) -> Any:
        """The value as sent (``bytes`` stays ``bytes``, ``str`` stays ``str``)."""
        return self[1][3]

    @property
    def key(self) -> str | None:
        """The message key, if any."""
        key: str | None = self[1][0]
        return key

    @property
    def properties(self) -> dict[str, str]:
        """The message properties."""
        properties: dict[str, str] = self[1][1]
        return properties

    @property
    def txn(self) -> str | None:
        """The id of the transaction it was sent in (``"txn-<n>"``), or None."""
        seq = self[0][3]
        return None if seq is None else str(TxnId(seq))

    @property
    def publish_time(self) -> datetime:
        """When it was appended (UTC)."""
        return ms_to_datetime(self[1][2])

    @property
    def redelivery_count(self) -> int:
        """How often it was delivered before (nack, detached consumer, aborted ack)."""
        count: int = self[2]
        return count

    def __repr__(self) -> str:
        return (
            f"Message(position={self.position!r}, value={self.value!r}, key={self.key!r},"
            f" properties={self.properties!r}, txn={self.txn!r},"
            f" publish_time={self.publish_time!r}, redelivery_count={self.redelivery_count})"
        )


_new_tuple = tuple.__new__


def _key(position: Position) -> int:
    """An int ordered as positions are: a cheap dict key for a delivered position."""
    return (position.ledger_id << 64) | position.entry_id


def _unkey(key: int) -> Position:
    return Position(key >> 64, key & _ENTRY_MASK)


_ENTRY_MASK = (1 << 64) - 1


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
        # delivered, unacknowledged -> consumer, keyed by _key(position); _pending_max is
        # an upper bound of the keys (a cumulative ack at or above it clears them all)
        self._pending: dict[int, str] = {}
        self._pending_max = -1
        # skipped (marker or aborted) positions read by _deliver_rows, as _key()s in
        # ascending order, not yet in the cursor; and the share of rows skipped lately
        self._skipped: list[int] = []
        self._skip_ratio = 0.125
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
        self._settle_skipped()
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
        released = [k for k, c in self._pending.items() if c == name]
        for key in released:
            del self._pending[key]
            position = _unkey(key)
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
        position = entry.position
        row = (
            position.ledger_id,
            position.entry_id,
            int(entry.kind),
            None if entry.txn_id is None else entry.txn_id.seq,
            b"",
        )
        body = [entry.key, entry.properties, entry.publish_time, entry.value]
        message: Message = _new_tuple(Message, (row, body, self._redelivery.get(position, 0)))
        return message

    def _deliver(self, entry: Entry, consumer: str) -> Message:
        key = _key(entry.position)
        self._pending[key] = consumer
        if key > self._pending_max:
            self._pending_max = key
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
            live = {_unkey(k) for k in self._pending} | set(self._replay)
            self._keys = {p: k for p, k in self._keys.items() if p in live}
            self._key_holders = {self._keys.get(_unkey(p)): c for p, c in self._pending.items()}
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
            remaining = max_messages - len(out)
            rows: list[Row] | None = None
            if ordered and budget[0] < 0:
                # Read a little more than is missing (markers and aborted entries are
                # skipped); what lies past the last delivered message stays unread.
                ahead = int(remaining * self._skip_ratio * 1.25) + 32  # an extra read costs more
                rows = await ledger.read_rows(
                    self.read_position, limit, min(remaining + ahead, _MAX_ROWS)
                )
                if rows is not None and not rows:
                    break
            if rows is not None:
                if self._deliver_rows(rows, consumer, remaining, out):
                    continue
                entries = [decode_row(row) for row in rows]  # the general path below
            else:
                if self.type is SubscriptionType.KEY_SHARED:
                    if scanned >= _KEY_SHARED_LOOKAHEAD:
                        break
                    chunk = _READ_CHUNK
                elif ordered:
                    chunk = remaining  # unread ones stay unread (see below)
                else:
                    chunk = min(_READ_CHUNK, remaining)
                entries = await ledger.read(self.read_position, limit, chunk)
                if not entries:
                    break
                scanned += len(entries)
            for entry in entries:
                position = entry.position
                if ordered and len(out) >= max_messages:
                    break  # read ahead: leave the rest unread
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

    def _deliver_rows(
        self, rows: list[Row], consumer: str, remaining: int, out: list[Message]
    ) -> bool:
        """Deliver freshly read rows to the one consumer of an ordered subscription in
        one pass: one decode of the kept payloads, one message object each, pending
        and cursor updates per batch. False (nothing done) when a row may need the
        per-entry rules (acknowledged already, or held by a transactional ack)."""
        if self._txn_acks or self._txn_cumulative:
            return False
        first = rows[0]
        cursor = self.cursor
        md = cursor.mark_delete
        if md is not None and (md.ledger_id, md.entry_id) >= (first[0], first[1]):
            return False
        if cursor.acked:
            top = cursor.acked[-1]
            if (top.ledger_id, top.entry_id) >= (first[0], first[1]):
                return False
        aborted = (
            self.topic.buffer.aborted_seqs
            if self.isolation is Isolation.READ_COMMITTED
            else _NOTHING
        )
        keep = [r for r in rows if not r[2] and (r[3] is None or r[3] not in aborted)]
        if len(keep) > remaining:
            keep = keep[:remaining]
            rows = rows[: rows.index(keep[-1]) + 1]  # nothing past the last delivered
        if len(keep) != len(rows):
            # Markers and aborted data: acknowledged by the dispatcher, lazily (a
            # cumulative ack covers them; see _settle_skipped).
            self._skipped.extend(
                [
                    (r[0] << 64) | r[1]
                    for r in rows
                    if r[2] or (r[3] is not None and r[3] in aborted)
                ]
            )
        if keep:  # the share of skipped rows among those processed (not the read-ahead)
            skipped_share = (len(rows) - len(keep)) / len(keep)
            self._skip_ratio = 0.5 * self._skip_ratio + 0.5 * min(skipped_share, 4.0)
        last = rows[-1]
        self.read_position = Position(last[0], last[1] + 1)
        if not keep:
            return True
        bodies = decode_payloads([r[4] for r in keep])
        redelivery = self._redelivery
        counts = (
            [redelivery.get(Position(r[0], r[1]), 0) for r in keep] if redelivery else repeat(0)
        )
        out.extend(map(_new_tuple, repeat(Message), zip(keep, bodies, counts, strict=False)))
        keys = [(r[0] << 64) | r[1] for r in keep]
        self._pending.update(zip(keys, repeat(consumer), strict=False))
        if keys[-1] > self._pending_max:
            self._pending_max = keys[-1]
        return True

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
            upto_key = _key(upto)
            skipped = self._skipped
            if skipped and skipped[0] <= upto_key:
                del skipped[: bisect.bisect_right(skipped, upto_key)]
            self.cursor.ack_cumulative(upto, ledger)
            self._settle_skipped()
            if self._pending_max <= upto_key:
                self._pending.clear()  # the usual case: everything delivered is acked
                self._pending_max = -1
            else:
                for key in [k for k in self._pending if k <= upto_key]:
                    del self._pending[key]
            if self._replay and self._replay[0] <= upto:
                del self._replay[: self._replay.bisect_right(upto)]
            if self.read_position <= upto:
                self.read_position = Position(upto.ledger_id, upto.entry_id + 1)
        else:
            self._settle_skipped()
            for position in positions:
                self.cursor.ack(position, ledger)
                self._pending.pop(_key(position), None)
                self._replay.discard(position)
        if self._redelivery:
            for position in [p for p in self._redelivery if self.cursor.is_acked(p)]:
                del self._redelivery[position]

    def _settle_skipped(self) -> None:
        """Put the skipped positions not covered yet into the cursor."""
        if self._skipped:
            skipped, self._skipped = self._skipped, []
            self.cursor.ack_many([_unkey(k) for k in skipped], self.topic.ledger)

    def hold_for_txn(self, positions: Sequence[Position], cumulative: bool, txn: TxnId) -> None:
        """Make positions pending in ``txn``: not redelivered until it ends."""
        if cumulative:
            upto = max(positions)
            previous = self._txn_cumulative.get(txn)
            self._txn_cumulative[txn] = upto if previous is None else max(previous, upto)
            upto_key = _key(upto)
            held = [_unkey(k) for k in self._pending if k <= upto_key]
            held += [p for p in self._replay if p <= upto]
        else:
            held = list(positions)
        for position in held:
            self._txn_acks[position] = txn
            self._pending.pop(_key(position), None)
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
            if self._pending.pop(_key(position), None) is not None:
                self._count_redelivery(position)
                self._replay.add(position)
        self.topic.notify()

    def release(self, positions: Sequence[Position]) -> None:
        """Take back delivered positions nobody received (their receiver went away before
        reading them): first in line again, not counted as redeliveries."""
        for position in positions:
            if self._pending.pop(_key(position), None) is not None:
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
        self._skipped.clear()
        self._pending.clear()
        self._pending_max = -1
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
