"""Transactions: begin, commit and abort (one or several at once), and their listing.

A transaction's sends go through the producing part and its acks through the consuming
part; the :class:`~txnstream.api.Transaction` handle :meth:`Transactions.begin` returns
holds all three.

Producer epochs: a front door whose producers fence each other by epoch (the Kafka
listener's transactional ids) keeps each id's epoch here, durable with the
transactions: :meth:`Transactions.bump_producer_epoch` fences the id's transaction and
raises its epoch in one flush, :meth:`Transactions.producer_transaction` finds the
transaction a producer is in after a restart or a failover, and
:meth:`Transactions.sync` makes pipelined work durable before it is acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence

from txnstream.ledger import FencedError, InvalidArgumentError, TxnId
from txnstream.txn_buffer import FinishResult, ProducerEpoch, TxnInfo, TxnRecord, TxnState

from ._core import Core, PrincipalArg, as_principal, is_restricted, owner_name
from ._handles import Transaction, TransactionScope
from ._partitions import PartitionedConsuming
from ._produce import Producing


class Transactions:
    """The engine's transactions (a part of :class:`~txnstream.api.Engine`)."""

    def __init__(self, core: Core, producing: Producing, consuming: PartitionedConsuming) -> None:
        self._core = core
        self._metrics = core.metrics
        self._producing = producing
        self._consuming = consuming

    def handle(self, txn: TxnId) -> Transaction:
        """A :class:`Transaction` handle on ``txn``."""
        return Transaction(self, self._producing, self._consuming, txn)

    def on_txn_ended(self, record: TxnRecord, committed: bool) -> None:
        """The coordinator ended ``record``: count it."""
        if committed:
            self._metrics.txns_committed.inc()
        else:
            self._metrics.txns_aborted.inc()
            if record.timed_out:
                self._metrics.txns_timed_out.inc()

    async def begin(
        self,
        *,
        timeout: float | None = None,
        transactional_id: str | None = None,
        label: str | None = None,
        principal: PrincipalArg = None,
    ) -> Transaction:
        """Begin a transaction (``timeout`` in seconds, default from the config).

        A ``transactional_id`` held by an open transaction aborts and fences it. With a
        ``principal`` (see :class:`Principal`) the transaction belongs to it and the
        ``transactional_id`` is scoped to it.
        """
        self._core.check_open()
        owner = owner_name(principal)
        store = self._core.rt.store
        if store.over_limit or store.failure is not None:
            await store.wait_writable()
            self._core.check_open()
        rt = self._core.rt
        fences_undecided = rt.coordinator.holder_undecided(transactional_id, owner)
        record = rt.coordinator.begin(
            timeout=timeout, transactional_id=transactional_id, label=label, owner=owner
        )
        if fences_undecided or not rt.coordinator.id_is_durable(record.txn_id):
            # the fenced predecessor's abort (or its decision in flight), or the id
            # block's reservation, is durable on return: a crash can then neither revive
            # the old holder nor reuse the id. (A predecessor already decided needs no
            # wait: see Coordinator.holder_undecided.)
            await rt.store.flush()
        return self.handle(record.txn_id)

    def producer_epoch(
        self, transactional_id: str, *, principal: PrincipalArg = None
    ) -> ProducerEpoch | None:
        """``transactional_id``'s current producer epoch (scoped to ``principal``, as
        :meth:`begin` scopes it); None when it has none (never bumped, or expired)."""
        self._core.check_open()
        return self._core.rt.coordinator.producer_epoch(transactional_id, owner_name(principal))

    async def bump_producer_epoch(
        self, transactional_id: str, *, at_least: int = 0, principal: PrincipalArg = None
    ) -> ProducerEpoch:
        """Give ``transactional_id`` a new producer epoch, durable on return: one past
        its current one (0 the first time, and after it expired), and at least
        ``at_least``. The transaction holding the id is fenced (aborted if open) in the
        same flush, as a :meth:`begin` with the id would: a producer with an older epoch
        is a zombie, after a restart or a failover too."""
        self._core.check_open()
        store = self._core.rt.store
        if store.over_limit or store.failure is not None:
            await store.wait_writable()
            self._core.check_open()
        return await self._core.rt.coordinator.bump_epoch(
            transactional_id, owner_name(principal), at_least=at_least
        )

    def producer_transaction(
        self, transactional_id: str, *, principal: PrincipalArg = None
    ) -> Transaction | None:
        """The transaction the producer of ``transactional_id``'s current epoch is in,
        after a restart or a failover as well: the newest one begun with the id since
        the epoch's bump, open or ended by the engine (timed out), until its producer
        ends it (commit, abort) or a newer :meth:`begin` fences it; None otherwise (also
        for a transaction that wrote nothing yet: a crash forgets it)."""
        self._core.check_open()
        coordinator = self._core.rt.coordinator
        record = coordinator.producer_txn(transactional_id, owner_name(principal))
        return None if record is None else self.handle(record.txn_id)

    async def expire_producer_epochs(self, idle: float) -> int:
        """Forget the producer epochs of transactional ids unused for ``idle`` seconds
        (no bump, no transaction begun) that hold no open transaction; returns how many."""
        self._core.check_open()
        return await self._core.rt.coordinator.expire_epochs(idle)

    async def sync(self) -> None:
        """Return once everything submitted so far is durable (pipelined transactional
        sends and acks included): what a front door awaits before it acknowledges
        pipelined work that must survive a crash or a failover."""
        self._core.check_open()
        await self._core.rt.store.flush()

    def transaction(
        self,
        *,
        timeout: float | None = None,
        transactional_id: str | None = None,
        label: str | None = None,
    ) -> TransactionScope:
        """``async with engine.transaction() as txn``: commit on exit, abort on exception."""
        return TransactionScope(self, timeout, transactional_id, label)

    async def commit(self, txn: TxnId | str, *, principal: PrincipalArg = None) -> TxnInfo:
        """Commit; returns once the decision and every topic's marker are durable.

        ``principal``: who asks (:class:`ForbiddenError` for another's transaction).
        """
        record = await self.decide(txn, commit=True, principal=principal)
        return await self._core.rt.coordinator.read_info(record)

    async def abort(self, txn: TxnId | str, *, principal: PrincipalArg = None) -> TxnInfo:
        """Abort; returns once the decision and every topic's marker are durable.

        ``principal``: who asks (:class:`ForbiddenError` for another's transaction).
        """
        record = await self.decide(txn, commit=False, principal=principal)
        return await self._core.rt.coordinator.read_info(record)

    async def decide(
        self, txn: TxnId | str, *, commit: bool, principal: PrincipalArg = None
    ) -> TxnRecord:
        """Commit or abort, durable on return, without building the :class:`TxnInfo`
        (what ``Transaction.commit`` and ``abort`` need)."""
        self._core.check_open()
        if principal is not None:
            await self._core.check_owner(txn, principal)
        started = time.perf_counter()
        coordinator = self._core.rt.coordinator
        try:
            if commit:
                record = await coordinator.commit(txn)
            else:
                record = await coordinator.abort(txn)
        except FencedError:
            self._metrics.fenced_requests.inc()
            raise
        if commit:
            self._metrics.commit_latency.observe(time.perf_counter() - started)
        return record

    def is_open(self, txn: TxnId) -> bool:
        """Whether ``txn`` is open and not fenced (a scope that ends with an exception
        aborts it then)."""
        record = self._core.rt.coordinator.get(txn)
        return record.state is TxnState.OPEN and not record.fenced

    async def get_transaction(self, txn: TxnId | str, *, principal: PrincipalArg = None) -> TxnInfo:
        """The transaction's current state, label and topics.

        ``principal``: who asks (:class:`ForbiddenError` for another's transaction).
        """
        self._core.check_open()
        await self._core.check_owner(txn, principal)
        coordinator = self._core.rt.coordinator
        return await coordinator.read_info(coordinator.get(txn))

    async def transactions(
        self,
        state: str | None = None,
        label_prefix: str | None = None,
        older_than_ms: int | None = None,
        *,
        principal: PrincipalArg = None,
    ) -> list[TxnInfo]:
        """Known transactions, filtered by state, label prefix and age (begun more than
        ``older_than_ms`` ago); with a non-admin ``principal``, only its own."""
        pages = self.iter_transactions(state, label_prefix, older_than_ms, principal=principal)
        return [info async for page in pages for info in page]

    async def iter_transactions(
        self,
        state: str | None = None,
        label_prefix: str | None = None,
        older_than_ms: int | None = None,
        *,
        principal: PrincipalArg = None,
    ) -> AsyncGenerator[list[TxnInfo], None]:
        """:meth:`transactions` in pages, oldest first: a listing of millions of ended
        transactions (all kept ``ended_txn_retention``) never sits in memory at once."""
        self._core.check_open()
        p = as_principal(principal)
        only = p.name if p is not None and is_restricted(p) else None  # a non-admin's own
        async for page in self._core.rt.coordinator.iter_txns(state, label_prefix, older_than_ms):
            if only is not None:
                page = [info for info in page if info.owner == only]
            if page:
                yield page

    async def finish(
        self,
        commit: Sequence[TxnId | str] = (),
        abort: Sequence[TxnId | str] = (),
        idempotence_key: str | None = None,
        *,
        principal: PrincipalArg = None,
    ) -> FinishResult:
        """Commit and abort several transactions in one atomic step (see Coordinator).

        With a ``principal``, the ``idempotence_key`` is scoped to it and every listed
        transaction must be its own (unless it is an admin): else :class:`ForbiddenError`
        and nothing changes.
        """
        self._core.check_open()
        for name, ids in (("commit", commit), ("abort", abort)):
            if isinstance(ids, str) or not isinstance(ids, Sequence):
                raise InvalidArgumentError(f"{name} must be a list of transaction ids")
        if is_restricted(as_principal(principal)):  # (else no per-transaction step)
            for txn in [*commit, *abort]:
                await self._core.check_owner(txn, principal)
        try:
            return await self._core.rt.coordinator.finish(
                commit, abort, idempotence_key, owner=owner_name(principal)
            )
        except FencedError:
            self._metrics.fenced_requests.inc()
            raise
