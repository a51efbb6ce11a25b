"""Subscriptions: durable named cursors with consumers, and delivery below the read limit.

Delivery reads the ledger from ``read_position`` up to the *read limit*: the topic's
``max_read_position`` for read_committed, last confirmed for read_uncommitted. Markers,
and for read_committed the entries of aborted transactions, are acknowledged by the
dispatcher itself so they never block the mark-delete position or count as backlog. A
receiver that finds nothing waits on the topic's change event (no polling); a caught-up
subscription reads nothing because ``read_position`` is past the limit. An ordered
subscription's consumer that acknowledges has its next range read while it waits for
the ack to be durable (:meth:`Subscription.prefetch_next`), or, on a store whose reads
run beside the loop, as soon as a delivery ends.

Positions read but not delivered yet (nacked, released by a detached consumer or an
aborted transactional ack, or kept for another key_shared consumer) wait in ``_replay``
and are delivered before new entries, re-read by position: memory holds positions, never
message payloads.
"""

from __future__ import annotations

import asyncio
import time
import weakref
import zlib
from itertools import repeat, starmap
from operator import add, itemgetter
from typing import Final

from txnstream.ledger import (
    ClosedError,
    ConsumerBusyError,
    Entry,
    EntryKind,
    Position,
    Row,
    SubscriptionNotFoundError,
    TopicNotFoundError,
    decode_payloads,
    decode_row,
)

from ._acks import SubscriptionState
from ._message import (
    Consumer,
    Isolation,
    Message,
    SubscriptionType,
    key_position,
    position_key,
)

_READ_CHUNK = 500
_MAX_ROWS = 12_000  # rows read at once by an ordered delivery (receive takes up to 10,000)
_NOTHING: frozenset[int] = frozenset()
_KEY_SHARED_LOOKAHEAD = 2000
_ORDERED = (SubscriptionType.EXCLUSIVE, SubscriptionType.FAILOVER)  # one consumer at a time


# The fields of a stored Row, ``(ledger_id, entry_id, kind, txn seq or None, payload)``:
# rows stay the store's own tuples on the delivery path (no object per row), read by name.
_LEDGER_ID: Final = 0
_ENTRY_ID: Final = 1
_KIND: Final = 2
_TXN_SEQ: Final = 3
_PAYLOAD: Final = 4
_TXN = itemgetter(_TXN_SEQ)


def _row_at(row: Row) -> Position:
    """A stored row's position."""
    return Position(row[_LEDGER_ID], row[_ENTRY_ID])


STEP_MESSAGES = 4000
"""Messages that deliveries together make in one event-loop step before the next one
waits for a later step (~4 ms of Python on the fast path)."""


class _StepBudget:
    """What the deliveries of one event loop made in its current step.

    Consumers woken together (by one flush completing their acks, or one read completing
    their ranges) would otherwise each make their batch in the same step: 100 consumers
    of 1000 messages kept the loop from polling for ~90 ms. Past :data:`STEP_MESSAGES`,
    a delivery waits for a later step, so they take turns and the loop polls in between.
    """

    __slots__ = ("used",)

    def __init__(self) -> None:
        self.used = 0

    async def wait_turn(self) -> None:
        """Return at once if this step has room, else in a later step that has."""
        # One step at a time, checked again each step (an Event would wake every waiter
        # into one step together, which is what this prevents).
        while self.used >= STEP_MESSAGES:  # noqa: ASYNC110
            await asyncio.sleep(0)

    def spend(self, count: int) -> None:
        """Count ``count`` messages made in this step (reset when the next step starts)."""
        if count <= 0:
            return
        if not self.used:
            asyncio.get_running_loop().call_soon(self._reset)
        self.used += count

    def _reset(self) -> None:
        self.used = 0


_budgets: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _StepBudget] = (
    weakref.WeakKeyDictionary()
)


def _step_budget() -> _StepBudget:
    """The running loop's :class:`_StepBudget` (engines may run on several loops)."""
    loop = asyncio.get_running_loop()
    budget = _budgets.get(loop)
    if budget is None:
        budget = _budgets[loop] = _StepBudget()
    return budget


