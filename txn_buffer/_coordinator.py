"""Coordinator: every transaction's life across topics.

Begin, the topics (and transactional acks) a transaction touched, timeouts, fencing by
``transactional_id``, the commit/abort decision, ``finish`` of several transactions at
once, and the low watermark.

Why there is no separate "committing" record on disk: a decision, its markers on every
touched topic and the acknowledgements it applies are one :class:`~txnstream.ledger.WriteBatch`,
so they become durable in one store transaction. After a crash either all of it is
there or none of it is (the transaction is then still open and times out, or was never
durable at all). "Redo" after a crash is therefore only reconciling buffers that hold
an open transaction the coordinator no longer has open (see ``Engine`` recovery).

Transaction rows are written through the same ordered writer queue as data, as one
upsert of the whole row, the first time the transaction touches a topic or a
subscription (in the same batch as that first entry or ack) and at its end, so a row is
durable no later than anything the transaction wrote, and a short transaction costs two
row writes that ride its own group commit. A transaction that wrote nothing yet has no
row; a crash forgets it (nothing of it is durable), a clean ``close()`` writes it.
Transaction ids come from reserved blocks (:meth:`~txnstream.ledger.WriteBatch.reserve_txn_seqs`),
so none is ever reused.

Owners: a transaction begun for a principal (the HTTP server with ``--auth``) records
it as ``owner``; ``transactional_id``s and ``finish`` idempotence keys live in their
owner's namespace (:func:`scoped_name`), so two principals using the same string never
fence or collide. Who may act on a transaction is the engine's check, not this class's.

Memory stays O(open transactions): an ended transaction keeps its full record only
while it is among the newest ``ended_in_memory`` to end; after that only its outcome
survives, as one small int (committed?, fenced?, reason) — all that an idempotent
commit or abort needs — for the newest ``outcomes_kept``. A GET of such a transaction
reads its row (kept ``ended_retention`` seconds) for the rest.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import secrets
from collections.abc import Callable, Sequence

from txnstream.ledger import (
    EntryKind,
    FencedError,
    InvalidArgumentError,
    TxnId,
    TxnNotFoundError,
    TxnNotOpenError,
    WriteBatch,
    now_ms,
    pack,
)

from ._records import (
    FinishResult,
    IdEpoch,
    PendingAck,
    ProducerEpoch,
    TxnRecord,
    _not_open,
    scoped_name,
)
from ._state import TxnState
from ._table import TxnTable

END_SLICE = 500
"""Decisions prepared or published in one loop step at most (see ``_end_in_slices``)."""

log = logging.getLogger("txnstream.coordinator")

_MAX_LABEL = 200
_ID_BLOCK = 1000
_OUTCOME = {TxnState.COMMITTING: TxnState.COMMITTED, TxnState.ABORTING: TxnState.ABORTED}
_NO_ACKS = pack([])


def _holder_key(transactional_id: str, owner: str | None) -> str:
    """``transactional_id`` in ``owner``'s namespace, both checked."""
    if not isinstance(transactional_id, str) or not 0 < len(transactional_id) <= _MAX_LABEL:
        raise InvalidArgumentError("transactional_id must be a non-empty string ≤ 200 chars")
    if owner is not None and (not isinstance(owner, str) or not owner):
        raise InvalidArgumentError("owner must be a non-empty string")
    return scoped_name(owner, transactional_id)


