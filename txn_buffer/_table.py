"""The coordinator's table of transactions: what is kept in memory (open ones in
full, the newest ended ones in full, older ended ones as outcome codes), loading it
from the store's transaction records, and the lookups.
:class:`~txnstream.txn_buffer.Coordinator` adds begin, use, decisions and timeouts on top.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from operator import itemgetter

from txnstream.ledger import (
    InvalidArgumentError,
    Store,
    TxnId,
    TxnNotFoundError,
    ms_to_datetime,
    now_ms,
    unpack,
)

from ._records import (
    _REASON_CODES,
    AckParticipant,
    IdEpoch,
    PendingAck,
    ProducerEpoch,
    TxnInfo,
    TxnRecord,
    _from_outcome,
    _outcome_code,
)
from ._state import TxnState
from ._topic import Topic

_STATES = {state.value: state for state in TxnState}
_LOAD_SLICE = 20_000
"""Outcomes loaded in one loop step at most (~4 ms)."""
_LIST_SLICE = 2_000
"""A listing's page: rows read and made into infos in one loop step."""


def _ended_info(
    seq: int,
    state: str,
    timeout_ms: int,
    deadline_ms: int,
    label: str | None,
    fenced: int,
    topics: bytes,
    created_ms: int,
    reason: str | None,
    owner: str | None,
) -> TxnInfo:
    """The info of an ended transaction from its row."""
    return TxnInfo(
        str(TxnId(seq)),
        state,
        label,
        list(unpack(topics)),
        bool(fenced),
        timeout_ms,
        ms_to_datetime(created_ms),
        ms_to_datetime(deadline_ms),
        reason,
        owner,
    )


