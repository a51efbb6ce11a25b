"""ManagedLedger: one topic's log as an ordered list of ledgers in the shared store.

Positions are assigned when an append is *prepared* (synchronously, in call order) and
become readable once the batch is durable. A new ledger starts on rollover (entry count
or bytes) and on every open, as in Pulsar's managed ledger; an empty ledger left by the
previous run is dropped on open.

Two tiers, one log. A sealed, decided ledger may be *offloaded*: its entries then live
in one object of an :class:`~ledger.OffloadStore` (Parquet) and its row says
``location = 'remote'``. Offloading goes oldest first, so the remote ledgers are always
a prefix of the list and ``_remote_upto`` (the newest remote ledger id, -1 if none)
tells every read in one comparison whether it may touch the remote tier: reads that
start above it take the local path exactly as before. Remote reads run in a worker
thread (``asyncio.to_thread``) through the store's caches.

A ledger switches tier in memory when its switch is *prepared*, before the SQLite
transaction that deletes its local rows commits (the object is complete and verified
by then, so both copies are the same). A local read already in flight may run its
query after that commit and miss the ledger's rows: every read notes the tier
generation before it awaits and reads again when a switch happened meanwhile.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from ._codec import decode_payload
from ._entry import Entry, EntryKind, TxnId
from ._errors import RemoteStorageError
from ._offload import OffloadStore
from ._parquet import AbortedIndexRow, OffloadedObject, RawRow
from ._position import Position
from ._store import Store, WriteBatch

_T = TypeVar("_T")
LOCAL = "local"
REMOTE = "remote"

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
    """One ledger's bookkeeping (entry count and bytes as assigned so far) and tier.

    ``location`` is ``"local"`` or ``"remote"``; a remote ledger's entries are the
    object at ``url`` (``size`` bytes, ``checksum`` ``sha256:<hex>``).
    """

    ledger_id: int
    created_ms: int
    entries: int
    bytes: int
    has_aborts: bool
    sealed: bool
    location: str = LOCAL
    url: str | None = None
    size: int | None = None
    checksum: str | None = None

    @property
    def is_remote(self) -> bool:
        """True once the ledger is offloaded."""
        return self.location == REMOTE


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
        size=len(data),
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
        remote: OffloadStore | None = None,
    ) -> None:
        self.store = store
        self.topic_id = topic_id
        self.remote = remote
        """Where remote ledgers are read (None: this ledger cannot read any)."""
        self._ledgers = ledgers
        self._ids: list[int] = []
        self._remote_upto = -1
        self._tier_generation = 0
        self._reindex()
        self.max_entries = max_entries
        self.max_bytes = max_bytes

    def _reindex(self) -> None:
        self._ids = [info.ledger_id for info in self._ledgers]
        self._remote_upto = max(
            (info.ledger_id for info in self._ledgers if info.is_remote), default=-1
        )

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
        batch.add(_INSERT_LEDGER, (topic_id, 0, created))
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
    ) -> ManagedLedger:
        """Load an existing topic's ledgers, seal the open one and start a new ledger."""
        rows = await store.read(
            "SELECT ledger_id, created_ms, entries, bytes, has_aborts, location, url, size,"
            " checksum FROM ledgers WHERE topic_id = ? ORDER BY ledger_id",
            (topic_id,),
        )
        ledgers: list[LedgerInfo] = []
        batch = WriteBatch()
        for ledger_id, created_ms, entries, size, has_aborts, location, url, osize, crc in rows:
            if location == REMOTE:
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
                    )
                )
                continue
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

    def prepare_close(self, batch: WriteBatch) -> None:
        """A clean close: record the open ledger's entry and byte counts, so the next
        open finds it sealed instead of counting its rows (a crash still counts)."""
        current = self._ledgers[-1]
        if current.entries and not current.sealed:
            batch.add(
                _SEAL_LEDGER, (current.entries, current.bytes, self.topic_id, current.ledger_id)
            )

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
        self._reindex()
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
        if start.ledger_id > self._remote_upto:  # the local path: one comparison more
            generation = self._tier_generation
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
            if generation == self._tier_generation:
                return [decode_row(row) for row in rows]
        while True:  # the range may touch the remote tier (or a ledger just switched)
            generation = self._tier_generation
            entries = await self._read_tiered(start, end, limit)
            if generation == self._tier_generation:
                return entries

    async def _read_local(self, start: Position, end: Position, limit: int) -> list[Entry]:
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

    async def read_rows(self, start: Position, end: Position, limit: int) -> list[Row] | None:
        """:meth:`read` without decoding: ``(ledger_id, entry_id, kind, txn seq, payload)``
        rows (a delivery batch decodes the payloads it keeps in one pass). None when the
        range reaches the remote tier (or a ledger switched tiers meanwhile): use
        :meth:`read` then."""
        if end < start or limit <= 0:
            return []
        if start.ledger_id <= self._remote_upto:
            return None
        generation = self._tier_generation
        rows: list[Row] = await self.store.read(
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
        return rows if generation == self._tier_generation else None

    async def _read_tiered(self, start: Position, end: Position, limit: int) -> list[Entry]:
        upto = self._remote_upto
        spans = [
            (info, _span(info, start, end))
            for info in self._remote_between(start.ledger_id, end.ledger_id)
        ]

        def read(remote: OffloadStore, info: LedgerInfo, span: Any, room: int) -> list[Entry]:
            lo, hi = span
            hi = min(hi, lo + room - 1)
            return remote.read_entries(info.ledger_id, _url(info), lo, hi) if lo <= hi else []

        out: list[Entry] = await self._remote_reads(spans, read, limit)
        local = max(start, Position(upto + 1, 0))
        if len(out) < limit and local <= end:
            out += await self._read_local(local, end, limit - len(out))
        return out

    async def read_positions(self, positions: Sequence[Position]) -> list[Entry]:
        """The entries at exactly ``positions`` (missing ones are left out), in order."""
        if not positions:
            return []
        while True:
            generation = self._tier_generation
            upto = self._remote_upto
            if upto < 0 or min(p.ledger_id for p in positions) > upto:
                entries = await self._read_local_positions(positions)
            else:
                entries = await self._read_tiered_positions(positions, upto)
            if generation == self._tier_generation:
                return entries

    async def _read_local_positions(self, positions: Sequence[Position]) -> list[Entry]:
        if not positions:
            return []
        keys = ",".join(f"({p.ledger_id},{p.entry_id})" for p in positions)
        rows = await self.store.read(
            "SELECT ledger_id, entry_id, kind, txn, data FROM entries WHERE topic_id = ?"
            f" AND (ledger_id, entry_id) IN (VALUES {keys}) ORDER BY ledger_id, entry_id",
            (self.topic_id,),
        )
        return [decode_row(row) for row in rows]

    async def _read_tiered_positions(self, positions: Sequence[Position], upto: int) -> list[Entry]:
        by_ledger: dict[int, list[int]] = {}
        for p in positions:
            if p.ledger_id <= upto:
                by_ledger.setdefault(p.ledger_id, []).append(p.entry_id)
        items = []
        for ledger_id, entry_ids in sorted(by_ledger.items()):
            info = self._info(ledger_id)
            if info is not None and info.is_remote:
                items.append((info, entry_ids))

        def read(remote: OffloadStore, info: LedgerInfo, ids: Any, room: int) -> list[Entry]:
            return remote.read_positions(info.ledger_id, _url(info), ids)

        out: list[Entry] = await self._remote_reads(items, read)
        out += await self._read_local_positions([p for p in positions if p.ledger_id > upto])
        return out

    async def count_data(
        self,
        start: Position,
        end: Position,
        *,
        except_txns: Sequence[int] = (),
        except_positions: Sequence[Position] = (),
    ) -> int:
        """Data entries with ``start <= position <= end``, leaving out the given
        transactions (by sequence number) and positions; one query, no payloads read.

        On remote ledgers every aborted transaction is left out (the object flags its
        data), which ``except_txns`` asks for anyway.
        """
        if end < start:
            return 0
        while True:
            generation = self._tier_generation
            upto = self._remote_upto
            items = [
                (
                    info,
                    (
                        *_span(info, start, end),
                        [p.entry_id for p in except_positions if p.ledger_id == info.ledger_id],
                    ),
                )
                for info in self._remote_between(start.ledger_id, end.ledger_id)
            ]

            def count(remote: OffloadStore, info: LedgerInfo, arg: Any, room: int) -> list[int]:
                lo, hi, skip = arg
                return [remote.count_committed(_url(info), lo, hi, info.entries, skip)]

            total = sum(await self._remote_reads(items, count)) if items else 0
            local = max(start, Position(upto + 1, 0))
            if local <= end:
                total += await self._count_local(local, end, except_txns, except_positions)
            if generation == self._tier_generation:
                return total

    async def _count_local(
        self,
        start: Position,
        end: Position,
        except_txns: Sequence[int],
        except_positions: Sequence[Position],
    ) -> int:
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
        while True:
            generation = self._tier_generation
            upto = self._remote_upto
            end = Position(upto, 1 << 62)
            spans = [
                (info, _span(info, start, end))
                for info in self._remote_between(start.ledger_id, upto)
            ]

            def read(remote: OffloadStore, info: LedgerInfo, span: Any, room: int) -> list[Any]:
                lo, hi = span
                hi = min(hi, lo + room - 1)
                if lo > hi:
                    return []
                rows = remote.read_meta(_url(info), lo, hi)
                return [(info.ledger_id, e, kind, txn) for e, kind, txn in rows]

            out = [
                EntryMeta(Position(ledger_id, e), kind, None if txn is None else TxnId(txn))
                for ledger_id, e, kind, txn in await self._remote_reads(spans, read, limit)
            ]
            local = max(start, Position(upto + 1, 0))
            if len(out) < limit:
                rows = await self.store.read(
                    _SELECT_META,
                    (self.topic_id, local.ledger_id, local.entry_id, limit - len(out)),
                )
                out += [
                    EntryMeta(
                        Position(ledger_id, entry_id),
                        EntryKind(kind),
                        None if txn is None else TxnId(txn),
                    )
                    for ledger_id, entry_id, kind, txn in rows
                ]
            if generation == self._tier_generation:
                return out

    # -- the remote tier -----------------------------------------------------------

    @property
    def remote_upto(self) -> int:
        """The newest remote ledger's id (-1: none); remote ledgers are a prefix."""
        return self._remote_upto

    def _remote_between(self, first: int, last: int) -> list[LedgerInfo]:
        """The remote ledgers with ``first <= ledger_id <= last`` (a snapshot)."""
        if first > self._remote_upto:
            return []
        i = bisect.bisect_left(self._ids, first)
        out = []
        for info in self._ledgers[i:]:
            if info.ledger_id > last or not info.is_remote:
                break
            out.append(info)
        return out

    def _remote_store(self) -> OffloadStore:
        if self.remote is None:
            raise RemoteStorageError("this topic has offloaded ledgers but no offload store")
        return self.remote

    async def _remote_reads(
        self,
        items: Sequence[tuple[LedgerInfo, Any]],
        read: Callable[[OffloadStore, LedgerInfo, Any, int], list[_T]],
        limit: int | None = None,
    ) -> list[_T]:
        """``read(store, info, arg, room)`` for each remote ledger ``(info, arg)`` in
        order, all in ONE worker thread (one hop however many ledgers), until ``limit``
        results; ``room`` is what the limit leaves.

        A missing object is skipped when retention deleted its ledger meanwhile (as a
        local read, the range just ends sooner); any other failure of the object store
        is a :class:`RemoteStorageError`.
        """
        if not items:
            return []
        remote = self._remote_store()
        room = (1 << 62) if limit is None else limit

        def work() -> tuple[list[_T], list[LedgerInfo]]:
            out: list[_T] = []
            missing: list[LedgerInfo] = []
            for info, arg in items:
                try:
                    out += read(remote, info, arg, room - len(out))
                except FileNotFoundError:
                    missing.append(info)
                if len(out) >= room:
                    break
            return out, missing

        try:
            out, missing = await asyncio.to_thread(work)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read an offloaded ledger: {exc}") from exc
        for info in missing:
            if self._info(info.ledger_id) is info:
                raise RemoteStorageError(
                    f"offloaded ledger {info.ledger_id} is missing from the object store"
                    f" ({info.url})"
                )
        return out

    async def remote_aborted(self, from_ledger_id: int) -> list[AbortedIndexRow]:
        """The aborted-index rows of every remote ledger from ``from_ledger_id`` on.

        Only ledgers whose ``has_aborts`` is set are looked at (KIP-1058: a ledger
        flagged empty costs no request); the store caches what it fetched.
        """
        infos = [
            info
            for info in self._remote_between(from_ledger_id, self._remote_upto)
            if info.has_aborts
        ]
        if not infos:
            return []
        remote = self._remote_store()

        def collect() -> list[AbortedIndexRow]:
            rows: list[AbortedIndexRow] = []
            for info in infos:
                assert info.url is not None
                try:
                    rows += remote.read_aborted(info.url)
                except FileNotFoundError:
                    if self._info(info.ledger_id) is info:
                        raise
            return rows

        try:
            return await asyncio.to_thread(collect)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read an aborted index: {exc}") from exc

    def offload_candidates(self, stable: Position | None, keep_local: int) -> list[LedgerInfo]:
        """The local ledgers that may be offloaded now, oldest first.

        A ledger qualifies when it is sealed, lies entirely at or below ``stable`` (every
        transaction with data in it is decided), every older ledger is remote (remote
        ledgers stay a prefix) and at least ``keep_local`` newer ledgers (the open one
        included) stay local.
        """
        if stable is None:
            return []
        out = []
        limit = len(self._ledgers) - max(keep_local, 1)
        for info in self._ledgers[: max(limit, 0)]:
            if info.is_remote:
                continue
            if not info.sealed or info.entries <= 0:
                break
            if Position(info.ledger_id, info.entries - 1) > stable:
                break
            out.append(info)
        return out

    async def export_rows(self, ledger_id: int) -> list[RawRow]:
        """Every stored entry of a local ledger as ``(entry_id, kind, txn, payload)``."""
        rows = await self.store.read(
            "SELECT entry_id, kind, txn, data FROM entries WHERE topic_id = ? AND ledger_id = ?"
            " ORDER BY entry_id",
            (self.topic_id, ledger_id),
        )
        return rows  # SQLite's rows are already (int, int, int | None, bytes)

    async def aborted_index(self, ledger_id: int) -> list[AbortedIndexRow]:
        """The aborted-index rows whose ABORT marker lies in local ledger ``ledger_id``."""
        rows = await self.store.read(
            "SELECT txn, first_ledger, first_entry, last_ledger, last_entry, marker_ledger,"
            " marker_entry, stable_ledger, stable_entry FROM aborted_txns"
            " WHERE topic_id = ? AND marker_ledger = ? ORDER BY marker_entry",
            (self.topic_id, ledger_id),
        )
        return [
            AbortedIndexRow(
                TxnId(txn),
                Position(fl, fe),
                Position(ll, le),
                Position(ml, me),
                None if sl is None else Position(sl, se),
            )
            for txn, fl, fe, ll, le, ml, me, sl, se in rows
        ]

    def prepare_offload(self, batch: WriteBatch, ledger_id: int, obj: OffloadedObject) -> None:
        """Switch ``ledger_id`` to its verified remote copy ``obj``: one batch records
        the location and deletes the local entries and aborted-index rows.

        The switch is published at once (see the module docstring): both copies hold
        the same entries, and a failed batch makes the owner reload from disk anyway.
        """
        info = self._info(ledger_id)
        older_local = any(not i.is_remote for i in self._ledgers if i.ledger_id < ledger_id)
        if info is None or info.is_remote or not info.sealed or older_local:
            raise RemoteStorageError(f"ledger {ledger_id} cannot be switched to the remote tier")
        batch.add(
            "UPDATE ledgers SET location = 'remote', url = ?, size = ?, checksum = ?"
            " WHERE topic_id = ? AND ledger_id = ?",
            (obj.url, obj.size, obj.checksum, self.topic_id, ledger_id),
        )
        batch.add(
            "DELETE FROM entries WHERE topic_id = ? AND ledger_id = ?", (self.topic_id, ledger_id)
        )
        batch.add(
            "DELETE FROM aborted_txns WHERE topic_id = ? AND marker_ledger = ?",
            (self.topic_id, ledger_id),
        )
        info.location, info.url, info.size, info.checksum = REMOTE, obj.url, obj.size, obj.checksum
        self._tier_generation += 1
        self._reindex()

    @property
    def offloaded(self) -> list[LedgerInfo]:
        """The remote ledgers, oldest first."""
        return [info for info in self._ledgers if info.is_remote]


def _url(info: LedgerInfo) -> str:
    if info.url is None:
        raise RemoteStorageError(f"remote ledger {info.ledger_id} has no object URL")
    return info.url


def _span(info: LedgerInfo, start: Position, end: Position) -> tuple[int, int]:
    """Entry ids ``lo..hi`` of ``info`` inside ``start..end`` (empty when lo > hi)."""
    lo = max(start.entry_id, 0) if info.ledger_id == start.ledger_id else 0
    hi = info.entries - 1
    if info.ledger_id == end.ledger_id:
        hi = min(hi, end.entry_id)
    return lo, hi


def _txn(seq: int | None) -> TxnId | None:
    return None if seq is None else TxnId(seq)


def _json_ints(values: Sequence[int]) -> str:
    return "[" + ",".join(map(str, values)) + "]"
