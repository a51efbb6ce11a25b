"""ManagedLedger: one topic's log as an ordered list of ledgers in the shared store.

Positions are assigned when an append is *prepared* (synchronously, in call order) and
become readable once the batch is durable. A new ledger starts on rollover (entry count
or bytes) and on every open, as in Pulsar's managed ledger; an empty ledger left by the
previous run is dropped on open. Reads are :class:`~txnstream.ledger._reads.LedgerReads`; the
remote tier and offload bookkeeping are :class:`~txnstream.ledger._tiers.LedgerTiers`.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ._batch import WriteBatch
from ._entry import EntryKind, TxnId
from ._offload import OffloadStore
from ._position import Position
from ._reads import LedgerReads
from ._store import Store
from ._tiers import REMOTE, LedgerInfo

_new_tuple = tuple.__new__  # tuple.__new__(Position, (l, e)): a Position made in C


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def ms_to_datetime(ms: int) -> datetime:
    """Milliseconds since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


class ManagedLedger(LedgerReads):
    """A topic's ordered ledgers: append (prepared into a batch), read, navigate."""

    def __init__(
        self,
        store: Store,
        topic_id: int,
        ledgers: list[LedgerInfo],
        *,
        max_entries: int,
        max_bytes: int,
        remote: OffloadStore | None = None,
    ) -> None:
        super().__init__(store, topic_id, ledgers, remote=remote)
        self.max_entries = max_entries
        self.max_bytes = max_bytes

    # -- opening -------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        store: Store,
        batch: WriteBatch,
        topic_id: int,
        *,
        max_entries: int,
        max_bytes: int,
        remote: OffloadStore | None = None,
    ) -> ManagedLedger:
        """A new topic's ledger list, with ledger 0 open (rows added to ``batch``)."""
        created = now_ms()
        batch.open_ledger(topic_id, 0, created, 0)
        info = LedgerInfo(0, created, 0, 0, False, False)
        return cls(
            store, topic_id, [info], max_entries=max_entries, max_bytes=max_bytes, remote=remote
        )

    @classmethod
    async def open(
        cls,
        store: Store,
        topic_id: int,
        *,
        max_entries: int,
        max_bytes: int,
        remote: OffloadStore | None = None,
        wait: bool = True,
    ) -> ManagedLedger:
        """Load an existing topic's ledgers, seal the open one and start a new ledger.

        ``wait=False`` queues those writes without waiting for them (the caller flushes
        once for many topics: recovery, where each wait is a round trip)."""
        rows = await store.ledger_rows(topic_id)
        ledgers: list[LedgerInfo] = []
        batch = WriteBatch()
        next_offset = 0  # the new ledger's base: past every entry, dropped ledgers included
        for row in rows:
            ledger_id, created_ms, entries, size, has_aborts, location, url, osize, crc, base = row
            next_offset = max(next_offset, base)
            if location == REMOTE:
                next_offset = max(next_offset, base + entries)
                ledgers.append(
                    LedgerInfo(
                        ledger_id,
                        created_ms,
                        entries,
                        size,
                        bool(has_aborts),
                        True,
                        REMOTE,
                        url,
                        osize,
                        crc,
                        base,
                    )
                )
                continue
            if entries is None:  # left open by the previous run: count what is durable
                entries, size = await store.ledger_totals(topic_id, ledger_id)
                if entries == 0 and not has_aborts:
                    batch.drop_ledger(topic_id, ledger_id)
                    continue
                batch.seal_ledger(topic_id, ledger_id, entries, size)
            next_offset = max(next_offset, base + entries)
            ledgers.append(
                LedgerInfo(
                    ledger_id, created_ms, entries, size, bool(has_aborts), True, base_offset=base
                )
            )
        next_id = max((int(r[0]) for r in rows), default=-1) + 1
        created = now_ms()
        batch.open_ledger(topic_id, next_id, created, next_offset)
        ledgers.append(LedgerInfo(next_id, created, 0, 0, False, False, base_offset=next_offset))
        if wait:
            await store.write(batch)
        else:
            store.submit(batch, wait=False)
        return cls(
            store, topic_id, ledgers, max_entries=max_entries, max_bytes=max_bytes, remote=remote
        )

    # -- appending -----------------------------------------------------------------

    def prepare_append(
        self, batch: WriteBatch, records: Sequence[tuple[EntryKind, TxnId | None, bytes]]
    ) -> list[Position]:
        """Assign positions to ``records`` and add their inserts to ``batch``."""
        positions: list[Position] = []
        rows: list[tuple[Any, ...]] = []
        topic_id = self.topic_id
        size = 0
        for kind, txn_id, payload in records:
            current = self._ledgers[-1]
            if self._full(current):
                current = self._roll_over(batch, rows)
                rows = []
            position = Position(current.ledger_id, current.entries)
            current.entries += 1
            current.bytes += len(payload)
            size += len(payload)
            rows.append(
                (
                    topic_id,
                    position.ledger_id,
                    position.entry_id,
                    int(kind),
                    None if txn_id is None else txn_id.seq,
                    payload,
                )
            )
            positions.append(position)
        batch.insert_entries(rows)
        batch.entries += len(records)
        batch.bytes += size
        return positions

    def prepare_data(
        self, batch: WriteBatch, payloads: Sequence[bytes], txn_seq: int | None
    ) -> list[Position]:
        """:meth:`prepare_append` for data entries of one transaction (or none), in runs
        that each fill one ledger: the common case (it all fits) is one run."""
        count = len(payloads)
        if count == 1:
            return [self.prepare_one(batch, payloads[0], txn_seq)]
        current = self._ledgers[-1]
        size = sum(map(len, payloads))
        if (
            current.entries + count <= self.max_entries
            and current.bytes + size - len(payloads[-1]) < self.max_bytes
        ):
            return self._add_run(batch, current, payloads, txn_seq, size)
        positions: list[Position] = []
        start = 0
        while start < count:  # a ledger takes an entry while it holds < max_bytes before it
            current = self._ledgers[-1]
            if self._full(current):
                current = self._roll_over(batch, [])
            room = self.max_entries - current.entries
            sums = list(itertools.accumulate(map(len, payloads[start : start + room])))
            n = min(len(sums), 1 + bisect.bisect_left(sums, self.max_bytes - current.bytes))
            run = payloads[start : start + n]
            positions += self._add_run(batch, current, run, txn_seq, sums[n - 1])
            start += n
        return positions

    def prepare_one(self, batch: WriteBatch, payload: bytes, txn_seq: int | None) -> Position:
        """:meth:`prepare_data` of one payload (a ``Transaction.send``): no lists made."""
        current = self._ledgers[-1]
        if self._full(current):
            current = self._roll_over(batch, [])
        return _append_one(batch, self.topic_id, current, payload, txn_seq)

    def _full(self, current: LedgerInfo) -> bool:
        """True once ``current`` takes no more entries (a ledger takes an entry while it
        is below both limits)."""
        return current.entries >= self.max_entries or current.bytes >= self.max_bytes

    def tail_appender(self, batch: WriteBatch, txn_seq: int | None) -> TailAppender:
        """A :class:`TailAppender` for further data entries of ``txn_seq`` (or none) to
        this ledger's open tail, in ``batch``."""
        return TailAppender(self, self._ledgers[-1], batch, txn_seq)

    def _add_run(
        self,
        batch: WriteBatch,
        current: LedgerInfo,
        payloads: Sequence[bytes],
        txn_seq: int | None,
        size: int,
    ) -> list[Position]:
        """Append ``payloads`` (``size`` bytes) to the open ledger ``current``."""
        count = len(payloads)
        base = current.entries
        ledger_id = current.ledger_id
        current.entries = base + count
        current.bytes += size
        batch.entries += count
        batch.bytes += size
        entry_ids = range(base, base + count)
        # Rows and positions made by C calls (zip, map), not a Python step per entry:
        # a third of what a 100-message produce spent here.
        repeat = itertools.repeat
        rows = zip(
            repeat(self.topic_id),
            repeat(ledger_id),
            entry_ids,
            repeat(0),
            repeat(txn_seq),
            payloads,
            strict=False,  # (the repeats are endless: payloads end it)
        )
        batch.insert_entries(rows)
        return list(
            map(_new_tuple, repeat(Position), zip(repeat(ledger_id), entry_ids, strict=False))
        )

    def _roll_over(self, batch: WriteBatch, pending_rows: list[tuple[Any, ...]]) -> LedgerInfo:
        batch.insert_entries(pending_rows)
        current = self._ledgers[-1]
        current.sealed = True
        batch.seal_ledger(self.topic_id, current.ledger_id, current.entries, current.bytes)
        created = now_ms()
        base = current.base_offset + current.entries
        info = LedgerInfo(current.ledger_id + 1, created, 0, 0, False, False, base_offset=base)
        batch.open_ledger(self.topic_id, info.ledger_id, created, base)
        self._ledgers.append(info)
        self._ids.append(info.ledger_id)
        return info

    def prepare_close(self, batch: WriteBatch) -> None:
        """A clean close: record the open ledger's entry and byte counts, so the next
        open finds it sealed instead of counting its rows (a crash still counts)."""
        current = self._ledgers[-1]
        if current.entries and not current.sealed:
            batch.seal_ledger(self.topic_id, current.ledger_id, current.entries, current.bytes)

    def roll_over(self, batch: WriteBatch) -> None:
        """Start a new ledger now (tests and admin); no-op if the current one is empty."""
        if self._ledgers[-1].entries:
            self._roll_over(batch, [])

    def mark_has_aborts(self, batch: WriteBatch, ledger_id: int) -> None:
        """Record that ``ledger_id`` holds aborted-transaction index rows."""
        info = self._info(ledger_id)
        if info is not None and not info.has_aborts:
            info.has_aborts = True
            batch.mark_has_aborts(self.topic_id, ledger_id)

    def prepare_trim(self, batch: WriteBatch, upto_ledger_id: int) -> int:
        """Delete whole sealed ledgers up to ``upto_ledger_id`` (never the open one).

        Returns how many ledgers go. Their entries and aborted-index rows that concern
        only them are deleted in ``batch``.
        """
        doomed = [
            info for info in self._ledgers[:-1] if info.ledger_id <= upto_ledger_id and info.sealed
        ]
        if not doomed:
            return 0
        last_id = doomed[-1].ledger_id
        self._ledgers = self._ledgers[len(doomed) :]
        self._reindex()
        batch.trim_ledgers(self.topic_id, last_id)
        return len(doomed)

    # -- navigation ----------------------------------------------------------------

    @property
    def ledgers(self) -> list[LedgerInfo]:
        """The ledgers, oldest first (do not mutate)."""
        return self._ledgers

    def first_position(self) -> Position | None:
        """The first retained entry's position, or None if the log is empty."""
        for info in self._ledgers:
            if info.entries:
                return Position(info.ledger_id, 0)
        return None

    def retained_start(self) -> Position:
        """Where the retained log starts: the first retained entry's position or, when
        retention left none, the open ledger's first (everything before it is gone)."""
        first = self.first_position()
        if first is not None:
            return first
        return Position(self._ledgers[-1].ledger_id, 0) if self._ledgers else Position(0, 0)

    def next_position(self, position: Position) -> Position | None:
        """The assigned position right after ``position`` (None past the end)."""
        i = bisect.bisect_left(self._ids, position.ledger_id)
        if i < len(self._ids) and self._ids[i] == position.ledger_id:
            if position.entry_id + 1 < self._ledgers[i].entries:
                return Position(position.ledger_id, max(position.entry_id + 1, 0))
            i += 1
        for info in self._ledgers[i:]:
            if info.entries:
                return Position(info.ledger_id, 0)
        return None

    def previous(self, position: Position) -> Position | None:
        """The newest assigned position strictly before ``position``, across ledgers.

        The head of a ledger's previous is the last entry of the newest non-empty earlier
        ledger; None when nothing precedes it.
        """
        i = bisect.bisect_right(self._ids, position.ledger_id) - 1
        while i >= 0:
            info = self._ledgers[i]
            if info.ledger_id == position.ledger_id:
                last = min(position.entry_id - 1, info.entries - 1)
            else:
                last = info.entries - 1
            if last >= 0:
                return Position(info.ledger_id, last)
            i -= 1
        return None

    def offset_of(self, position: Position) -> int:
        """The Kafka offset of ``position``: its ledger's base offset plus its entry id.

        A position in no retained ledger maps to the next ledger's base (where that
        position's successor would be); past the end, to the log end offset.
        """
        i = bisect.bisect_left(self._ids, position.ledger_id)
        if i < len(self._ids):
            info = self._ledgers[i]
            if info.ledger_id == position.ledger_id:
                return info.base_offset + min(max(position.entry_id, 0), info.entries)
            return info.base_offset
        return self.end_offset()

    def position_at(self, offset: int) -> Position | None:
        """The position holding Kafka offset ``offset`` (None when no retained entry
        does: before the log start or at or past the end)."""
        ledgers = self._ledgers
        # the last ledger based at or below offset (of equal bases, the later: the one
        # before it is empty)
        i = bisect.bisect_right(ledgers, offset, key=lambda info: info.base_offset) - 1
        if i < 0 or offset >= ledgers[i].base_offset + ledgers[i].entries:
            return None
        return Position(ledgers[i].ledger_id, offset - ledgers[i].base_offset)

    def start_offset(self) -> int:
        """Kafka's log start offset: the first retained entry's offset (the end offset
        when none is retained)."""
        for info in self._ledgers:
            if info.entries:
                return info.base_offset
        return self.end_offset()

    def end_offset(self) -> int:
        """The offset the next appended entry takes (assigned entries, durable or not)."""
        last = self._ledgers[-1]
        return last.base_offset + last.entries

    def count_between(self, after: Position | None, upto: Position | None) -> int:
        """Entries with ``after < position <= upto`` (assigned entries only)."""
        if upto is None:
            return 0
        total = 0
        for info in self._ledgers:
            lo = 0
            hi = info.entries - 1
            if info.ledger_id > upto.ledger_id:
                break
            if info.ledger_id == upto.ledger_id:
                hi = min(hi, upto.entry_id)
            if after is not None:
                if info.ledger_id < after.ledger_id:
                    continue
                if info.ledger_id == after.ledger_id:
                    lo = after.entry_id + 1
            if hi >= lo:
                total += hi - lo + 1
        return total


