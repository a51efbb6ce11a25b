"""ManagedLedger: one topic's log as an ordered list of ledgers in the shared store.

Positions are assigned when an append is *prepared* (synchronously, in call order) and
become readable once the batch is durable. A new ledger starts on rollover (entry count
or bytes) and on every open, as in Pulsar's managed ledger; an empty ledger left by the
previous run is dropped on open.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._codec import decode_payload
from ._entry import Entry, EntryKind, TxnId
from ._position import Position
from ._store import Store, WriteBatch

_INSERT_ENTRY = (
    "INSERT INTO entries (topic_id, ledger_id, entry_id, kind, txn, data) VALUES (?, ?, ?, ?, ?, ?)"
)
_INSERT_LEDGER = (
    "INSERT INTO ledgers (topic_id, ledger_id, created_ms, entries, bytes, has_aborts)"
    " VALUES (?, ?, ?, NULL, NULL, 0)"
)
_SEAL_LEDGER = "UPDATE ledgers SET entries = ?, bytes = ? WHERE topic_id = ? AND ledger_id = ?"
_SELECT_RANGE = (
    "SELECT ledger_id, entry_id, kind, txn, data FROM entries WHERE topic_id = ?"
    " AND (ledger_id, entry_id) >= (?, ?) AND (ledger_id, entry_id) <= (?, ?)"
    " ORDER BY ledger_id, entry_id LIMIT ?"
)
_SELECT_META = (
    "SELECT ledger_id, entry_id, kind, txn FROM entries WHERE topic_id = ?"
    " AND (ledger_id, entry_id) >= (?, ?) ORDER BY ledger_id, entry_id LIMIT ?"
)


Row = tuple[int, int, int, "int | None", bytes]
"""A stored entry as read: ``(ledger_id, entry_id, kind, txn seq or None, payload)``."""


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def ms_to_datetime(ms: int) -> datetime:
    """Milliseconds since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@dataclass(slots=True)
class LedgerInfo:
    """One ledger's bookkeeping (entry count and bytes as assigned so far)."""

    ledger_id: int
    created_ms: int
    entries: int
    bytes: int
    has_aborts: bool
    sealed: bool


@dataclass(frozen=True, slots=True)
class EntryMeta:
    """An entry without its payload: enough to replay a transaction buffer."""

    position: Position
    kind: EntryKind
    txn_id: TxnId | None


def decode_row(row: Sequence[Any]) -> Entry:
    """Build an :class:`Entry` from ``(ledger_id, entry_id, kind, txn, data)``."""
    ledger_id, entry_id, kind, txn, data = row
    key, value, properties, publish_time = decode_payload(data)
    return Entry(
        position=Position(ledger_id, entry_id),
        kind=EntryKind(kind),
        txn_id=None if txn is None else TxnId(txn),
        key=key,
        value=value,
        properties=properties,
        publish_time=publish_time,
    )


