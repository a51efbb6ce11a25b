"""A subscription's state and its acknowledgement rules: the cursor, what is delivered
and unacknowledged, what waits for redelivery, and acks held by open transactions.

:class:`~txnstream.dispatcher.Subscription` adds consumers and delivery on top. Acknowledged
positions go to the cursor (individual acks above its mark-delete position, cumulative
acks move it); a transactional ack holds its positions until the transaction ends.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import time
from collections.abc import Callable, Sequence

from sortedcontainers import SortedSet

from txnstream.ledger import (
    AckConflictError,
    InvalidArgumentError,
    Position,
    Row,
    TxnId,
    WriteBatch,
)
from txnstream.txn_buffer import Topic

from ._cursor import Cursor
from ._message import Consumer, Isolation, SubscriptionType, key_position, position_key
from ._policy import ConsumerPolicy

_DELAYABLE = (SubscriptionType.SHARED, SubscriptionType.KEY_SHARED)


def read_limit(topic: Topic, isolation: Isolation) -> Position | None:
    """The newest position a subscription of ``isolation`` may read now, which is also
    where ``latest`` puts a cursor: read_committed, the stable position (as Kafka starts
    at the last stable offset: the entries of a transaction open now are delivered once
    it commits); read_uncommitted, the last confirmed position."""
    buffer = topic.buffer
    if isolation is Isolation.READ_COMMITTED:
        return buffer.max_read_position
    return buffer.last_confirmed


class SubscriptionState:
    """A durable, named cursor on a topic and what it has delivered (see module doc)."""

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
        # delivered, unacknowledged -> consumer, keyed by position_key(position); _pending_max is
        # an upper bound of the keys (a cumulative ack at or above it clears them all)
        self._pending: dict[int, str] = {}
        self._pending_max = -1
        # skipped (marker or aborted) positions read by _deliver_rows, as position_key()s in
        # ascending order, not yet in the cursor; and the share of rows skipped lately
        self._skipped: list[int] = []
        self._skip_ratio = 0.125
        # the leftover: rows an ordered delivery read past its last delivered message, from
        # read_position on: the next delivery starts with them instead of reading them
        # again (used only while read_position still points at the first)
        self._leftover: list[Row] = []
        # the ordered delivery's next range, read while its consumer waits for an ack to
        # be durable (see Subscription.prefetch_next): where it starts, and the read
        self._prefetch: tuple[Position, asyncio.Task[list[Row] | None]] | None = None
        self._read_size = 0  # rows the last ordered delivery read at once
        self._seeks = 0  # counts seek() calls: a delivery that awaited sees one came in
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
        # consumer policy (see _policy): positions past the redelivery limit waiting for
        # their move to the dead-letter topic; nacked positions waiting for their delay to
        # pass (-> not before, ms since the epoch) and the timer of the earliest; stored
        # redelivery rows, the ones to write and the ones to forget
        self.policy = ConsumerPolicy()
        self.dead_letters: SortedSet = SortedSet()
        self.on_dead_letter: Callable[[], None] | None = None
        self._delayed: dict[Position, int] = {}
        self._delay_heap: list[tuple[int, Position]] = []  # (not before, position), lazily
        self._delay_timer: asyncio.TimerHandle | None = None
        self._delay_timer_at = 0
        # the topic's delivery times of messages sent with one (shared by its subscriptions)
        self.deliver_at: dict[Position, int] = {}
        self._stored: set[Position] = set()
        self._dirty: dict[Position, int] = {}  # position -> not before (ms)
        self._forget: list[Position] = []
        self._forget_all = False

    def drop_prefetch(self) -> None:
        """Forget the prefetched range, cancelling the read if it still runs (a seek, the
        subscription's or its topic's deletion, the engine's close)."""
        pending, self._prefetch = self._prefetch, None
        if pending is None:
            return
        task = pending[1]
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()  # a failed prefetch is nobody's error: the next read retries

    # -- limits and persistence ------------------------------------------------------

    @property
    def read_limit(self) -> Position | None:
        """The newest position this subscription may read."""
        return read_limit(self.topic, self.isolation)

    def prepare_cursor_write(self, batch: WriteBatch) -> None:
        """Add the cursor's current durable form to ``batch``."""
        self._settle_skipped()
        batch.put_cursor(self.topic.topic_id, self.name, self.cursor.encode())
        if self._dirty or self._forget or self._forget_all:
            self.prepare_redelivery_write(batch)

    def prepare_redelivery_write(self, batch: WriteBatch) -> None:
        """Add the redelivery state changed since the last write to ``batch``."""
        topic_id, name = self.topic.topic_id, self.name
        if self._forget_all:
            self._forget_all = False
            batch.drop_redeliveries(topic_id, name)
        forget, self._forget = self._forget, []
        for position in forget:
            if position not in self._dirty:
                self._stored.discard(position)
                batch.drop_redelivery(topic_id, name, position.ledger_id, position.entry_id)
        dirty, self._dirty = self._dirty, {}
        for position, not_before in dirty.items():
            count = self._redelivery.get(position)
            if count is None:
                continue
            self._stored.add(position)
            batch.put_redelivery(
                topic_id, name, position.ledger_id, position.entry_id, count, not_before
            )

    def load_redelivery(self, position: Position, count: int, not_before_ms: int) -> None:
        """Restore a stored redelivery state (recovery): past the limit, the position
        waits for its dead-letter move; delayed, for its time; acknowledged, forgotten."""
        self._stored.add(position)
        if self.cursor.is_acked(position):
            self._forget.append(position)
            return
        self._redelivery[position] = count
        limit = self.policy.max_redeliveries
        if limit is not None and count > limit:
            self.dead_letters.add(position)
        elif not_before_ms > _now_ms() and self.type in _DELAYABLE:
            self._delay(position, not_before_ms)

    def withheld(self, position: Position) -> bool:
        """Whether ``position`` is kept from delivery: waiting for its nack delay, its
        delivery time (shared and key_shared; then it waits in the delay timer) or its
        dead-letter move."""
        if not (self._delayed or self.dead_letters or self.deliver_at):
            return False  # the usual case, per entry delivered
        if position in self._delayed or position in self.dead_letters:
            return True
        if self.deliver_at and self.type in _DELAYABLE:
            at = self.deliver_at.get(position)
            if at is not None and at > _now_ms():
                self._delay(position, at)
                return True
        return False

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
            upto_key = position_key(upto)
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
                self._pending.pop(position_key(position), None)
                self._replay.discard(position)
        if self._redelivery:
            for position in [p for p in self._redelivery if self.cursor.is_acked(p)]:
                del self._redelivery[position]
                self._delayed.pop(position, None)
                self.dead_letters.discard(position)
                if position in self._stored:
                    self._forget.append(position)

    def _settle_skipped(self) -> None:
        """Put the skipped positions not covered yet into the cursor."""
        if self._skipped:
            skipped, self._skipped = self._skipped, []
            self.cursor.ack_many([key_position(k) for k in skipped], self.topic.ledger)

    def hold_for_txn(self, positions: Sequence[Position], cumulative: bool, txn: TxnId) -> None:
        """Make positions pending in ``txn``: not redelivered until it ends."""
        if cumulative:
            upto = max(positions)
            previous = self._txn_cumulative.get(txn)
            self._txn_cumulative[txn] = upto if previous is None else max(previous, upto)
            upto_key = position_key(upto)
            held = [key_position(k) for k in self._pending if k <= upto_key]
            held += [p for p in self._replay if p <= upto]
        else:
            held = list(positions)
        for position in held:
            self._txn_acks[position] = txn
            self._pending.pop(position_key(position), None)
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
                    self._requeue(position, 0)  # counted; the nack delay is for nacks
        self.topic.notify()

    def nack(self, positions: Sequence[Position], delay_ms: int | None = None) -> None:
        """Redeliver ``positions`` (those delivered and unacknowledged), count + 1, after
        ``delay_ms`` (default: the policy's ``nack_delay_ms``; shared and key_shared only)."""
        self._check_positions(positions)
        for position in positions:
            if self._pending.pop(position_key(position), None) is not None:
                self._requeue(position, delay_ms)
        self.topic.notify()

    def release(self, positions: Sequence[Position]) -> None:
        """Take back delivered positions nobody received (their receiver went away before
        reading them): first in line again, not counted as redeliveries."""
        for position in positions:
            if self._pending.pop(position_key(position), None) is not None:
                self._replay.add(position)
        self.topic.notify()

    def seek(self, position: Position | str) -> None:
        """Everything before ``position`` acknowledged, everything from it on not.

        ``latest`` (and a position past the end of the log, on an empty topic too) starts
        after the read limit (:func:`read_limit`): the next new message is delivered, and for
        read_committed nothing of a transaction still open is skipped."""
        if position == "earliest":
            mark_delete: Position | None = None
            start = Position(0, 0)
        else:
            if position != "latest":
                assert isinstance(position, Position)
                last = self.topic.buffer.last_confirmed
                previous = self.topic.ledger.previous(position)
                if last is None or (previous is not None and previous >= last):
                    position = "latest"  # at or past the end: from the next new entry on
                else:
                    mark_delete, start = previous, position
            if position == "latest":
                mark_delete = self.read_limit
                start = (
                    Position(0, 0)
                    if mark_delete is None
                    else Position(mark_delete.ledger_id, mark_delete.entry_id + 1)
                )
        self.cursor.reset(mark_delete)
        self._seeks += 1
        self._skipped.clear()
        self._leftover = []
        self.drop_prefetch()
        self._pending.clear()
        self._pending_max = -1
        self._replay.clear()
        self._redelivery.clear()
        self._delayed.clear()
        self._delay_heap.clear()
        self.dead_letters.clear()
        self._dirty.clear()
        self._forget.clear()
        if self._stored:
            self._stored.clear()
            self._forget_all = True
        self.read_position = start
        self.topic.notify()

    def _requeue(self, position: Position, delay_ms: int | None = None) -> None:
        """Count a release without an ack; then deliver ``position`` again (after a
        delay), or, past the redelivery limit, leave it to the dead-letter move."""
        count = self._redelivery[position] = self._redelivery.get(position, 0) + 1
        self.redeliveries += 1
        policy = self.policy
        not_before = 0
        if delay_ms is None:
            delay_ms = policy.nack_delay_ms
        if policy.max_redeliveries is not None and count > policy.max_redeliveries:
            self.dead_letters.add(position)
            if self.on_dead_letter is not None:
                self.on_dead_letter()
        elif delay_ms > 0 and self.type in _DELAYABLE:
            not_before = _now_ms() + delay_ms
            self._delay(position, not_before)
        else:
            self._replay.add(position)
        if policy.persistent or position in self._stored:
            self._dirty[position] = not_before

    def _delay(self, position: Position, not_before_ms: int) -> None:
        self._delayed[position] = not_before_ms
        heapq.heappush(self._delay_heap, (not_before_ms, position))
        if self._delay_timer is None or not_before_ms < self._delay_timer_at:
            self._arm(not_before_ms)

    def _arm(self, at_ms: int) -> None:
        """(Re)arm the one timer of this subscription's delays for ``at_ms``."""
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None
        if self.closed or self.deleted:
            return
        self._delay_timer_at = at_ms
        self._delay_timer = asyncio.get_running_loop().call_later(
            max(0.0, (at_ms - _now_ms()) / 1000), self._release_delayed
        )

    def _release_delayed(self) -> None:
        """Deliver the delayed positions whose time has come (first in line)."""
        self._delay_timer = None
        now = _now_ms()
        heap, delayed = self._delay_heap, self._delayed
        released = False
        while heap and (heap[0][0] <= now or delayed.get(heap[0][1]) != heap[0][0]):
            at, position = heapq.heappop(heap)
            if delayed.get(position) != at:
                continue  # acknowledged, sought past or delayed again since
            del delayed[position]
            if not self.cursor.is_acked(position):
                self._replay.add(position)
                released = True
        if heap:
            self._arm(heap[0][0])
        if released:
            self.topic.notify()

    def cancel_timers(self) -> None:
        """Stop the delay timer (the subscription was deleted or the engine closes)."""
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None

    def redelivery_count(self, position: Position) -> int:
        """How many times ``position`` was released without an acknowledgement."""
        return self._redelivery.get(position, 0)

    @property
    def delayed(self) -> int:
        """Messages waiting for their nack delay to pass."""
        return len(self._delayed)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
