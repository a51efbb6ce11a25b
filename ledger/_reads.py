"""Reading a topic's log across both tiers: ranges, exact positions, counts, and
entry metadata for replay. Local ledgers are one SQLite query each; ranges that reach
the remote tier read its objects in a worker thread (see :mod:`txnstream.ledger._tiers`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ._codec import decode_payload
from ._entry import Entry, EntryKind, TxnId
from ._offload import OffloadStore
from ._parquet import Row
from ._position import Position
from ._tiers import LedgerInfo, LedgerTiers, _span, _url

_T = TypeVar("_T")


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


class _Abandoned(Exception):
    """The shared read a caller waited for was cancelled: it reads by itself."""


def _hand_out(
    loop: asyncio.AbstractEventLoop,
    waiters: list[asyncio.Future[list[Any]]],
    rows: list[Row],
    index: int,
) -> None:
    """Give the next waiter that still waits a copy of ``rows``, and the one after it its
    copy in the next loop step (a callback added now runs after what is ready now)."""
    while index < len(waiters):
        turn = waiters[index]
        index += 1
        if not turn.done():  # (a cancelled waiter has no turn)
            turn.set_result(list(rows))
            if index < len(waiters):
                loop.call_soon(_hand_out, loop, waiters, rows, index)
            return


class LedgerReads(LedgerTiers):
    """The reads of :class:`~txnstream.ledger.ManagedLedger`: durable entries only."""

    # -- reading -------------------------------------------------------------------

    async def read(self, start: Position, end: Position, limit: int) -> list[Entry]:
        """Durable entries with ``start <= position <= end``, in order, at most ``limit``."""
        if end < start or limit <= 0:
            return []
        if start.ledger_id > self._remote_upto:  # the local path: one comparison more
            generation = self._tier_generation
            rows = await self._select_range(start, end, limit)
            if generation == self._tier_generation:
                return [decode_row(row) for row in rows]
        while True:  # the range may touch the remote tier (or a ledger just switched)
            generation = self._tier_generation
            entries = await self._read_tiered(start, end, limit)
            if generation == self._tier_generation:
                return entries

    async def _read_local(self, start: Position, end: Position, limit: int) -> list[Entry]:
        return [decode_row(row) for row in await self._select_range(start, end, limit)]

    async def _select_range(self, start: Position, end: Position, limit: int) -> list[Row]:
        """Local rows with ``start <= position <= end``, in order, at most ``limit``.

        Subscriptions that keep pace read the same range at the same moment (a topic's
        cursors after one flush): a read asked for while the same one is in flight waits
        for that one's rows instead of querying again, as Pulsar's cursors share the
        managed ledger's entry cache. Stored rows never change, so each gets what its
        own query would have (a list of its own). The waiters get the rows one per loop
        step, not all in the step the read ends in: each goes on to decode and deliver
        them, and a hundred of those back to back would keep the loop from polling for
        a quarter of a second. If the read waited for is cancelled, they read themselves.
        """
        key = (start, end, limit)
        loop = asyncio.get_running_loop()
        while (waiting := self._shared_reads.get(key)) is not None:
            turn: asyncio.Future[list[Any]] = loop.create_future()
            waiting.append(turn)
            try:
                return await turn
            except _Abandoned:
                continue
        waiters: list[asyncio.Future[list[Any]]] = []
        self._shared_reads[key] = waiters
        try:
            rows: list[Row] = await self.store.read_range(self.topic_id, start, end, limit)
        except BaseException as exc:
            error = _Abandoned() if isinstance(exc, asyncio.CancelledError) else exc
            for turn in waiters:
                if not turn.done():
                    turn.set_exception(error)
            raise
        finally:
            del self._shared_reads[key]
        if waiters:
            _hand_out(loop, waiters, rows, 0)
        return rows

    async def read_rows(self, start: Position, end: Position, limit: int) -> list[Row] | None:
        """:meth:`read` without decoding: ``(ledger_id, entry_id, kind, txn seq, payload)``
        rows from either tier (a delivery batch decodes the payloads it keeps in one
        pass). None when a ledger switched tiers meanwhile: use :meth:`read` then."""
        if end < start or limit <= 0:
            return []
        generation = self._tier_generation
        if start.ledger_id > self._remote_upto:
            rows: list[Row] | None = await self._select_range(start, end, limit)
        else:
            rows = await self._read_tiered_rows(start, end, limit)
        return rows if generation == self._tier_generation else None

    async def _read_tiered_rows(self, start: Position, end: Position, limit: int) -> list[Row]:
        return await self._tiered(start, end, limit, OffloadStore.read_rows, self._select_range)

    async def _read_tiered(self, start: Position, end: Position, limit: int) -> list[Entry]:
        return await self._tiered(start, end, limit, OffloadStore.read_entries, self._read_local)

    async def _tiered(
        self,
        start: Position,
        end: Position,
        limit: int,
        read_remote: Callable[[OffloadStore, int, str, int, int], list[_T]],
        read_local: Callable[[Position, Position, int], Awaitable[list[_T]]],
    ) -> list[_T]:
        """A range over both tiers: ``read_remote(store, ledger_id, url, lo, hi)`` for
        each offloaded ledger in it (one worker thread), then ``read_local``."""
        upto = self._remote_upto
        spans = [
            (info, _span(info, start, end))
            for info in self._remote_between(start.ledger_id, end.ledger_id)
        ]

        def read(remote: OffloadStore, info: LedgerInfo, span: Any, room: int) -> list[_T]:
            lo, hi = span
            hi = min(hi, lo + room - 1)
            return read_remote(remote, info.ledger_id, _url(info), lo, hi) if lo <= hi else []

        out: list[_T] = await self._remote_reads(spans, read, limit)
        local = max(start, Position(upto + 1, 0))
        if len(out) < limit and local <= end:
            out += await read_local(local, end, limit - len(out))
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
        rows = await self.store.read_positions(self.topic_id, positions)
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
        return await self.store.count_data(self.topic_id, start, end, except_txns, skip)

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
                rows = await self.store.read_metas(self.topic_id, local, limit - len(out))
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