class _Outcomes:
    """Outcome codes of ended transactions by seq, one byte each (code + 1; 0: none).

    Seqs are dense (one counter), so the codes live in bytearrays of consecutive seqs:
    200,000 outcomes take ~200 KB where a dict of ints took ~15 MB. Whole chunks go,
    least recently written first, while the rest still holds at least ``kept`` outcomes
    (a long transaction that ends late refreshes its old chunk rather than being the
    next to go).
    """

    __slots__ = ("_bits", "_chunks", "_counts", "count", "kept")

    def __init__(self, kept: int) -> None:
        self.kept = kept
        # chunks of up to 4,096 seqs; smaller for a small ``kept`` so it stays exact
        self._bits = min(12, max(0, (kept // 16).bit_length() - 1))
        self._chunks: dict[int, bytearray] = {}  # least recently written first
        self._counts: dict[int, int] = {}
        self.count = 0

    def get(self, seq: int) -> int | None:
        """The outcome code of ``seq``, or None when none is kept."""
        chunk = self._chunks.get(seq >> self._bits)
        if chunk is None:
            return None
        code = chunk[seq & ((1 << self._bits) - 1)]
        return code - 1 if code else None

    def put_sorted(self, codes: Iterable[tuple[int, int]]) -> None:
        """:meth:`put` of many ``(seq, code)`` pairs in ascending seq order (a recovery
        loads tens of thousands: ~0.2 us a pair here, ~0.9 us through :meth:`put`)."""
        if self.kept <= 0:
            return
        bits = self._bits
        mask = (1 << bits) - 1
        chunks, counts = self._chunks, self._counts
        index, chunk = -1, bytearray()
        for seq, code in codes:
            if seq >> bits != index:
                index = seq >> bits
                found = chunks.pop(index, None)
                if found is None:
                    found = bytearray(1 << bits)
                    counts[index] = 0
                chunks[index] = chunk = found  # now the most recently written
            offset = seq & mask
            if not chunk[offset]:
                counts[index] += 1
                self.count += 1
            chunk[offset] = code + 1
        self._trim()

    def put(self, seq: int, code: int) -> None:
        """Keep ``code`` (0..254) for ``seq``; drop the oldest chunks beyond the limit."""
        self.put_sorted(((seq, code),))

    def _check(self) -> None:
        """Assert that the counts match the chunks' set bytes."""
        assert set(self._counts) == set(self._chunks)
        for index, chunk in self._chunks.items():
            assert len(chunk) == 1 << self._bits
            assert self._counts[index] == len(chunk) - chunk.count(0)
        assert self.count == sum(self._counts.values())

    def _trim(self) -> None:
        """Drop the least recently written chunks while the rest hold ``kept``."""
        chunks, counts = self._chunks, self._counts
        while len(chunks) > 1:
            oldest = next(iter(chunks))
            if self.count - counts[oldest] < self.kept:
                break
            del chunks[oldest]
            self.count -= counts.pop(oldest)


class TxnTable:
    """Transactions by id: open, recently ended in full, and older outcomes."""

    def __init__(
        self,
        store: Store,
        resolve_topic: Callable[[str], Topic | None],
        *,
        default_timeout: float,
        max_timeout: float,
        ended_retention: float,
        ended_in_memory: int = 1_000,
        outcomes_kept: int = 200_000,
    ) -> None:
        self._store = store
        self._resolve_topic = resolve_topic
        self.default_timeout = default_timeout
        self.max_timeout = max_timeout
        self.ended_retention_ms = int(ended_retention * 1000)
        self._txns: dict[int, TxnRecord] = {}
        self._holders: dict[str, TxnRecord] = {}
        self._next_seq = 0
        self._reserved_upto = 0
        self._durable_upto = 0
        self._deadlines: list[tuple[int, int]] = []
        self._deadline_changed = asyncio.Event()
        self._finish_keys: set[str] = set()
        self._epochs: dict[str, IdEpoch] = {}  # by transactional id (scoped)
        self.checked_at = 0
        """When :meth:`check_open` last looked at a clock (ms): a send stamps its
        message with it rather than reading the clock again."""
        self._ended: deque[int] = deque()  # full ended records, oldest end first
        self._ended_in_memory = ended_in_memory
        self._outcomes = _Outcomes(outcomes_kept)  # seq -> _outcome_code()
        self.ack_participant: AckParticipant | None = None
        self.on_ended: Callable[[TxnRecord, bool], None] | None = None

    # -- loading -------------------------------------------------------------------

    async def load(self) -> None:
        """Load the persisted counter, open and recently ended transactions, finish keys."""
        self._next_seq = await self._store.next_txn_seq() or 0  # ids below were reserved
        self._reserved_upto = self._durable_upto = self._next_seq
        horizon = now_ms() - self.ended_retention_ms
        # Ended transactions older than the newest ``ended_in_memory`` come back as
        # outcomes only, from their small columns; the rest (open ones too) in full.
        boundary = -1  # ended ones with a seq below it are outcomes only
        if self._ended_in_memory <= 0:
            boundary = 1 << 62
        else:
            oldest_kept = await self._store.nth_newest_ended_seq(horizon, self._ended_in_memory - 1)
            if oldest_kept is not None:  # None: they all fit in memory
                boundary = oldest_kept
        if boundary >= 0:
            codes = await self._store.outcome_codes(
                horizon, boundary, self._outcomes.kept, _REASON_CODES
            )  # the newest first: the counter is past the first
            if codes:
                self._next_seq = max(self._next_seq, codes[0][0] + 1)
            codes.reverse()
            for start in range(0, len(codes), _LOAD_SLICE):  # 200,000 would be one ~40 ms step
                if start:
                    await asyncio.sleep(0)
                self._outcomes.put_sorted(codes[start : start + _LOAD_SLICE])
        rows = await self._store.txn_rows(horizon, boundary)
        for (
            seq,
            state,
            timeout_ms,
            deadline_ms,
            tid,
            label,
            fenced,
            topics,
            acks,
            created,
            ended,
            reason,
            owner,
        ) in rows:
            is_open = state == "open"
            record = TxnRecord(
                TxnId(seq),
                _STATES[state],
                timeout_ms,
                deadline_ms,
                tid,
                label,
                created,
                bool(fenced),
                dict.fromkeys(unpack(topics)),
                # an ended transaction's acks were applied or released: none kept
                [PendingAck(t, s, tuple(p), c) for t, s, p, c in unpack(acks)] if is_open else [],
                ended,
                reason,
                persisted=True,
                owner=owner,
            )
            self._txns[seq] = record
            if record.holder_key is not None and not record.fenced:
                self._holders[record.holder_key] = record
            if is_open:
                heapq.heappush(self._deadlines, (deadline_ms, seq))
            else:
                self._ended.append(seq)
        if rows:  # ordered by seq
            self._next_seq = max(self._next_seq, rows[-1][0] + 1)
        self._finish_keys = set(await self._store.finish_keys())
        for name, epoch, session, used_ms, txn_seq in await self._store.producer_epoch_rows():
            self._epochs[name] = IdEpoch(ProducerEpoch(epoch, session), used_ms, txn_seq)

    # -- lookups -------------------------------------------------------------------

    def get(self, txn_id: TxnId | str) -> TxnRecord:
        """The record of ``txn_id``; raises :class:`TxnNotFoundError`."""
        if type(txn_id) is TxnId:
            seq = txn_id.seq
        else:
            try:
                seq = TxnId.coerce(txn_id).seq
            except InvalidArgumentError:
                raise TxnNotFoundError(f"transaction {txn_id!r} not found") from None
        record = self._txns.get(seq)
        if record is None:
            code = self._outcomes.get(seq)
            if code is None:
                raise TxnNotFoundError(f"transaction {txn_id} not found")
            return _from_outcome(seq, code)
        return record

    async def read_info(self, record: TxnRecord) -> TxnInfo:
        """The full info of a transaction, reading its row when only its outcome is kept."""
        if not record.compact:
            return record.info()
        row = await self._store.ended_txn_row(record.txn_id.seq)
        return record.info() if row is None else _ended_info(*row)

    async def owner_of(self, record: TxnRecord) -> str | None:
        """The principal that began ``record`` (read from its row when only its outcome is
        kept; None when that row is gone too)."""
        if not record.compact:
            return record.owner
        return (await self.read_info(record)).owner

    def _keep_outcome(self, seq: int, committed: bool, fenced: bool, reason: str | None) -> None:
        self._outcomes.put(seq, _outcome_code(committed, fenced, reason))

    def _retire(self, record: TxnRecord) -> None:
        """An ended record: drop what no end needs, and keep only the newest in full."""
        record.acks = []
        self._ended.append(record.txn_id.seq)
        while len(self._ended) > self._ended_in_memory:
            seq = self._ended.popleft()
            old = self._txns.get(seq)
            if old is None or not old.state.is_ended:
                continue
            del self._txns[seq]
            key = old.holder_key
            if key is not None and self._holders.get(key) is old:
                del self._holders[key]
            self._keep_outcome(seq, old.state is TxnState.COMMITTED, old.fenced, old.reason)

    def records(self) -> Iterable[TxnRecord]:
        """Every known record (open and recently ended)."""
        return self._txns.values()

    def _check(self) -> None:
        """Assert the table's invariants (the model tests call it after every step, as
        sortedcontainers' ``_check``): ids, holders, deadlines, ended order, outcomes."""
        assert self._durable_upto <= self._reserved_upto
        for seq, record in self._txns.items():
            assert record.txn_id.seq == seq < self._next_seq, (seq, self._next_seq)
        for key, holder in self._holders.items():
            # a holder is a known record of that transactional id (ended ones stay, to
            # be fenced by the next begin)
            assert holder.holder_key == key
            assert self._txns.get(holder.txn_id.seq) is holder
        deadlines = self._deadlines
        assert all(deadlines[(i - 1) // 2] <= deadlines[i] for i in range(1, len(deadlines)))
        queued = set(deadlines)
        ended = set(self._ended)
        for seq, record in self._txns.items():
            if record.state is TxnState.OPEN:
                assert (record.deadline_ms, seq) in queued, f"open txn {seq} has no deadline"
            elif record.state.is_ended:
                assert seq in ended, f"ended txn {seq} is not in the ended order"
        self._outcomes._check()

    async def list_txns(
        self,
        state: str | None = None,
        label_prefix: str | None = None,
        older_than_ms: int | None = None,
    ) -> list[TxnInfo]:
        """Transactions filtered by state, label prefix and age (begun more than
        ``older_than_ms`` ago), oldest first: :meth:`iter_txns` in one list."""
        pages = self.iter_txns(state, label_prefix, older_than_ms)
        return [info async for page in pages for info in page]

    async def iter_txns(
        self,
        state: str | None = None,
        label_prefix: str | None = None,
        older_than_ms: int | None = None,
        *,
        page: int = _LIST_SLICE,
    ) -> AsyncIterator[list[TxnInfo]]:
        """:meth:`list_txns` in pages of about ``page`` infos, oldest first.

        Every transaction a GET would find is listed: ended ones no longer held in full
        in memory are read from their rows (kept ``ended_retention`` seconds) one page
        at a time, so a listing of millions holds one page of rows and infos at once.
        Raises :class:`InvalidArgumentError` for a bad filter before the first page.
        """
        if older_than_ms is not None and (
            isinstance(older_than_ms, bool)
            or not isinstance(older_than_ms, int)
            or older_than_ms < 0
        ):
            raise InvalidArgumentError("older_than_ms must be a non-negative integer")
        born_before = None if older_than_ms is None else now_ms() - older_than_ms
        if state is not None:
            try:
                wanted: TxnState | None = TxnState(state)
            except ValueError:
                raise InvalidArgumentError(f"unknown transaction state {state!r}") from None
        else:
            wanted = None
        # The records in memory first, in one step: a record that leaves memory later
        # already has its final row (written in its end's batch, before it ended here),
        # so the reads below find it; one begun later is not listed (seq cap below).
        in_memory = set(self._txns)
        newest = self._next_seq - 1
        listed = [
            (seq, record.info())
            for seq, record in self._txns.items()
            if (wanted is None or record.state is wanted)
            and (
                label_prefix is None
                or (record.label is not None and record.label.startswith(label_prefix))
            )
            and (born_before is None or record.created_ms <= born_before)
        ]
        listed.sort(key=itemgetter(0))
        if wanted is not None and not wanted.is_ended:
            for at in range(0, len(listed), page):
                yield [info for _, info in listed[at : at + page]]
            return
        after, taken = -1, 0  # listed[:taken] went out already
        while True:  # keyset pages
            rows = await self._store.ended_txn_rows(
                state=None if wanted is None else wanted.value,
                label_prefix=label_prefix,
                born_before_ms=born_before,
                after_seq=after,
                upto_seq=newest,
                limit=page,
            )
            last = len(rows) < page
            upto = newest if last else rows[-1][0]
            ended = [(row[0], _ended_info(*row)) for row in rows if row[0] not in in_memory]
            cut = bisect.bisect_right(listed, upto, lo=taken, key=itemgetter(0))
            merged = [info for _, info in heapq.merge(listed[taken:cut], ended, key=itemgetter(0))]
            taken = cut
            if merged:
                yield merged
            if last:
                return
            after = upto

    def open_records(self) -> list[TxnRecord]:
        """Transactions currently open."""
        return [r for r in self._txns.values() if r.state is TxnState.OPEN]

    def low_watermark(self) -> int:
        """The smallest txn sequence that may still be open; all below have ended."""
        undecided = (
            seq
            for seq, record in self._txns.items()
            if record.state in (TxnState.OPEN, TxnState.COMMITTING, TxnState.ABORTING)
        )
        return min(undecided, default=self._next_seq)
