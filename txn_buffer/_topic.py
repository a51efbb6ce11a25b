"""Topic: a managed ledger, its transaction buffer, producer state and change signal.

Appends are *prepared* into a :class:`~txnstream.ledger.WriteBatch` synchronously (positions are
assigned in call order) and applied to the buffer by the batch's durable callback, so
the buffer only ever sees durable entries, in position order, and ``max_read_position``
never passes a non-durable entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from txnstream.ledger import (
    Catalog,
    EntryKind,
    ManagedLedger,
    Position,
    TailAppender,
    TxnId,
    WriteBatch,
    encode_payload,
    encode_payloads,
    encode_value,
    now_ms,
)

from ._buffer import TxnBuffer

_MARKER_VALUE = encode_value(None)

_Run = tuple[Position, Position, EntryKind, TxnId | None]
"""Consecutive entries of this topic, all of one kind and transaction: (first, last, ...)."""


@dataclass(slots=True)
class ProducerState:
    """An idempotent producer's last stored batch on one topic."""

    last_seq: int
    first_seq: int
    positions: list[Position]
    stored_ms: int
    """When that batch was stored (ms since the epoch): the state expires after
    ``EngineConfig.producer_expiry`` without a newer one."""


class Topic:
    """One topic's log, transaction buffer and idempotent-producer state."""

    def __init__(
        self,
        name: str,
        topic_id: int,
        ledger: ManagedLedger,
        buffer: TxnBuffer,
        producers: dict[str, ProducerState],
        created_ms: int,
    ) -> None:
        self.name = name
        self.topic_id = topic_id
        self.ledger = ledger
        self.buffer = buffer
        self.producers = producers
        self.created_ms = created_ms
        self.deleted = False
        self.markers_applied = 0
        """Markers applied to the buffer since open (drives the snapshot policy)."""
        # first/last prepared data position of each open transaction on this topic
        # (includes not-yet-durable sends, which the buffer cannot know yet).
        self._txn_spans: dict[int, list[Position]] = {  # by transaction sequence number
            txn_id.seq: [o.first, o.last] for txn_id, o in buffer.ongoing_txns.items()
        }
        self._changed: asyncio.Event | None = None  # made when someone waits
        self._durable_batch: WriteBatch | None = None
        self._durable_mark = 0
        self._durable_entries: list[_Run] = []

    # -- change notification -------------------------------------------------------

    def change_event(self) -> asyncio.Event:
        """An event set at the next change (durable append, marker, subscription news)."""
        event = self._changed
        if event is None:
            event = self._changed = asyncio.Event()
        return event

    def notify(self) -> None:
        """Wake everyone waiting on :meth:`change_event`."""
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    # -- appends -------------------------------------------------------------------

    def _joins_durable(self, batch: WriteBatch) -> bool:
        """True while appends to ``batch`` may still join this topic's durable callback
        in it: no other callback was registered after it (see :meth:`_durable_list`)."""
        return self._durable_batch is batch and self._durable_mark == batch.callback_count

    def _durable_list(self, batch: WriteBatch) -> list[_Run]:
        """The list of entries ``batch``'s callback applies to the buffer once durable.

        Consecutive appends to this topic share one callback (one buffer update and one
        wake-up per flush, not per send) as long as no other callback was registered in
        between: callbacks run in registration order, so entries still reach the buffer
        in position order.
        """
        if self._joins_durable(batch):
            return self._durable_entries
        entries: list[_Run] = []

        def applied() -> None:
            if self._durable_batch is batch:
                self._durable_batch = None  # no more appends join a durable batch
            if self.deleted:
                return
            buffer = self.buffer
            for first, last, kind, txn_id in entries:
                buffer.on_run(first, last, kind, txn_id)
                if kind is not EntryKind.DATA:
                    self.markers_applied += 1
            self.notify()

        batch.on_durable(applied)
        self._durable_batch = batch
        self._durable_mark = batch.callback_count
        self._durable_entries = entries
        return entries

    def prepare_data(
        self,
        batch: WriteBatch,
        messages: Sequence[tuple[str | None, bytes, dict[str, str]]],
        txn_id: TxnId | None,
    ) -> list[Position]:
        """Add data entries ``(key, packed value, properties)`` to ``batch``."""
        return self.prepare_payloads(batch, encode_payloads(messages, now_ms()), txn_id)

    def prepare_payloads(
        self, batch: WriteBatch, payloads: Sequence[bytes], txn_id: TxnId | None
    ) -> list[Position]:
        """Add data entries with encoded payloads (see :func:`~txnstream.ledger.encode_payload`)."""
        positions = self.ledger.prepare_data(
            batch, payloads, None if txn_id is None else txn_id.seq
        )
        if txn_id is not None:
            span = self._txn_spans.get(txn_id.seq)
            if span is None:
                self._txn_spans[txn_id.seq] = [positions[0], positions[-1]]
            else:
                span[1] = positions[-1]
        runs = self._durable_list(batch)
        if runs and (run := runs[-1])[3] is txn_id and run[2] is EntryKind.DATA:
            runs[-1] = (run[0], positions[-1], EntryKind.DATA, txn_id)  # the same run goes on
        else:
            runs.append((positions[0], positions[-1], EntryKind.DATA, txn_id))
        return positions

    def prepare_one(
        self,
        batch: WriteBatch,
        message: tuple[str | None, bytes, dict[str, str]],
        txn_id: TxnId | None,
        publish_ms: int | None = None,
    ) -> Position:
        """:meth:`prepare_data` for one message (a ``Transaction.send``)."""
        key, value, properties = message
        payload = encode_payload(key, value, properties, publish_ms or now_ms())
        position = self.ledger.prepare_one(batch, payload, None if txn_id is None else txn_id.seq)
        if txn_id is not None:
            span = self._txn_spans.get(txn_id.seq)
            if span is None:
                self._txn_spans[txn_id.seq] = [position, position]
            else:
                span[1] = position
        if self._joins_durable(batch):
            runs = self._durable_entries
            run = runs[-1] if runs else None
            if run is not None and run[3] is txn_id and run[2] is EntryKind.DATA:
                runs[-1] = (run[0], position, EntryKind.DATA, txn_id)  # the run goes on
                return position
        else:
            runs = self._durable_list(batch)
        runs.append((position, position, EntryKind.DATA, txn_id))
        return position

    def run_appender(self, batch: WriteBatch, txn_id: TxnId) -> TxnRunAppender | None:
        """A :class:`TxnRunAppender` for ``txn_id``'s next sends in ``batch``, right after a
        :meth:`prepare_one` of it; None when that send did not end the topic's last run."""
        runs = self._durable_entries
        if not self._joins_durable(batch):
            return None
        span = self._txn_spans.get(txn_id.seq)
        if not runs or span is None:
            return None
        run = runs[-1]
        if run[3] is not txn_id or run[2] is not EntryKind.DATA or run[1] != span[1]:
            return None
        return TxnRunAppender(
            self, batch, runs, run, span, self.ledger.tail_appender(batch, txn_id.seq)
        )

    def prepare_marker(self, batch: WriteBatch, kind: EntryKind, txn_id: TxnId) -> Position:
        """Add a COMMIT or ABORT marker (and the abort index row) to ``batch``."""
        payload = encode_payload(None, _MARKER_VALUE, {}, now_ms())
        (position,) = self.ledger.prepare_append(batch, [(kind, txn_id, payload)])
        span = self._txn_spans.pop(txn_id.seq, None)
        if kind is EntryKind.ABORT and span is not None:
            first, last = span
            Catalog.prepare_aborted(
                batch,
                self.topic_id,
                txn_id.seq,
                first,
                last,
                position,
                self.buffer.max_read_position,
            )
            self.ledger.mark_has_aborts(batch, position.ledger_id)
        self._durable_list(batch).append((position, position, kind, txn_id))
        return position

    def has_prepared_data(self, txn_id: TxnId) -> bool:
        """True if ``txn_id`` sent data here that no marker has ended yet."""
        return txn_id.seq in self._txn_spans

    # -- idempotent producers --------------------------------------------------------

    def duplicate_of(self, producer: str, sequence: int) -> list[Position] | None:
        """The stored positions if ``sequence`` is at or below the producer's last one.

        Returns None when the batch is new; ``[]`` for a duplicate whose positions are no
        longer known (only the producer's last batch is remembered).
        """
        state = self.producers.get(producer)
        if state is None or sequence > state.last_seq:
            return None
        return list(state.positions) if sequence == state.first_seq else []

    def record_producer(
        self, batch: WriteBatch, producer: str, sequence: int, positions: list[Position]
    ) -> None:
        """Remember the producer's batch (durable with the batch's data)."""
        last_seq = sequence + len(positions) - 1
        stored_ms = now_ms()
        self.producers[producer] = ProducerState(last_seq, sequence, positions, stored_ms)
        Catalog.prepare_producer(batch, self.topic_id, producer, sequence, positions, stored_ms)

    def expire_producers(self, batch: WriteBatch, before_ms: int) -> int:
        """Forget the producers whose last batch was stored before ``before_ms`` (from
        memory now, from the store with ``batch``; a batch of one after that is a new
        producer's); returns how many."""
        expired = [name for name, s in self.producers.items() if s.stored_ms < before_ms]
        for name in expired:
            del self.producers[name]
            Catalog.prepare_drop_producer(batch, self.topic_id, name)
        return len(expired)