class _ByteBudget:
    """How many more stored bytes one delivery may hand out (no limit: None).

    The first message always fits; once one does not, the budget is spent, so nothing
    after it goes out of order."""

    __slots__ = ("left",)

    def __init__(self, max_bytes: int | None) -> None:
        self.left = max_bytes

    @property
    def limited(self) -> bool:
        return self.left is not None

    @property
    def spent(self) -> bool:
        return self.left == 0

    def fits(self, entry: Entry, *, first: bool) -> bool:
        """Room for ``entry`` (``first``: nothing was taken yet); takes its bytes if so."""
        if self.left is None:
            return True
        if not first and entry.size > self.left:
            self.left = 0  # full: what follows waits too, so order holds
            return False
        self.left = max(0, self.left - entry.size)
        return True


class Subscription(SubscriptionState):
    """A durable, named cursor on a topic, with its consumers and delivery state."""

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
        self.drop_prefetch()  # read for the consumer that left: its successor reads anew
        released = [k for k, c in self._pending.items() if c == name]
        for key in released:
            del self._pending[key]
            self._requeue(key_position(key), 0)  # an expired delivery: no nack delay
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
            if messages and self.topic.ledger.store.read_ahead:
                self.prefetch_next()  # read on while the consumer works on these
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
        fields = (
            entry.key,
            tuple(entry.properties.items()),
            entry.publish_time,
            entry.value,
            position_key(position),
            None if entry.txn_id is None else entry.txn_id.seq,
            self._redelivery.get(position, 0),
        )
        return Message(*fields)

    def _deliver(self, entry: Entry, consumer: str) -> Message:
        key = position_key(entry.position)
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
        """Fill ``out`` for ``consumer``: positions waiting for replay first, then entries
        read from ``read_position`` on (the path depends on the subscription)."""
        if consumer not in self.consumers:
            return  # detached (closed) while waiting
        if self.type in _ORDERED and next(iter(self.consumers), None) != consumer:
            return  # only the exclusive or active failover consumer receives
        if self.type is SubscriptionType.KEY_SHARED:
            self._prune_key_state()
        budget = _ByteBudget(max_bytes)
        if self._replay:
            await self._deliver_replay(out, consumer, max_messages, budget)
        if self.type is SubscriptionType.KEY_SHARED:
            self._held_keys = {self._keys.get(p) for p in self._replay}
        await self._deliver_new(out, consumer, max_messages, budget)

    def _prune_key_state(self) -> None:
        """key_shared: forget the keys of positions no longer pending or waiting, and
        recompute which consumer holds each key and which keys replay holds back."""
        live = {key_position(k) for k in self._pending} | set(self._replay)
        self._keys = {p: k for p, k in self._keys.items() if p in live}
        self._key_holders = {self._keys.get(key_position(p)): c for p, c in self._pending.items()}
        self._held_keys = {self._keys.get(p) for p in self._replay}

    async def _deliver_replay(
        self, out: list[Message], consumer: str, max_messages: int, budget: _ByteBudget
    ) -> None:
        """The first read path: positions waiting for replay (nacked, released or held
        back), re-read by position and delivered first."""
        candidates = self._replay_candidates(consumer, max_messages)
        if not candidates:
            return
        entries = await self.topic.ledger.read_positions(candidates)
        found = {e.position for e in entries}
        for position in candidates:
            if position not in found:  # trimmed by retention
                self._replay.discard(position)
        cursor = self.cursor
        for entry in entries:
            position = entry.position
            if cursor.is_acked(position) or self._skip(entry):
                self._replay.discard(position)
                continue
            self._keys[position] = entry.key
            if (
                len(out) < max_messages
                and self._target(entry, consumer) == consumer
                and budget.fits(entry, first=not out)
            ):
                self._replay.discard(position)
                out.append(self._deliver(entry, consumer))

    async def _deliver_new(
        self, out: list[Message], consumer: str, max_messages: int, budget: _ByteBudget
    ) -> None:
        """Read on from ``read_position`` up to the read limit and deliver what is due,
        until ``out`` or the byte budget is full or nothing more is readable.

        The second read path: an ordered subscription without a byte budget reads raw
        rows (:meth:`_read_rows`) and delivers them in one pass (:meth:`_deliver_rows`)
        when it can. The third: the others read entries (and rows that need the
        per-entry rules are decoded into entries), delivered one by one
        (:meth:`_deliver_entries`)."""
        ordered = self.type in _ORDERED
        scanned = 0  # key_shared: entries looked at, held back ones included
        step = _step_budget()
        while len(out) < max_messages and not budget.spent:
            limit = self.read_limit
            if limit is None or self.read_position > limit:
                break
            remaining = max_messages - len(out)
            seeks = self._seeks
            rows: list[Row] | None = None
            entries: list[Entry] = []
            if ordered and not budget.limited:
                rows = await self._read_rows(limit, remaining)
                if rows is not None and not rows:
                    break
            if rows is None:
                if self.type is SubscriptionType.KEY_SHARED:
                    if scanned >= _KEY_SHARED_LOOKAHEAD:
                        break
                    chunk = _READ_CHUNK
                elif ordered:
                    chunk = remaining  # unread ones stay unread (see _deliver_entries)
                else:
                    chunk = min(_READ_CHUNK, remaining)
                entries = await self.topic.ledger.read(self.read_position, limit, chunk)
                if not entries:
                    break
                scanned += len(entries)
            made = len(out)
            await step.wait_turn()
            if self._seeks != seeks:
                continue  # a seek came in while this read or waited: go on from its position
            if rows is not None:
                if self._deliver_rows(rows, consumer, remaining, out):
                    step.spend(len(out) - made)
                    continue
                entries = [decode_row(row) for row in rows]  # the per-entry rules
            self._deliver_entries(entries, out, consumer, max_messages, budget)
            step.spend(len(out) - made)

    async def _read_rows(self, limit: Position, remaining: int) -> list[Row] | None:
        """An ordered subscription's next raw rows: what the last delivery read past its
        batch, else the prefetched range, else a read of a little more than is missing
        (markers and aborted entries are skipped); what lies past the last delivered
        message stays unread. None when a ledger switched tiers meanwhile (read entries
        then)."""
        rows = self._take_leftover(limit)
        if rows is None:
            rows = await self._take_prefetch(limit)
        if rows is None:
            ahead = int(remaining * self._skip_ratio * 1.25) + 32  # a read costs more
            self._read_size = min(remaining + ahead, _MAX_ROWS)
            rows = await self.topic.ledger.read_rows(self.read_position, limit, self._read_size)
        if self._read_on(rows, limit):
            # One loop step for the read to send its query: a task runs only when the loop
            # gets control, and delivering these keeps it busy for a millisecond or so.
            await asyncio.sleep(0)
        return rows

    def _read_on(self, rows: list[Row] | None, limit: Position) -> bool:
        """On a store whose reads run beside the loop
        (:attr:`~txnstream.ledger.Store.read_ahead`), start reading what follows ``rows``
        (a full read: there may be more) before they are delivered, as the next
        :meth:`_take_prefetch` will want it: the read then overlaps their delivery, the
        consumer's work and its ack's commit (PostgreSQL, receive + ack of 1,000 from a
        backlog: ~1.4x over starting it when the delivery ends). Whether it started."""
        if (
            not rows
            or self._prefetch is not None
            or len(rows) < self._read_size
            or not self.topic.ledger.store.read_ahead
        ):
            return False
        last = _row_at(rows[-1])
        return self._start_prefetch(Position(last.ledger_id, last.entry_id + 1), limit)

    def _start_prefetch(self, start: Position, limit: Position) -> bool:
        """Read ``_read_size`` rows from ``start`` up to ``limit`` in a task of its own, for
        :meth:`_take_prefetch`; whether there was anything to read."""
        if start > limit:
            return False
        task = asyncio.get_running_loop().create_task(
            self.topic.ledger.read_rows(start, limit, self._read_size)
        )
        self._prefetch = (start, task)
        return True

    def _deliver_entries(
        self,
        entries: list[Entry],
        out: list[Message],
        consumer: str,
        max_messages: int,
        budget: _ByteBudget,
    ) -> None:
        """Entries just read, in order, each by the rules: markers and aborted data are
        acknowledged, entries held by a transactional ack or due to another consumer
        (or beyond the byte budget) wait for replay, the rest go into ``out``."""
        ordered = self.type in _ORDERED
        key_shared = self.type is SubscriptionType.KEY_SHARED
        cursor = self.cursor
        ledger = self.topic.ledger
        for entry in entries:
            position = entry.position
            if ordered and len(out) >= max_messages:
                break  # read past the batch: leave the rest unread
            self.read_position = Position(position.ledger_id, position.entry_id + 1)
            if self._skip(entry):
                cursor.ack(position, ledger)
                continue
            if cursor.is_acked(position) or self.withheld(position):
                continue
            if self._txn_pending(position):
                self._hold(entry)  # deliverable again if that transaction aborts
                continue
            held = key_shared and entry.key in self._held_keys
            if (
                not held
                and len(out) < max_messages
                and self._target(entry, consumer) == consumer
                and budget.fits(entry, first=not out)
            ):
                out.append(self._deliver(entry, consumer))
            else:
                self._hold(entry)  # beyond the budget too: first in line next time

    def prefetch_next(self) -> None:
        """Start reading the range the next delivery will read, now: for a caller about to
        wait for its acknowledgement to be durable (the ack's fsync leaves the event loop
        idle, and the range read runs on a reader thread meanwhile; draining a backlog
        with receive + cumulative ack: ~15% faster here), and, on a store whose reads
        run beside the loop (:attr:`~txnstream.ledger.Store.read_ahead`), as soon as a
        delivery ends: the read then overlaps the consumer's work and its ack's commit,
        not only the commit (PostgreSQL, receive + ack of 1,000: ~1.4x).

        Only for an ordered subscription that has read before and has more below its
        read limit, when no delivery runs and no prefetch is pending; its rows are
        checked like :meth:`_take_leftover`'s when taken (stored rows never change), and a
        read that no longer fits is dropped.
        """
        if (
            self._prefetch is not None
            or not self._read_size
            or self._replay
            or self._lock.locked()
            or self.closed
            or self.deleted
            or self.type not in _ORDERED
        ):
            return
        limit = self.read_limit
        start = self.read_position
        if self._leftover:  # already read past the last delivery: read on after those rows
            last = _row_at(self._leftover[-1])
            start = Position(last.ledger_id, last.entry_id + 1)
        if limit is not None:
            self._start_prefetch(start, limit)

    async def _take_prefetch(self, limit: Position) -> list[Row] | None:
        """The rows of :meth:`prefetch_next` if they start at ``read_position`` and lie
        within ``limit`` (awaiting the read if it still runs); None otherwise."""
        pending = self._prefetch
        if pending is None:
            return None
        if pending[0] != self.read_position:
            self.drop_prefetch()
            return None
        self._prefetch = None
        try:
            rows = await pending[1]
        except Exception:  # noqa: BLE001 - the caller reads again: that read says what fails
            return None
        if rows and _row_at(rows[-1]) > limit:
            return None
        return rows

    def _take_leftover(self, limit: Position) -> list[Row] | None:
        """The rows the last delivery read past its batch (its leftover), if they still
        start at ``read_position`` and lie within ``limit`` (stored rows never change;
        whether each is acknowledged, aborted or held is decided afresh as for rows just
        read)."""
        rows, self._leftover = self._leftover, []
        if not rows or _row_at(rows[0]) != self.read_position or _row_at(rows[-1]) > limit:
            return None
        return rows

    def _deliver_rows(
        self, rows: list[Row], consumer: str, remaining: int, out: list[Message]
    ) -> bool:
        """Deliver freshly read rows to the one consumer of an ordered subscription in
        one pass: one decode of the kept payloads, one message object each, pending
        and cursor updates per batch. False (nothing done) when a row may need the
        per-entry rules (acknowledged already, or held by a transactional ack)."""
        if self._txn_acks or self._txn_cumulative or self.dead_letters:
            return False
        first = _row_at(rows[0])
        cursor = self.cursor
        md = cursor.mark_delete
        if md is not None and md >= first:
            return False
        if cursor.acked and cursor.acked[-1] >= first:
            return False
        aborted = (
            self.topic.buffer.aborted_seqs
            if self.isolation is Isolation.READ_COMMITTED
            else _NOTHING
        )
        keep = [
            row
            for row in rows
            if not row[_KIND] and (row[_TXN_SEQ] is None or row[_TXN_SEQ] not in aborted)
        ]
        if len(keep) > remaining:
            keep = keep[:remaining]
            cut = rows.index(keep[-1]) + 1  # nothing past the last delivered
            self._leftover = rows[cut:]
            rows = rows[:cut]
        if len(keep) != len(rows):
            # Markers and aborted data: acknowledged by the dispatcher, lazily (a
            # cumulative ack covers them; see _settle_skipped).
            self._skipped.extend(
                [
                    (ledger_id << 64) | entry_id
                    for ledger_id, entry_id, kind, txn_seq, _ in rows
                    if kind or (txn_seq is not None and txn_seq in aborted)
                ]
            )
        if keep:  # the share of skipped rows among those processed (not the leftover)
            skipped_share = (len(rows) - len(keep)) / len(keep)
            self._skip_ratio = 0.5 * self._skip_ratio + 0.5 * min(skipped_share, 4.0)
        last = _row_at(rows[-1])
        self.read_position = Position(last.ledger_id, last.entry_id + 1)
        if not keep:
            return True
        # A message wraps body + (position key, txn seq, count) (see Message), all made
        # by C calls: ``add`` joins the tuples, ``Message`` is a msgspec struct.
        bodies = decode_payloads([row[_PAYLOAD] for row in keep])
        keys = [(ledger_id << 64) | entry_id for ledger_id, entry_id, _, _, _ in keep]
        redelivery = self._redelivery
        counts = [redelivery.get(_row_at(row), 0) for row in keep] if redelivery else repeat(0)
        tails = zip(keys, map(_TXN, keep), counts, strict=False)  # counts may repeat
        out.extend(starmap(Message, map(add, bodies, tails)))
        self._pending.update(zip(keys, repeat(consumer), strict=False))
        if keys[-1] > self._pending_max:
            self._pending_max = keys[-1]
        return True

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
        aborted = self.topic.buffer.aborted_seqs_around(start, limit)
        acked = [p for p in self.cursor.acked if p <= limit]
        return await self.topic.ledger.count_data(
            start, limit, except_txns=aborted, except_positions=acked
        )

    # -- invariants ----------------------------------------------------------------

    def _check(self) -> None:
        """Assert the delivery state's invariants (the model tests call it after every
        step, as sortedcontainers' ``_check``): what is pending, waiting for replay or
        held by a transaction is disjoint, unacknowledged and already read; the cursor's
        individual acks lie above its mark-delete position; read-past rows (kept only
        by an ordered subscription) are in log order. (Whether they are still next in
        line is checked when they are taken: a cumulative ack or a ledger roll-over may
        leave them behind.)"""
        pending = {key_position(key) for key in self._pending}
        replay = set(self._replay)
        held = set(self._txn_acks)
        assert not pending & replay, f"pending and in replay: {pending & replay}"
        assert not (pending | replay) & held, "pending or in replay while a txn holds it"
        assert all(key <= self._pending_max for key in self._pending)
        assert set(self._pending.values()) <= set(self.consumers), "pending at a detached consumer"
        cursor = self.cursor
        for position in pending | replay:
            assert not cursor.is_acked(position), f"{position} acknowledged yet undelivered"
            assert position < self.read_position, f"{position} not read yet"
        md = cursor.mark_delete
        assert md is None or not cursor.acked or cursor.acked[0] > md
        assert all(a < b for a, b in zip(self._skipped, self._skipped[1:], strict=False))
        if self._leftover:
            assert self.type in _ORDERED
            assert all(
                _row_at(a) < _row_at(b)
                for a, b in zip(self._leftover, self._leftover[1:], strict=False)
            )
        assert self._prefetch is None or self.type in _ORDERED