class Coordinator(TxnTable):
    """Owns transactions: ids, states, timeouts, fencing, decisions."""

    # -- begin and use -------------------------------------------------------------

    def begin(
        self,
        *,
        timeout: float | None = None,
        transactional_id: str | None = None,
        label: str | None = None,
        owner: str | None = None,
    ) -> TxnRecord:
        """Start a transaction; its row is pipelined (durable before its first entry).

        A ``transactional_id`` already held by an open transaction of the same ``owner``
        aborts and fences it.
        """
        timeout = self.default_timeout if timeout is None else timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise InvalidArgumentError("timeout must be a number of seconds")
        if not 0 < timeout <= self.max_timeout:
            raise InvalidArgumentError(f"timeout must be in (0, {self.max_timeout}] seconds")
        if label is not None and (not isinstance(label, str) or len(label) > _MAX_LABEL):
            raise InvalidArgumentError(f"label must be a string of at most {_MAX_LABEL} chars")
        holder_key = None
        if transactional_id is not None:
            holder_key = _holder_key(transactional_id, owner)
        elif owner is not None and (not isinstance(owner, str) or not owner):
            raise InvalidArgumentError("owner must be a non-empty string")
        batch = WriteBatch()
        if holder_key is not None:
            self._fence_holder(batch, holder_key)
        if self._next_seq >= self._reserved_upto - _ID_BLOCK // 2:
            # Reserve the next block early, so callers rarely wait for it to be durable.
            self._reserved_upto = max(self._reserved_upto, self._next_seq) + _ID_BLOCK
            upto = self._reserved_upto
            batch.reserve_txn_seqs(upto)

            def reserved() -> None:
                self._durable_upto = max(self._durable_upto, upto)

            batch.on_durable(reserved)
        created = now_ms()
        timeout_ms = max(1, round(timeout * 1000))
        record = TxnRecord(
            TxnId(self._next_seq),
            TxnState.OPEN,
            timeout_ms,
            created + timeout_ms,
            transactional_id,
            label,
            created,
            owner=owner,
        )
        self._next_seq += 1
        if holder_key is not None and (state := self._epochs.get(holder_key)) is not None:
            # the epoch's producer is in this transaction now, and the id is in use (its
            # expiry counts from here); the row rides the flush of the transaction's
            # first write: before that, a crash forgets both, and nothing of it is lost
            state.used_ms, state.txn_seq = created, record.txn_id.seq
            state.write(batch, holder_key)
        if batch:
            self._store.submit(batch, wait=False)
        self._txns[record.txn_id.seq] = record
        if holder_key is not None:
            self._holders[holder_key] = record
        self._add_deadline(record)
        return record

    def _fence_holder(self, batch: WriteBatch, holder_key: str) -> TxnRecord | None:
        """Fence the transaction holding ``holder_key`` (aborting it if open), in ``batch``."""
        previous = self._holders.get(holder_key)
        if previous is not None:
            previous.fenced = True
            if previous.state is TxnState.OPEN:
                self._prepare_end(batch, previous, commit=False, reason="fenced")
            else:
                self.write_row(batch, previous)
        return previous

    # -- producer epochs -----------------------------------------------------------

    def producer_epoch(
        self, transactional_id: str, owner: str | None = None
    ) -> ProducerEpoch | None:
        """``transactional_id``'s (of ``owner``) producer epoch; None if it has none
        (never bumped, or expired)."""
        state = self._epochs.get(_holder_key(transactional_id, owner))
        return None if state is None else state.epoch

    async def bump_epoch(
        self, transactional_id: str, owner: str | None = None, *, at_least: int = 0
    ) -> ProducerEpoch:
        """Give ``transactional_id`` (of ``owner``) a new producer epoch, durable on
        return: one past its current one (0 for an id with none), at least ``at_least``.

        Like a :meth:`begin` with the id, it fences the transaction holding it (aborting
        it if open), in the same flush as the new epoch: whoever holds an older epoch
        is a zombie from then on, across restarts and failovers (the write is fenced
        like every write of the store: a server that lost the lease cannot bump).
        """
        if isinstance(at_least, bool) or not isinstance(at_least, int) or at_least < 0:
            raise InvalidArgumentError("at_least must be a non-negative integer")
        key = _holder_key(transactional_id, owner)
        self._store.check_writable()
        batch = WriteBatch()
        if self._fence_holder(batch, key) is not None:
            del self._holders[key]  # the new epoch is in no transaction yet
        current = self._epochs.get(key)
        epoch = ProducerEpoch(
            max(at_least, 0 if current is None else current.epoch.epoch + 1),
            secrets.token_hex(8),
        )
        state = self._epochs[key] = IdEpoch(epoch, now_ms())  # in no transaction yet
        state.write(batch, key)  # (memory first: a concurrent bump goes past this one)
        await self._store.write(batch)
        return epoch

    def producer_txn(self, transactional_id: str, owner: str | None = None) -> TxnRecord | None:
        """The transaction the producer of ``transactional_id``'s (of ``owner``) epoch is
        in: the epoch's newest transaction, open or ended by the engine (a timeout, the
        low watermark), until its client ends it (commit, abort) or a newer holder
        fences it; None otherwise. Durable with the transaction's first write (one that
        wrote nothing yet is forgotten by a crash, with the epoch's link to it)."""
        state = self._epochs.get(_holder_key(transactional_id, owner))
        if state is None or state.txn_seq is None:
            return None
        try:
            record = self.get(TxnId(state.txn_seq))
        except TxnNotFoundError:  # ended longer ago than ``ended_retention``
            return None
        if record.fenced or record.reason == "client":
            return None
        return record

    async def expire_epochs(self, idle: float) -> int:
        """Forget the producer epochs of transactional ids unused (no bump, no
        transaction begun) for ``idle`` seconds and holding no undecided transaction;
        returns how many. Such an id starts over: its next bump gives epoch 0."""
        horizon = now_ms() - round(idle * 1000)
        gone = [
            key
            for key, state in self._epochs.items()
            if state.used_ms < horizon
            and ((holder := self._holders.get(key)) is None or holder.state.is_ended)
        ]
        if not gone:
            return 0
        batch = WriteBatch()
        for key in gone:
            del self._epochs[key]
            batch.drop_producer_epoch(key)
        await self._store.write(batch)
        return len(gone)

    def holder_undecided(self, transactional_id: str | None, owner: str | None = None) -> bool:
        """Whether ``transactional_id`` (of ``owner``) is held by a transaction with no
        durable decision yet (open, or its commit or abort in flight): a :meth:`begin`
        that fences it must see that end durable before it returns. A holder already
        decided only gets its fenced flag, which rides the next flush: until then a
        crash forgets the new transaction too (it has nothing durable before that
        flush), so the old holder's decided outcome stands either way."""
        if not isinstance(transactional_id, str):
            return False
        holder = self._holders.get(scoped_name(owner, transactional_id))
        return holder is not None and not holder.state.is_ended

    def id_is_durable(self, txn_id: TxnId) -> bool:
        """True once ``txn_id``'s reservation is durable: no restart can hand it out again."""
        return txn_id.seq < self._durable_upto

    def check_open(self, txn_id: TxnId | str) -> TxnRecord:
        """The record if the transaction accepts work; raises fenced/not open/not found."""
        record = self.get(txn_id)
        if record.fenced:
            raise FencedError(f"transaction {record.txn_id} was fenced by a newer producer")
        if record.state is not TxnState.OPEN:
            raise TxnNotOpenError(_not_open(record))
        now = self.checked_at = now_ms()
        if now >= record.deadline_ms:
            self._deadline_changed.set()  # let the timeout task abort it now
            raise TxnNotOpenError(f"transaction {record.txn_id} timed out")
        return record

    def write_row(self, batch: WriteBatch, record: TxnRecord) -> None:
        """Upsert ``record``'s whole row into ``batch``.

        A row says open or a decision, never a state in between: a decision in flight
        is written as its outcome (its own batch, queued earlier, says the same).
        """
        record.persisted = True
        row = [
            record.txn_id.seq,
            str(_OUTCOME.get(record.state, record.state)),
            record.timeout_ms,
            record.deadline_ms,
            record.transactional_id,
            record.label,
            int(record.fenced),
            pack(list(record.topics)),
            pack([[a.topic, a.subscription, list(a.positions), a.cumulative] for a in record.acks])
            if record.acks
            else _NO_ACKS,
            record.created_ms,
            record.ended_ms,
            record.reason,
            record.owner,
        ]
        batch.record_txn(row)  # (a row of it queued in this batch already is updated)

    def persist_open(self, batch: WriteBatch) -> None:
        """Write the rows of open transactions that have none yet (for a clean close)."""
        for record in self._txns.values():
            if record.state is TxnState.OPEN and not record.persisted:
                self.write_row(batch, record)

    def register_topic(self, batch: WriteBatch, record: TxnRecord, topic: str) -> None:
        """Note that ``record`` touches ``topic`` (in ``batch``, before its data)."""
        if topic not in record.topics or not record.persisted:
            record.topics[topic] = None
            self.write_row(batch, record)

    def register_ack(self, batch: WriteBatch, record: TxnRecord, ack: PendingAck) -> None:
        """Note a transactional ack to apply at commit (in ``batch``)."""
        record.acks.append(ack)
        self.write_row(batch, record)

    def forget(self, batch: WriteBatch, topic: str, subscription: str | None = None) -> None:
        """Drop a deleted topic (or one subscription's acks) from open transactions.

        A topic recreated under the same name must not receive the old transactions'
        markers, and a recreated subscription must not receive their acks.
        """
        for record in self._txns.values():
            if record.state is not TxnState.OPEN:
                continue
            acks = [
                a
                for a in record.acks
                if not (a.topic == topic and subscription in (None, a.subscription))
            ]
            touched = subscription is None and topic in record.topics
            if touched:
                del record.topics[topic]
            if len(acks) != len(record.acks):
                record.acks = acks
                touched = True
            if touched and record.persisted:
                self.write_row(batch, record)

    # -- ending --------------------------------------------------------------------

    async def commit(self, txn_id: TxnId | str) -> TxnRecord:
        """Commit; returns once the decision and every marker are durable."""
        record = self.get(txn_id)
        if record.fenced:
            raise FencedError(f"transaction {record.txn_id} was fenced by a newer producer")
        if record.state in (TxnState.COMMITTED, TxnState.COMMITTING):
            await self._store.flush()
            return record
        if record.state is not TxnState.OPEN:
            raise TxnNotOpenError(_not_open(record))
        if now_ms() >= record.deadline_ms:
            await self._end([], [record], reason="timeout")
            raise TxnNotOpenError(
                f"transaction {record.txn_id} timed out (its {record.timeout_ms} ms timeout"
                " passed) and was aborted"
            )
        await self._end([record], [])
        return record

    async def abort(self, txn_id: TxnId | str) -> TxnRecord:
        """Abort; returns once the decision and every marker are durable."""
        record = self.get(txn_id)
        if record.fenced:
            raise FencedError(f"transaction {record.txn_id} was fenced by a newer producer")
        if record.state in (TxnState.ABORTED, TxnState.ABORTING):
            await self._store.flush()
            return record
        if record.state is not TxnState.OPEN:
            raise TxnNotOpenError(_not_open(record))
        await self._end([], [record])
        return record

    async def finish(
        self,
        commit: Sequence[TxnId | str] = (),
        abort: Sequence[TxnId | str] = (),
        idempotence_key: str | None = None,
        *,
        owner: str | None = None,
    ) -> FinishResult:
        """Decide several transactions in one atomic step.

        Every listed commit and abort takes effect, or none does. With an
        ``idempotence_key`` already used by an earlier successful ``finish`` of the same
        ``owner``, every listed transaction still open is aborted instead and
        ``duplicate`` is True.
        """
        if idempotence_key is not None:
            if not isinstance(idempotence_key, str) or not 0 < len(idempotence_key) <= 1000:
                raise InvalidArgumentError("idempotence_key must be a non-empty string")
            idempotence_key = scoped_name(owner, idempotence_key)
        to_commit = await self._records(commit)
        to_abort = await self._records(abort)
        everyone = [*to_commit, *to_abort]
        if len({r.txn_id.seq for r in everyone}) != len(everyone):
            raise InvalidArgumentError("a transaction is listed more than once")
        if idempotence_key is not None and idempotence_key in self._finish_keys:
            still_open = [r for r in everyone if r.state is TxnState.OPEN]
            await self._end([], still_open)
            await self._store.flush()
            return FinishResult(
                [str(r.txn_id) for r in everyone if r.state is TxnState.COMMITTED],
                [str(r.txn_id) for r in everyone if r.state is TxnState.ABORTED],
                duplicate=True,
            )
        now = now_ms()
        for record in everyone:
            if record.fenced:
                raise FencedError(f"transaction {record.txn_id} was fenced by a newer producer")
        for record in to_commit:
            expired = record.state is TxnState.OPEN and now >= record.deadline_ms
            if record.state in (TxnState.ABORTING, TxnState.ABORTED) or expired:
                raise TxnNotOpenError(f"transaction {record.txn_id} is not open")
        for record in to_abort:
            if record.state in (TxnState.COMMITTING, TxnState.COMMITTED):
                raise TxnNotOpenError(f"transaction {record.txn_id} is {record.state}")

        def remember_key(batch: WriteBatch) -> None:
            if idempotence_key is not None:
                self._finish_keys.add(idempotence_key)
                batch.put_finish_key(idempotence_key, now)

        await self._end(
            [r for r in to_commit if r.state is TxnState.OPEN],
            [r for r in to_abort if r.state is TxnState.OPEN],
            extra=remember_key,
        )
        await self._store.flush()  # also covers records another call was already ending
        return FinishResult(
            [str(r.txn_id) for r in to_commit], [str(r.txn_id) for r in to_abort], False
        )

    async def _records(self, ids: Sequence[TxnId | str]) -> list[TxnRecord]:
        """The records of ``ids`` (:meth:`get` of each), looked up :data:`END_SLICE` per
        loop step: a mass end lists thousands (~3 us each). Records are the same objects
        however long it takes; their states are checked afterwards, in one step."""
        records: list[TxnRecord] = []
        for start in range(0, len(ids), END_SLICE):
            if start:
                await asyncio.sleep(0)
            records += [self.get(t) for t in ids[start : start + END_SLICE]]
        return records

    async def _end(
        self,
        commits: list[TxnRecord],
        aborts: list[TxnRecord],
        *,
        reason: str = "client",
        extra: Callable[[WriteBatch], None] | None = None,
    ) -> None:
        for records, target in ((commits, TxnState.COMMITTING), (aborts, TxnState.ABORTING)):
            for record in records:  # check all first: nothing goes into the batch half-way
                if not record.state.can_become(target):
                    raise TxnNotOpenError(f"transaction {record.txn_id} is {record.state}")
        store = self._store
        store.check_writable()
        if len(commits) + len(aborts) > END_SLICE and not any(r.acks for r in (*commits, *aborts)):
            await self._end_in_slices(commits, aborts, reason, extra)
            return
        batch = store.batch  # the decisions join the flush that carries their data
        decided: list[Callable[[], None]] = []
        for record in commits:
            decided.append(self._prepare_end(batch, record, commit=True, reason=reason, later=True))
        for record in aborts:
            decided.append(
                self._prepare_end(batch, record, commit=False, reason=reason, later=True)
            )
        if decided:
            # one callback for all: the markers of each topic then share one buffer
            # update (a finish of 10,000 transactions is two steps, not 20,000 closures)
            def publish() -> None:
                for one in decided:
                    one()

            batch.on_durable(publish)
        if extra is not None:
            extra(batch)
        await store.write(batch)

    def _prepare_end(
        self,
        batch: WriteBatch,
        record: TxnRecord,
        *,
        commit: bool,
        reason: str,
        later: bool = False,
    ) -> Callable[[], None]:
        """Add ``record``'s decision to ``batch``; the returned callback publishes it
        once durable (registered on the batch here unless ``later``: then the caller
        registers it, after every other decision of the batch)."""
        target = TxnState.COMMITTING if commit else TxnState.ABORTING
        if not record.state.can_become(target):
            raise TxnNotOpenError(f"transaction {record.txn_id} is {record.state}")
        record.state, record.ended_ms = target, now_ms()  # the row says final; memory catches up
        record.reason = reason
        self.write_row(batch, record)
        decided = self._prepare_markers(batch, record, commit=commit)
        if not later:
            batch.on_durable(decided)
        return decided

    def _prepare_markers(
        self, batch: WriteBatch, record: TxnRecord, *, commit: bool
    ) -> Callable[[], None]:
        """Add the markers (and ack effects) of ``record``'s decision, already made in
        memory, to ``batch``; the returned callback publishes it once they are durable."""
        final = TxnState.COMMITTED if commit else TxnState.ABORTED
        ended = record.ended_ms
        kind = EntryKind.COMMIT if commit else EntryKind.ABORT
        for name in record.topics:
            topic = self._resolve_topic(name)
            if topic is not None:
                topic.prepare_marker(batch, kind, record.txn_id)
        if record.acks and self.ack_participant is not None:
            self.ack_participant.prepare_txn_end(batch, record, commit)

        def decided() -> None:
            record.state = final
            record.ended_ms = ended
            if self.on_ended is not None:
                self.on_ended(record, commit)
            self._retire(record)

        return decided

    async def _end_in_slices(
        self,
        commits: list[TxnRecord],
        aborts: list[TxnRecord],
        reason: str,
        extra: Callable[[WriteBatch], None] | None,
    ) -> None:
        """:meth:`_end` for many transactions (a mass timeout, a large ``finish``) in
        steps of :data:`END_SLICE`, so that no loop step prepares or publishes them all.

        The decision stays atomic: every row goes in one flush first (the coordinator's
        decision record), then the markers follow topic-side in flushes of a slice each,
        each publishing its slice once durable. A crash in between leaves decided rows
        whose transactions the topics still hold open: recovery writes their markers
        (:func:`reconcile`), as it does for any decision whose markers were lost.
        Transactions with acks never come here (their cursor updates ride the decision).
        """
        store = self._store
        plan = [(r, True) for r in commits] + [(r, False) for r in aborts]
        ended = now_ms()
        for record, commit in plan:  # one pass: no send or ack joins them from here on
            record.state = TxnState.COMMITTING if commit else TxnState.ABORTING
            record.ended_ms, record.reason = ended, reason
        rows = WriteBatch()
        for start in range(0, len(plan), END_SLICE):
            if start:
                await asyncio.sleep(0)
            for record, _ in plan[start : start + END_SLICE]:
                self.write_row(rows, record)
        if extra is not None:
            extra(rows)
        await store.write(rows)
        for start in range(0, len(plan), END_SLICE):
            batch = store.batch
            decided = [
                self._prepare_markers(batch, record, commit=commit)
                for record, commit in plan[start : start + END_SLICE]
            ]

            def publish(decided: list[Callable[[], None]] = decided) -> None:
                for one in decided:
                    one()

            batch.on_durable(publish)
            await store.write(batch)

    # -- timeouts and housekeeping ---------------------------------------------------

    def _add_deadline(self, record: TxnRecord) -> None:
        deadlines = self._deadlines
        if len(deadlines) > 2 * len(self._txns) + 1024:
            # An ended transaction's entry stays until its deadline passes (removing it
            # from the middle of the heap would cost more): at 2,500 txn/s and 60 s
            # timeouts, 150,000 stale entries, ~20 MB. Once they outnumber every known
            # transaction twice over, keep only the undecided ones (linear, amortized
            # over the pushes since the last time).
            txns = self._txns
            deadlines[:] = [
                entry
                for entry in deadlines
                if (known := txns.get(entry[1])) is not None and not known.state.is_ended
            ]
            heapq.heapify(deadlines)
        heapq.heappush(deadlines, (record.deadline_ms, record.txn_id.seq))
        if self._deadlines[0][1] == record.txn_id.seq:
            self._deadline_changed.set()

    async def run_timeouts(self) -> None:
        """Abort transactions whose deadline passed; forget long-ended ones. Runs forever."""
        next_prune = 0
        while True:
            now = now_ms()
            expired: list[TxnRecord] = []
            while self._deadlines and self._deadlines[0][0] <= now:
                _, seq = heapq.heappop(self._deadlines)
                record = self._txns.get(seq)
                if record is not None and record.state is TxnState.OPEN:
                    expired.append(record)
            if expired:
                log.info("aborting %d timed-out transaction(s)", len(expired))
                await self._end([], expired, reason="timeout")
            if now >= next_prune:
                await self._prune(now)
                next_prune = now + 60_000
            delay = (self._deadlines[0][0] - now_ms()) / 1000 if self._deadlines else 60.0
            self._deadline_changed.clear()
            try:
                async with asyncio.timeout(max(0.0, min(delay, 60.0))):
                    await self._deadline_changed.wait()
            except TimeoutError:
                pass

    async def _prune(self, now: int) -> None:
        horizon = now - self.ended_retention_ms
        gone = [
            seq
            for seq, r in self._txns.items()
            if r.state.is_ended and r.ended_ms is not None and r.ended_ms < horizon
        ]
        for seq in gone:
            record = self._txns.pop(seq)
            key = record.holder_key
            if key is not None and self._holders.get(key) is record:
                del self._holders[key]
        batch = WriteBatch()
        batch.prune_txns(horizon)
        await self._store.write(batch)