class TxnRunAppender:
    """One transaction's further data entries to a topic within one batch, each extending
    the run the buffer applies once the batch is durable (see :meth:`Topic.run_appender`).

    Valid while the topic's last run is still this appender's (no other append and no other
    durable callback came in between) and the topic was not deleted; :meth:`append` says
    None otherwise, and the caller takes the full path.
    """

    __slots__ = ("_batch", "_run", "_runs", "_span", "_tail", "_topic")

    def __init__(
        self,
        topic: Topic,
        batch: WriteBatch,
        runs: list[_Run],
        run: _Run,
        span: list[Position],
        tail: TailAppender,
    ) -> None:
        self._topic = topic
        self._batch = batch
        self._runs = runs
        self._run = run
        self._span = span
        self._tail = tail

    def append(self, payload: bytes) -> Position | None:
        """Append one data entry; None (nothing done) if the appender no longer holds."""
        topic = self._topic
        runs = self._runs
        run = self._run
        if (
            topic.deleted
            or topic._durable_entries is not runs
            or runs[-1] is not run
            or not topic._joins_durable(self._batch)
        ):
            return None
        position = self._tail.append(payload)
        if position is None:
            return None
        self._span[1] = position
        run = self._run = (run[0], position, EntryKind.DATA, run[3])
        runs[-1] = run
        return position