class ManagedLedger:
    """A topic's ordered ledgers: append (prepared into a batch), read, navigate."""

    def __init__(
        self,
        store: Store,
        topic_id: int,
        ledgers: list[LedgerInfo],
        *,
        max_entries: int,
        max_bytes: int,
    ) -> None:
        self.store = store
        self.topic_id = topic_id
        self._ledgers = ledgers
        self._ids = [info.ledger_id for info in ledgers]
        self.max_entries = max_entries
        self.max_bytes = max_bytes

    # -- opening -------------------------------------------------------------------

    @classmethod
    def create(
        cls, store: Store, batch: WriteBatch, topic_id: int, *, max_entries: int, max_bytes: int
    ) -> ManagedLedger:
        """A new topic's ledger list, with ledger 0 open (rows added to ``batch``)."""
        created = now_ms()
        batch.add(_INSERT_LEDGER, (topic_id, 0, created))
        info = LedgerInfo(0, created, 0, 0, False, False)
        return cls(store, topic_id, [info], max_entries=max_entries, max_bytes=max_bytes)

    @classmethod
    async def open(
        cls, store: Store, topic_id: int, *, max_entries: int, max_bytes: int
    ) -> ManagedLedger:
        """Load an existing topic's ledgers, seal the open one and start a new ledger."""
        rows = await store.read(
            "SELECT ledger_id, created_ms, entries, bytes, has_aborts FROM ledgers"
            " WHERE topic_id = ? ORDER BY ledger_id",
            (topic_id,),
        )
        ledgers: list[LedgerInfo] = []
        batch = WriteBatch()
        for ledger_id, created_ms, entries, size, has_aborts in rows:
            if entries is None:  # left open by the previous run: count what is durable
                ((entries, size),) = await store.read(
                    "SELECT count(*), coalesce(sum(length(data)), 0) FROM entries"
                    " WHERE topic_id = ? AND ledger_id = ?",
                    (topic_id, ledger_id),
                )
                if entries == 0 and not has_aborts:
                    batch.add(
                        "DELETE FROM ledgers WHERE topic_id = ? AND ledger_id = ?",
                        (topic_id, ledger_id),
                    )
                    continue
                batch.add(_SEAL_LEDGER, (entries, size, topic_id, ledger_id))
            ledgers.append(LedgerInfo(ledger_id, created_ms, entries, size, bool(has_aborts), True))
        next_id = max((int(r[0]) for r in rows), default=-1) + 1
        created = now_ms()
        batch.add(_INSERT_LEDGER, (topic_id, next_id, created))
        ledgers.append(LedgerInfo(next_id, created, 0, 0, False, False))
        await store.write(batch)
        return cls(store, topic_id, ledgers, max_entries=max_entries, max_bytes=max_bytes)

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
            if current.entries >= self.max_entries or current.bytes >= self.max_bytes:
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
        batch.add_many(_INSERT_ENTRY, rows)
        batch.entries += len(records)
        batch.bytes += size
        return positions

    def prepare_data(
        self, batch: WriteBatch, payloads: Sequence[bytes], txn_seq: int | None
    ) -> list[Position]:
        """:meth:`prepare_append` for data entries of one transaction (or none): the
        common case, with one rollover check for the whole list when it fits."""
        current = self._ledgers[-1]
        count = len(payloads)
        size = sum(map(len, payloads)) if count > 1 else len(payloads[0])
        base = current.entries
        if (
            base + count > self.max_entries
            or current.bytes + size - len(payloads[-1]) >= self.max_bytes
        ):
            return self.prepare_append(
                batch, [(EntryKind.DATA, _txn(txn_seq), p) for p in payloads]
            )
        ledger_id = current.ledger_id
        current.entries = base + count
        current.bytes += size
        batch.entries += count
        batch.bytes += size
        topic_id = self.topic_id
        if count == 1:
            batch.add(_INSERT_ENTRY, (topic_id, ledger_id, base, 0, txn_seq, payloads[0]))
            return [Position(ledger_id, base)]
        batch.add_many(
            _INSERT_ENTRY,
            [
                (topic_id, ledger_id, base + i, 0, txn_seq, payload)
                for i, payload in enumerate(payloads)
            ],
        )
        return [Position(ledger_id, entry_id) for entry_id in range(base, base + count)]

    def _roll_over(self, batch: WriteBatch, pending_rows: list[tuple[Any, ...]]) -> LedgerInfo:
        batch.add_many(_INSERT_ENTRY, pending_rows)
        current = self._ledgers[-1]
        current.sealed = True
        batch.add(_SEAL_LEDGER, (current.entries, current.bytes, self.topic_id, current.ledger_id))
        created = now_ms()
        info = LedgerInfo(current.ledger_id + 1, created, 0, 0, False, False)
        batch.add(_INSERT_LEDGER, (self.topic_id, info.ledger_id, created))
        self._ledgers.append(info)
        self._ids.append(info.ledger_id)
        return info

    def roll_over(self, batch: WriteBatch) -> None:
        """Start a new ledger now (tests and admin); no-op if the current one is empty."""
        if self._ledgers[-1].entries:
            self._roll_over(batch, [])

    def mark_has_aborts(self, batch: WriteBatch, ledger_id: int) -> None:
        """Record that ``ledger_id`` holds aborted-transaction index rows."""
        info = self._info(ledger_id)
        if info is not None and not info.has_aborts:
            info.has_aborts = True
            batch.add(
                "UPDATE ledgers SET has_aborts = 1 WHERE topic_id = ? AND ledger_id = ?",
                (self.topic_id, ledger_id),
            )

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
        self._ids = [info.ledger_id for info in self._ledgers]
        batch.add(
            "DELETE FROM entries WHERE topic_id = ? AND ledger_id <= ?", (self.topic_id, last_id)
        )
        batch.add(
            "DELETE FROM ledgers WHERE topic_id = ? AND ledger_id <= ?", (self.topic_id, last_id)
        )
        batch.add(
            "DELETE FROM aborted_txns WHERE topic_id = ? AND last_ledger <= ?",
            (self.topic_id, last_id),
        )
        return len(doomed)

    # -- navigation ----------------------------------------------------------------

    @property
    def ledgers(self) -> list[LedgerInfo]:
        """The ledgers, oldest first (do not mutate)."""
        return self._ledgers

    def _info(self, ledger_id: int) -> LedgerInfo | None:
        i = bisect.bisect_left(self._ids, ledger_id)
        if i < len(self._ids) and self._ids[i] == ledger_id:
            return self._ledgers[i]
        return None

    @property
    def entry_count(self) -> int:
        """Entries assigned in all retained ledgers (markers included)."""
        return sum(info.entries for info in self._ledgers)

    def first_position(self) -> Position | None:
        """The first retained entry's position, or None if the log is empty."""
        for info in self._ledgers:
            if info.entries:
                return Position(info.ledger_id, 0)
        return None

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

    # -- reading -------------------------------------------------------------------

    async def read(self, start: Position, end: Position, limit: int) -> list[Entry]:
        """Durable entries with ``start <= position <= end``, in order, at most ``limit``."""
        if end < start or limit <= 0:
            return []
        rows = await self.store.read(
            _SELECT_RANGE,
            (
                self.topic_id,
                start.ledger_id,
                start.entry_id,
                end.ledger_id,
                end.entry_id,
                limit,
            ),
        )
        return [decode_row(row) for row in rows]

    async def read_rows(self, start: Position, end: Position, limit: int) -> list[Row]:
        """:meth:`read` without decoding: ``(ledger_id, entry_id, kind, txn seq, payload)``
        rows (a delivery batch decodes the payloads it keeps in one pass)."""
        if end < start or limit <= 0:
            return []
        return await self.store.read(
            _SELECT_RANGE,
            (
                self.topic_id,
                start.ledger_id,
                start.entry_id,
                end.ledger_id,
                end.entry_id,
                limit,
            ),
        )

    async def read_positions(self, positions: Sequence[Position]) -> list[Entry]:
        """The entries at exactly ``positions`` (missing ones are left out), in order."""
        if not positions:
            return []
        keys = ",".join(f"({p.ledger_id},{p.entry_id})" for p in positions)
        rows = await self.store.read(
            "SELECT ledger_id, entry_id, kind, txn, data FROM entries WHERE topic_id = ?"
            f" AND (ledger_id, entry_id) IN (VALUES {keys}) ORDER BY ledger_id, entry_id",
            (self.topic_id,),
        )
        return [decode_row(row) for row in rows]

    async def count_data(
        self,
        start: Position,
        end: Position,
        *,
        except_txns: Sequence[int] = (),
        except_positions: Sequence[Position] = (),
    ) -> int:
        """Data entries with ``start <= position <= end``, leaving out the given
        transactions (by sequence number) and positions; one query, no payloads read."""
        if end < start:
            return 0
        skip = [(p.ledger_id << 32) | p.entry_id for p in except_positions]
        rows = await self.store.read(
            "SELECT count(*) FROM entries WHERE topic_id = ? AND kind = 0"
            " AND (ledger_id, entry_id) >= (?, ?) AND (ledger_id, entry_id) <= (?, ?)"
            " AND (txn IS NULL OR txn NOT IN (SELECT value FROM json_each(?)))"
            " AND ((ledger_id << 32) | entry_id) NOT IN (SELECT value FROM json_each(?))",
            (
                self.topic_id,
                start.ledger_id,
                start.entry_id,
                end.ledger_id,
                end.entry_id,
                _json_ints(except_txns),
                _json_ints(skip),
            ),
        )
        return int(rows[0][0])

    async def read_meta(self, start: Position, limit: int) -> list[EntryMeta]:
        """Kinds and transactions of entries from ``start`` on (replay needs no payloads)."""
        rows = await self.store.read(
            _SELECT_META, (self.topic_id, start.ledger_id, start.entry_id, limit)
        )
        return [
            EntryMeta(
                Position(ledger_id, entry_id),
                EntryKind(kind),
                None if txn is None else TxnId(txn),
            )
            for ledger_id, entry_id, kind, txn in rows
        ]


def _txn(seq: int | None) -> TxnId | None:
    return None if seq is None else TxnId(seq)


def _json_ints(values: Sequence[int]) -> str:
    return "[" + ",".join(map(str, values)) + "]"
