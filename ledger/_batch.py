"""What the layers write: :class:`WriteBatch`, typed operations that become durable together.

A batch records *what* is stored, never how: each typed method queues one or more
operations, an operation being a dialect-neutral key (the constants below) and its
parameters. The store that applies the batch maps each key to its own statement (see
:mod:`txnstream.ledger._sqlite_sql` for SQLite), so a second store (PostgreSQL) needs its
own statement table, not a change to any caller.

Cost: an operation queued right after one with the same key joins its row list (one
statement of many rows when applied); the mapping from key to statement happens once per
run of rows, in the flush, never per message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

Params = Sequence[Any]
Ops = list[tuple[str, list[Params]]]
"""A batch's content: ``(operation, rows)`` pairs in order (a row is its parameters)."""

# -- operation keys, by domain (the statement tables of every store name each one) ------

# the log: entries and ledgers
ENTRY = "entry.insert"
"""``(topic_id, ledger_id, entry_id, kind, txn, data)``"""
LEDGER_OPEN = "ledger.open"
LEDGER_SEAL = "ledger.seal"
LEDGER_DROP = "ledger.drop"
LEDGER_HAS_ABORTS = "ledger.has_aborts"
LEDGER_REMOTE = "ledger.remote"
LEDGER_ENTRIES_DROP = "ledger.entries_drop"
LEDGER_ABORTED_DROP = "ledger.aborted_drop"
TRIM_ENTRIES = "trim.entries"
TRIM_LEDGERS = "trim.ledgers"
TRIM_ABORTED = "trim.aborted"
ABORTED = "aborted.put"
# the catalog: topics, producers
TOPIC_CREATE = "topic.create"
NEXT_TOPIC_ID = "topic.next_id"
TOPIC_RETENTION = "topic.retention"
TOPIC_OFFLOAD = "topic.offload"
PARTITIONED_CREATE = "partitioned.create"
"""``(name, partitions, created_ms)``: a partitioned topic (its partitions are topics)"""
PARTITIONED_DROP = "partitioned.drop"
"""``(name,)``"""
TOPIC_TTL = "topic.ttl"
"""``(ttl_ms or None, topic_id)``"""
PRODUCER = "producer.put"
PRODUCER_DROP = "producer.drop"
"""``(topic_id, producer)``: forget an idempotent producer (its state expired)"""
TOPIC_DROP_ENTRIES = "topic.drop.entries"
TOPIC_DROP_LEDGERS = "topic.drop.ledgers"
TOPIC_DROP_ABORTED = "topic.drop.aborted"
TOPIC_DROP_PRODUCERS = "topic.drop.producers"
TOPIC_DROP = "topic.drop"
STORE_META = "store.meta"
"""``(key, value)``: one of the store's own settings (its identity, ...)"""
# subscriptions and their cursors
SUBSCRIPTION_CREATE = "subscription.create"
CURSOR = "subscription.cursor"
SUBSCRIPTION_DROP = "subscription.drop"
SUBSCRIPTIONS_DROP = "subscription.drop_topic"
SUBSCRIPTION_POLICY = "subscription.policy"
"""``(policy or None, topic_id, name)``: the encoded consumer policy"""
REDELIVERY = "redelivery.put"
"""``(topic_id, name, ledger_id, entry_id, count, not_before_ms)`` (upsert)"""
REDELIVERY_DROP = "redelivery.drop"
"""``(topic_id, name, ledger_id, entry_id)``"""
REDELIVERIES_DROP = "redelivery.drop_subscription"
"""``(topic_id, name)``"""
REDELIVERIES_DROP_TOPIC = "redelivery.drop_topic"
"""``(topic_id,)``"""
DELIVERY_TIME = "delivery_time.put"
"""``(topic_id, ledger_id, entry_id, deliver_at_ms)``"""
DELIVERY_TIMES_PRUNE = "delivery_time.prune"
"""``(deliver_at_ms,)``: forget every delivery time at or before it"""
DELIVERY_TIMES_DROP_TOPIC = "delivery_time.drop_topic"
"""``(topic_id,)``"""
# the coordinator
NEXT_TXN_SEQ = "txn.next_seq"
TXN = "txn.put"
FINISH_KEY = "txn.finish_key"
TXNS_PRUNE = "txn.prune"
PRODUCER_EPOCH = "txn.producer_epoch"
"""``(name, epoch, session, used_ms, txn_seq)`` (upsert): a transactional id's producer epoch"""
PRODUCER_EPOCH_DROP = "txn.producer_epoch_drop"
"""``(name,)``"""
# snapshots of transaction buffers
SNAPSHOT = "snapshot.put"
SNAPSHOTS_UPTO_DROP = "snapshot.drop_upto"
SNAPSHOTS_DROP = "snapshot.drop_topic"
SEGMENT = "segment.put"
SEGMENT_DROP = "segment.drop"
SEGMENTS_BELOW_DROP = "segment.drop_below"
SEGMENTS_DROP = "segment.drop_topic"

