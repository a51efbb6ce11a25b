"""The two tiers of a topic's ledger list: the bookkeeping every part of
:class:`~txnstream.ledger.ManagedLedger` shares, and the remote tier (the offload switch, remote
reads in a worker thread, the KIP-1058 aborted index).

Two tiers, one log. A sealed, decided ledger may be *offloaded*: its entries then live
in one object of an :class:`~txnstream.ledger.OffloadStore` (Parquet) and its row says
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ._batch import WriteBatch
from ._entry import TxnId
from ._errors import RemoteStorageError
from ._offload import OffloadStore
from ._parquet import AbortedIndexRow, OffloadedObject, RawRow
from ._position import Position
from ._store import Store

_T = TypeVar("_T")
LOCAL = "local"
REMOTE = "remote"


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


class LedgerTiers:
    """A topic's ledgers, oldest first, and what lives in the remote tier."""

    def __init__(
        self,
        store: Store,
        topic_id: int,
        ledgers: list[LedgerInfo],
        *,
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
        self._shared_reads: dict[
            tuple[Position, Position, int], list[asyncio.Future[list[Any]]]
        ] = {}
        """Local range reads in flight, by ``(start, end, limit)``, with the callers that
        wait for their rows: see ``LedgerReads._select_range``."""
        self._reindex()

    def _reindex(self) -> None:
        self._ids = [info.ledger_id for info in self._ledgers]
        self._remote_upto = max(
            (info.ledger_id for info in self._ledgers if info.is_remote), default=-1
        )

    def _info(self, ledger_id: int) -> LedgerInfo | None:
        i = bisect.bisect_left(self._ids, ledger_id)
        if i < len(self._ids) and self._ids[i] == ledger_id:
            return self._ledgers[i]
        return None

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
        rows: list[RawRow] = await self.store.ledger_entries(self.topic_id, ledger_id)
        return rows  # (int, int, int | None, bytes) already

    async def aborted_index(self, ledger_id: int) -> list[AbortedIndexRow]:
        """The aborted-index rows whose ABORT marker lies in local ledger ``ledger_id``."""
        rows = await self.store.ledger_aborted(self.topic_id, ledger_id)
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
        batch.move_ledger_remote(self.topic_id, ledger_id, obj.url, obj.size, obj.checksum)
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