class TailAppender:
    """Data entries of one transaction (or none) appended to a ledger's open tail in one
    batch, one at a time, with nothing looked up per entry: what a stream of
    ``Transaction.send`` calls needs (see :meth:`ManagedLedger.tail_appender`).

    The caller owns the rest of the validity: that ``batch`` is still the one the next
    flush takes and that nothing else appended to this topic in between (the appenders above,
    ``txn_buffer.TxnRunAppender`` and ``api``'s ``FastTxnSend``, check both).
    """

    __slots__ = ("_batch", "_current", "_ledger", "_topic_id", "_txn_seq")

    def __init__(
        self, ledger: ManagedLedger, current: LedgerInfo, batch: WriteBatch, txn_seq: int | None
    ) -> None:
        self._ledger = ledger
        self._current = current
        self._batch = batch
        self._topic_id = ledger.topic_id
        self._txn_seq = txn_seq

    def append(self, payload: bytes) -> Position | None:
        """Append one entry and return its position; None (nothing done) once the open
        ledger is full or rolled over (the full path rolls it)."""
        current = self._current
        if current.sealed or self._ledger._full(current):
            return None
        return _append_one(self._batch, self._topic_id, current, payload, self._txn_seq)


def _append_one(
    batch: WriteBatch, topic_id: int, current: LedgerInfo, payload: bytes, txn_seq: int | None
) -> Position:
    """Append one data entry to the open ledger ``current`` (which has room)."""
    entry_id = current.entries
    size = len(payload)
    current.entries = entry_id + 1
    current.bytes += size
    batch.entries += 1
    batch.bytes += size
    ledger_id = current.ledger_id
    batch.insert_entry(topic_id, ledger_id, entry_id, 0, txn_seq, payload)
    position: Position = _new_tuple(Position, (ledger_id, entry_id))
    return position