OPERATIONS = frozenset(
    value for name, value in dict(globals()).items() if name.isupper() and isinstance(value, str)
)
"""Every operation key: a store's statement table must name each one."""


class WriteBatch:
    """Operations that become durable together, plus what to do once they are.

    Build it and submit it (:meth:`Store.submit <txnstream.ledger.Store.submit>`) without
    awaiting in between: positions assigned while building must reach the writer in the
    order they were assigned. Hot paths skip the separate batch: they add straight to
    :attr:`Store.batch <txnstream.ledger.Store.batch>` (the one the next flush takes) and
    then submit that.

    Operations are applied in the order they were queued, in one store transaction with
    everything else of their flush; a later write of a row wins over an earlier one.
    """

    __slots__ = ("_callbacks", "_ops", "_txn_rows", "bytes", "entries")

    def __init__(self) -> None:
        self._ops: Ops = []
        self._callbacks: list[Callable[[], None]] = []
        self._txn_rows: dict[int, list[Any]] | None = None  # seq -> its queued txn row
        self.entries = 0
        """Log entries this batch appends (for metrics and backpressure)."""
        self.bytes = 0
        """Payload bytes of those entries (for the free-space estimate)."""

    # -- the generic queue (ledger-internal; the typed methods below are the API) -------

    def add(self, op: str, params: Params = ()) -> None:
        """Queue operation ``op`` with ``params``."""
        ops = self._ops
        if ops and ops[-1][0] == op:
            ops[-1][1].append(params)
        else:
            ops.append((op, [params]))

    def add_many(self, op: str, rows: Iterable[Params]) -> None:
        """Queue operation ``op`` once for each row of parameters."""
        rows = list(rows)
        if not rows:
            return
        ops = self._ops
        if ops and ops[-1][0] == op:
            ops[-1][1].extend(rows)
        else:
            ops.append((op, rows))

    @property
    def ops(self) -> Ops:
        """The queued ``(operation, rows)`` runs, in order (the store applies them)."""
        return self._ops

    def on_durable(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the event loop once the batch is durable (in order)."""
        self._callbacks.append(callback)

    @property
    def callback_count(self) -> int:
        """How many callbacks are registered so far (lets a caller tell whether its
        callback is still the last one, and so may take more work in order)."""
        return len(self._callbacks)

    def extend(self, other: WriteBatch) -> None:
        """Append ``other``'s operations after this batch's own and move its callbacks
        here (``other`` keeps no callback, so none runs twice and none keeps ``other`` in
        a reference cycle)."""
        ops = self._ops
        for op, rows in other._ops:
            if ops and ops[-1][0] == op:
                ops[-1][1].extend(rows)
            else:
                ops.append((op, list(rows)))
        self._callbacks.extend(other._callbacks)
        other._callbacks.clear()
        if other._txn_rows:
            # the later row of a transaction is the one a further record_txn updates
            if self._txn_rows is None:
                self._txn_rows = {}
            self._txn_rows.update(other._txn_rows)
        self.entries += other.entries
        self.bytes += other.bytes

    def clear(self) -> None:
        """Drop the operations and callbacks (the store calls it once they are durable:
        whoever still holds the batch then holds an empty shell, not its payloads)."""
        self._ops.clear()
        self._callbacks.clear()
        self._txn_rows = None

    @property
    def callbacks(self) -> list[Callable[[], None]]:
        """The durable callbacks, in order (the store runs them)."""
        return self._callbacks

    def __bool__(self) -> bool:
        return bool(self._ops or self._callbacks)

    # -- the log ----------------------------------------------------------------------

    def insert_entry(
        self,
        topic_id: int,
        ledger_id: int,
        entry_id: int,
        kind: int,
        txn: int | None,
        data: bytes,
    ) -> None:
        """Append one log entry (``kind``: 0 data, 1 commit, 2 abort; ``txn``: the
        transaction's sequence). Counts are the caller's (:attr:`entries`, :attr:`bytes`)."""
        params = (topic_id, ledger_id, entry_id, kind, txn, data)
        ops = self._ops  # (add, inline: this runs once per message of a fast send)
        if ops and ops[-1][0] == ENTRY:
            ops[-1][1].append(params)
        else:
            ops.append((ENTRY, [params]))

    def insert_entries(self, rows: Iterable[Params]) -> None:
        """Append log entries, rows as :meth:`insert_entry` takes them."""
        self.add_many(ENTRY, rows)

    def open_ledger(self, topic_id: int, ledger_id: int, created_ms: int, base_offset: int) -> None:
        """Record a new, open ledger of a topic whose first entry takes ``base_offset``
        (the partition offset Kafka clients see)."""
        self.add(LEDGER_OPEN, (topic_id, ledger_id, created_ms, base_offset))

    def seal_ledger(self, topic_id: int, ledger_id: int, entries: int, size: int) -> None:
        """Record a ledger's final entry count and payload bytes."""
        self.add(LEDGER_SEAL, (entries, size, topic_id, ledger_id))

    def drop_ledger(self, topic_id: int, ledger_id: int) -> None:
        """Delete an (empty) ledger's row."""
        self.add(LEDGER_DROP, (topic_id, ledger_id))

    def mark_has_aborts(self, topic_id: int, ledger_id: int) -> None:
        """Flag a ledger as holding aborted-index rows."""
        self.add(LEDGER_HAS_ABORTS, (topic_id, ledger_id))

    def trim_ledgers(self, topic_id: int, upto_ledger_id: int) -> None:
        """Delete the ledgers up to ``upto_ledger_id`` with their entries and the
        aborted-index rows that concern only them."""
        params = (topic_id, upto_ledger_id)
        self.add(TRIM_ENTRIES, params)
        self.add(TRIM_LEDGERS, params)
        self.add(TRIM_ABORTED, params)

    def move_ledger_remote(
        self, topic_id: int, ledger_id: int, url: str, size: int, checksum: str
    ) -> None:
        """Record that a ledger lives in the remote tier now, and delete its local
        entries and the aborted-index rows whose marker it holds."""
        self.add(LEDGER_REMOTE, (url, size, checksum, topic_id, ledger_id))
        self.add(LEDGER_ENTRIES_DROP, (topic_id, ledger_id))
        self.add(LEDGER_ABORTED_DROP, (topic_id, ledger_id))

    def put_aborted(self, row: Params) -> None:
        """Upsert an aborted-index row: ``(topic_id, txn, first_ledger, first_entry,
        last_ledger, last_entry, marker_ledger, marker_entry, stable_ledger,
        stable_entry)`` (the stable position may be None)."""
        self.add(ABORTED, row)

    # -- the catalog ------------------------------------------------------------------

    def create_topic(self, topic_id: int, name: str, created_ms: int) -> None:
        """Insert a topic's row and move the topic id counter past it."""
        self.add(TOPIC_CREATE, (topic_id, name, created_ms))
        self.add(NEXT_TOPIC_ID, (topic_id + 1,))

    def put_retention(self, topic_id: int, encoded: bytes | None) -> None:
        """Store a topic's encoded retention policy."""
        self.add(TOPIC_RETENTION, (encoded, topic_id))

    def put_offload_policy(self, topic_id: int, encoded: bytes | None) -> None:
        """Store a topic's encoded offload policy."""
        self.add(TOPIC_OFFLOAD, (encoded, topic_id))

    def create_partitioned(self, name: str, partitions: int, created_ms: int) -> None:
        """Record a partitioned topic: its name and partition count (its partitions are
        topics of their own, created beside it)."""
        self.add(PARTITIONED_CREATE, (name, partitions, created_ms))

    def drop_partitioned(self, name: str) -> None:
        """Forget a partitioned topic (its partitions are dropped as topics)."""
        self.add(PARTITIONED_DROP, (name,))

    def put_ttl(self, topic_id: int, ttl_ms: int | None) -> None:
        """Store a topic's message TTL in milliseconds (None: messages never expire)."""
        self.add(TOPIC_TTL, (ttl_ms, topic_id))

    def put_delivery_time(
        self, topic_id: int, ledger_id: int, entry_id: int, deliver_at_ms: int
    ) -> None:
        """Store the time (ms) before which a message is not delivered to shared and
        key_shared subscriptions."""
        self.add(DELIVERY_TIME, (topic_id, ledger_id, entry_id, deliver_at_ms))

    def prune_delivery_times(self, upto_ms: int) -> None:
        """Forget the delivery times at or before ``upto_ms`` (they have passed)."""
        self.add(DELIVERY_TIMES_PRUNE, (upto_ms,))

    def drop_topic(self, topic_id: int) -> None:
        """Delete a topic's row and its log: entries, ledgers, aborted index, producers."""
        for op in (
            TOPIC_DROP_ENTRIES,
            TOPIC_DROP_LEDGERS,
            TOPIC_DROP_ABORTED,
            TOPIC_DROP_PRODUCERS,
            DELIVERY_TIMES_DROP_TOPIC,
            TOPIC_DROP,
        ):
            self.add(op, (topic_id,))

    def put_producer(self, topic_id: int, producer: str, last_seq: int, positions: bytes) -> None:
        """Upsert an idempotent producer's last batch (its encoded first sequence and
        positions)."""
        self.add(PRODUCER, (topic_id, producer, last_seq, positions))

    def drop_producer(self, topic_id: int, producer: str) -> None:
        """Delete an idempotent producer's row (a later batch of it is a new producer's)."""
        self.add(PRODUCER_DROP, (topic_id, producer))

    # -- subscriptions ----------------------------------------------------------------

    def create_subscription(
        self,
        topic_id: int,
        name: str,
        type: str,
        isolation: str,
        cursor: bytes,
        created_ms: int,
    ) -> None:
        """Insert a subscription with its encoded cursor."""
        self.add(SUBSCRIPTION_CREATE, (topic_id, name, type, isolation, cursor, created_ms))

    def put_cursor(self, topic_id: int, name: str, cursor: bytes) -> None:
        """Store a subscription's encoded cursor."""
        self.add(CURSOR, (cursor, topic_id, name))

    def drop_subscription(self, topic_id: int, name: str) -> None:
        """Delete a subscription (and its redelivery state)."""
        self.add(SUBSCRIPTION_DROP, (topic_id, name))
        self.add(REDELIVERIES_DROP, (topic_id, name))

    def drop_subscriptions(self, topic_id: int) -> None:
        """Delete every subscription of a topic (and their redelivery state)."""
        self.add(SUBSCRIPTIONS_DROP, (topic_id,))
        self.add(REDELIVERIES_DROP_TOPIC, (topic_id,))

    def put_subscription_policy(self, topic_id: int, name: str, policy: bytes | None) -> None:
        """Store a subscription's encoded consumer policy (None: the defaults)."""
        self.add(SUBSCRIPTION_POLICY, (policy, topic_id, name))

    def put_redelivery(
        self,
        topic_id: int,
        name: str,
        ledger_id: int,
        entry_id: int,
        count: int,
        not_before_ms: int,
    ) -> None:
        """Upsert a position's redelivery state on a subscription: how many times it was
        released unacknowledged, and the time (ms) before which it is not delivered."""
        self.add(REDELIVERY, (topic_id, name, ledger_id, entry_id, count, not_before_ms))

    def drop_redelivery(self, topic_id: int, name: str, ledger_id: int, entry_id: int) -> None:
        """Forget a position's redelivery state (it was acknowledged)."""
        self.add(REDELIVERY_DROP, (topic_id, name, ledger_id, entry_id))

    def drop_redeliveries(self, topic_id: int, name: str) -> None:
        """Forget every position's redelivery state on a subscription (a seek)."""
        self.add(REDELIVERIES_DROP, (topic_id, name))

    def put_store_meta(self, key: str, value: str | int) -> None:
        """Set one of the store's own settings (see :meth:`Store.store_meta`)."""
        self.add(STORE_META, (key, value))

    # -- the coordinator --------------------------------------------------------------

    def reserve_txn_seqs(self, upto: int) -> None:
        """Record that transaction sequences below ``upto`` may have been handed out."""
        self.add(NEXT_TXN_SEQ, (upto,))

    def record_txn(self, row: list[Any]) -> None:
        """Upsert a transaction's whole row: ``[seq, state, timeout_ms, deadline_ms,
        transactional_id, label, fenced, topics, acks, created_ms, ended_ms, reason,
        owner]``.

        A row of the same transaction already queued in this batch is overwritten in
        place instead (one write of the row per flush, not one per change): the batch
        is applied in one store transaction, so only its final content matters.
        """
        rows = self._txn_rows
        if rows is None:
            self._txn_rows = {row[0]: row}
        else:
            queued = rows.get(row[0])
            if queued is not None:
                queued[:] = row
                return
            rows[row[0]] = row
        ops = self._ops  # (add, inline)
        if ops and ops[-1][0] == TXN:
            ops[-1][1].append(row)
        else:
            ops.append((TXN, [row]))

    def put_finish_key(self, key: str, created_ms: int) -> None:
        """Record a used ``finish`` idempotence key."""
        self.add(FINISH_KEY, (key, created_ms))

    def put_producer_epoch(
        self, name: str, epoch: int, session: str, used_ms: int, txn_seq: int | None
    ) -> None:
        """Record the producer epoch of transactional id ``name`` (in its owner's
        namespace), the bump's ``session``, when the id was last used and the seq of the
        epoch's newest transaction (None: none yet)."""
        self.add(PRODUCER_EPOCH, (name, epoch, session, used_ms, txn_seq))

    def drop_producer_epoch(self, name: str) -> None:
        """Forget transactional id ``name``'s producer epoch (it expired)."""
        self.add(PRODUCER_EPOCH_DROP, (name,))

    def prune_txns(self, ended_before_ms: int) -> None:
        """Delete the rows of transactions that ended before ``ended_before_ms``."""
        self.add(TXNS_PRUNE, (ended_before_ms,))

    # -- snapshots --------------------------------------------------------------------

    def put_snapshot(
        self,
        topic_id: int,
        snapshot_id: int,
        ledger_id: int,
        entry_id: int,
        taken_ms: int,
        data: bytes,
    ) -> None:
        """Upsert a snapshot of a topic's transaction buffer (taken at the position
        ``(ledger_id, entry_id)``, ``(-1, -1)`` for none)."""
        self.add(SNAPSHOT, (topic_id, snapshot_id, ledger_id, entry_id, taken_ms, data))

    def drop_snapshots_upto(self, topic_id: int, snapshot_id: int) -> None:
        """Delete a topic's snapshots up to ``snapshot_id`` (inclusive)."""
        self.add(SNAPSHOTS_UPTO_DROP, (topic_id, snapshot_id))

    def put_snapshot_segment(self, topic_id: int, segment_id: int, data: bytes) -> None:
        """Upsert a sealed segment of a topic's aborted set."""
        self.add(SEGMENT, (topic_id, segment_id, data))

    def drop_snapshot_segments(self, topic_id: int, segment_ids: Iterable[int]) -> None:
        """Delete some of a topic's segments."""
        self.add_many(SEGMENT_DROP, [(topic_id, segment_id) for segment_id in segment_ids])

    def drop_snapshot_segments_below(self, topic_id: int, segment_id: int) -> None:
        """Delete a topic's segments with an id below ``segment_id``."""
        self.add(SEGMENTS_BELOW_DROP, (topic_id, segment_id))

    def drop_topic_snapshots(self, topic_id: int) -> None:
        """Delete every snapshot and segment of a topic."""
        self.add(SEGMENTS_DROP, (topic_id,))
        self.add(SNAPSHOTS_DROP, (topic_id,))
