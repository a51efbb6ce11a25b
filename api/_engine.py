"""Engine: the embedded facade and composition root.

The engine owns one term of serving at a time, a :class:`~txnstream.api._runtime.Runtime`
(the store, every topic, the coordinator, the subscription registry and their policies,
built by recovery and replaced in one assignment), and every background task (started
through :meth:`Engine._spawn`, cancelled and awaited by :meth:`Engine.close`, and by every
change of term before it happens). Calls check the lifecycle state first: ``UNOPENED ->
OPEN -> CLOSING -> CLOSED``. When the store or a background task fails, ``OPEN ->
RECOVERING -> OPEN``: the engine drops its term, reopens the store and recovers in place
into a new one, with backoff (or goes ``FAILED`` with ``auto_recover=False``); a
PostgreSQL store's lost lease drops it the same way (``STANDBY``). New data is refused
while the disk is nearly full (:class:`InsufficientStorageError`, health ``degraded``);
reads go on.

Work lives in the layers; this module wires it. The engine's state and call checks are
:class:`~txnstream.api._core.EngineCore`; producing (:mod:`txnstream.api._produce`), topic
administration (:mod:`txnstream.api._admin`) and consuming (:mod:`txnstream.api._consume`)
are its parts; recovery is :mod:`txnstream.api._recovery`, background upkeep
:mod:`txnstream.api._maintenance`, statistics :mod:`txnstream.api._stats`, and the handles it
returns :mod:`txnstream.api._handles`. This module keeps lifecycle, task ownership and
transactions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Coroutine, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from txnstream.ledger import (
    DB_FILE,
    Catalog,
    ClosedError,
    DataDirectoryLostError,
    DataDirLockedError,
    FencedError,
    InvalidArgumentError,
    LeaseLostError,
    Store,
    TxnId,
    WriteBatch,
)
from txnstream.snapshots import is_due, take_snapshot
from txnstream.txn_buffer import FinishResult, TxnInfo, TxnRecord, TxnState

from . import _gc as gc_policy
from ._admin import TopicAdmin
from ._config import EngineConfig
from ._core import (
    EngineState,
    Health,
    PrincipalArg,
    as_principal,
    is_restricted,
    owner_name,
)
from ._handles import SubscriptionHandle, Transaction, TransactionScope
from ._maintenance import prepare_low_watermark_aborts, prepare_producer_expiry
from ._offload import Offloading
from ._offsets import Offsets
from ._partitions import PartitionedConsuming
from ._policies import ConsumerPolicies
from ._produce import Producing
from ._recovery import load_runtime
from ._stats import summarize_recovery

log = logging.getLogger("txnstream.engine")

_MAINTENANCE_INTERVAL = 1.0
_PRODUCER_EXPIRY_CHECK = 60.0  # seconds between looks for expired producers, at most


class Engine(Producing, ConsumerPolicies, TopicAdmin, Offsets, PartitionedConsuming, Offloading):
    """An embedded txnstream engine over one data directory.

    Use ``async with Engine.open(path) as engine:`` or ``engine = await Engine.open(path)``
    then ``await engine.close()``. One engine per data directory per process.
    """

    # -- lifecycle -----------------------------------------------------------------

    @classmethod
    def open(
        cls, path: str | Path, config: EngineConfig | None = None, *, standby: bool = False
    ) -> _EngineOpener:
        """Create or open the data directory at ``path``, or the PostgreSQL store at a
        ``postgresql://`` URL; recovers before returning. Any other ``scheme://`` raises
        :class:`InvalidArgumentError`.

        A PostgreSQL store whose lease another server holds raises
        :class:`DataDirLockedError`; with ``standby=True`` the engine opens as a standby
        instead (state ``STANDBY``, calls answer unavailable), takes over when that
        lease expires, and steps down to a standby again when it loses the lease.
        """
        engine = cls(path, config)
        engine._standby_allowed = standby and engine.store_url is not None
        return _EngineOpener(engine)

    async def _open(self) -> None:
        if self.state is not EngineState.UNOPENED:
            raise ClosedError("an engine cannot be reopened; make a new one")
        if self.store_url is None:
            self.path.mkdir(parents=True, exist_ok=True)
        with gc_policy.collection_paused(self.config.gc_freeze):
            try:
                await self._load()
            except DataDirLockedError:
                if not self._standby_allowed:
                    raise
                log.info("another server is the active: standing by")
                self._enter_standby()
                return
            if self.config.gc_freeze:  # before collection resumes: the young generation
                gc_policy.freeze()  # holds all the recovered objects until then
                self._gc_frozen = True
        self.state = EngineState.OPEN
        self._start_background()

    async def _load(self) -> None:
        """Open the store, rebuild this term's state from it (recovery) and swap it in."""
        started = time.perf_counter()
        store = await self._open_store()
        if store.reserve_unreachable:
            log.warning("%s", _unreachable(store, self.path))
        self._loading = store
        try:
            await self._load_identity(store)
            store.on_failure = self._fail
            store.on_flush = self.metrics.observe_flush
            runtime = await load_runtime(
                store,
                self.config,
                self._remote,
                on_txn_ended=self._on_txn_ended,
                on_dead_letter=self._dead_letter_ready,
            )
            recovery = summarize_recovery(
                runtime.snapshots.values(),
                len(runtime.coordinator.open_records()),
                time.perf_counter() - started,
            )
        except BaseException:
            await store.close()
            raise
        finally:
            self._loading = None
        self._runtime, self.recovery = runtime, recovery

    async def _open_store(self) -> Store:
        if self.store_url is not None:
            from txnstream.ledger import PgStore  # (imports psycopg: only when used)

            return await PgStore.open(
                self.store_url.url,
                max_pending_entries=self.config.max_pending_entries,
                lease_timeout=self.config.lease_timeout,
                advertise_url=self.config.advertise_url,
            )
        return await Store.open(
            self.path / DB_FILE,
            synchronous="FULL" if self.config.durability == "full" else "NORMAL",
            max_pending_entries=self.config.max_pending_entries,
            min_free_bytes=self.config.min_free_bytes,
            writer_process=self.config.writer == "process",
        )

    async def _load_identity(self, store: Store) -> None:
        """This data directory's store identity (made once; see ``Catalog.store_identity``),
        which names and owns what it offloads."""
        # Inode numbers, not device numbers: those of some mounts (overlay, NFS) change
        # from one mount to the next, and the directory must stay itself across restarts.
        if self.store_url is not None:  # a database is where it is: made once, kept
            home = "postgresql"
        else:
            home = f"{self.path.resolve().stat().st_ino}:{(self.path / DB_FILE).stat().st_ino}"
        identity = await Catalog(store).store_identity(home)
        self._remote.owner = identity.store_id
        self._remote.adopts_legacy = identity.adopts_legacy
        if identity.minted == "copied":
            log.warning(
                "data directory %s was copied or restored (it is not where it was made):"
                " its store identity is now %s, and it offloads only into a prefix no"
                " other store claims (see --offload-takeover)",
                self.path,
                identity.store_id,
            )
        elif identity.minted is not None:
            log.info("data directory %s: store identity %s", self.path, identity.store_id)

    def _start_background(self) -> None:
        runtime = self._rt
        self._spawn(runtime.coordinator.run_timeouts(), name="txnstream-timeouts")
        self._spawn(self._maintain(), name="txnstream-maintenance")
        self._spawn(self._snapshot_loop(), name="txnstream-snapshots")
        self._spawn(self._ttl_loop(), name="txnstream-ttl")
        self._spawn(self._dead_letter_loop(), name="txnstream-dead-letters")
        if runtime.subscriptions.dead_lettering():  # recovered past their limit
            self._dead_letter_event.set()
        if self.config.offload_url is not None:
            self._spawn(self._offload_loop(), name="txnstream-offload")

    async def close(self) -> None:
        """Stop background work, write everything queued, close the store. Idempotent.

        Open transactions stay open with their original deadlines.
        """
        if self.state in (EngineState.CLOSED, EngineState.UNOPENED):
            self.state = EngineState.CLOSED
            return
        if self.state is EngineState.CLOSING:
            return
        recovering = self.state is EngineState.RECOVERING
        self.state = EngineState.CLOSING
        await self._stop_background()
        runtime = self._runtime
        if runtime is not None and runtime.store.failure is None and not recovering:
            batch = WriteBatch()
            runtime.coordinator.persist_open(batch)  # open transactions survive a clean close
            for topic in runtime.topics.values():
                topic.ledger.prepare_close(batch)  # the next open need not count them
            if batch:
                runtime.store.submit(batch, wait=False)
        self._wake_all()  # waiting receivers leave with ClosedError
        try:
            if runtime is not None:
                await runtime.store.close()
        finally:
            if self._gc_frozen:
                self._gc_frozen = False
                gc_policy.release()
        self.state = EngineState.CLOSED

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("engine task %s crashed", task.get_name(), exc_info=exc)
            self._fail(exc)

    async def _stop_background(self) -> None:
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _fail(self, exc: BaseException) -> None:
        """The store or a background task failed: recover in place (or stay FAILED)."""
        if self.state is not EngineState.OPEN:
            return
        self._failure = exc
        self._wake_all()
        if self._standby_allowed and isinstance(exc, LeaseLostError):
            log.error("this server lost the store's lease (%s): stepping down to standby", exc)
            self.state = EngineState.STANDBY
            self.active_url = None
            self._spawn(self._step_down(), name="txnstream-step-down")
            return
        # A deleted data directory is not recovered in place: reopening would make a new,
        # empty database where the old one was and serve it as if it were the same.
        if not self.config.auto_recover or isinstance(exc, DataDirectoryLostError):
            self.state = EngineState.FAILED
            return
        self.state = EngineState.RECOVERING
        self._spawn(self._recover(), name="txnstream-recovery")

    async def _recover(self) -> None:
        """Reopen the store and rebuild everything from disk, with backoff, until it works.

        A failed flush leaves memory ahead of disk (positions were assigned when the
        batches were prepared), so the only consistent state is the durable one:
        recovery rebuilds it exactly as a restart would. Acknowledged writes are on
        disk; the failed flush's requests got an error, so nothing acknowledged is lost.
        """
        await self._stop_background()
        delay = 0.05
        while True:
            runtime, self._runtime = self._runtime, None  # the whole term goes at once
            if runtime is not None:
                await runtime.store.close()
            try:
                await self._load()
            except Exception as exc:  # noqa: BLE001 - any failure: report it, try again
                if self._standby_allowed and isinstance(exc, DataDirLockedError):
                    await self._step_down()  # another server took over meanwhile
                    return
                self._failure = exc
                log.warning("recovery failed (%s); retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            break
        if self._gc_frozen:  # the old state is garbage now: let collection reach it
            self._gc_frozen = False
            gc_policy.release()
        log.warning("recovered from a storage failure: %s", self._failure)
        self.state = EngineState.OPEN
        self._failure = None
        self._start_background()

    def health(self) -> Health:
        """Whether writes are accepted now (``ok``), only reads (``degraded``), or
        neither (``recovering``, ``failed``), with the reason."""
        runtime = self._runtime
        if self.state is EngineState.OPEN and runtime is not None:
            store = runtime.store
            if store.disk_full is not None:
                return Health(
                    "degraded",
                    f"writes refused: the disk of {self.path} is full ({store.disk_full});"
                    " writes wait for space and resume by themselves",
                )
            if store.reserve_unreachable:
                return Health("degraded", _unreachable(store, self.path))
            if store.space_low:
                return Health(
                    "degraded",
                    f"writes refused: {store.free_bytes} bytes free, fewer than the"
                    f" {store.min_free_bytes} required",
                )
            problem = self._offload_problem()
            if problem is not None:
                return Health("degraded", problem)
            return Health("ok", None)
        if self.state is EngineState.RECOVERING:
            reason = f"reopening after a storage failure: {self._failure}"
            loading = runtime.store if runtime is not None else self._loading
            if loading is not None and loading.disk_full is not None:
                reason += f"; the disk of {self.path} is full: waiting for space"
            return Health("recovering", reason)
        if self.state is EngineState.FAILED:
            return Health("failed", f"the engine failed: {self._failure}")
        if self.state is EngineState.STANDBY:
            return Health("standby", f"another server is the active: {self.active_url}")
        return Health("failed", f"the engine is {self.state.value}")

    # -- standby and failover (PostgreSQL store) -------------------------------------

    def _enter_standby(self) -> None:
        self.state = EngineState.STANDBY
        self._spawn(self._stand_by(), name="txnstream-standby")

    async def _step_down(self) -> None:
        """The lease is lost: drop everything in memory (the store holds it all), close
        the store and wait as a standby. Calls meanwhile answer unavailable."""
        self.state = EngineState.STANDBY
        self.active_url = None
        await self._stop_background()
        runtime, self._runtime = self._runtime, None  # the whole term goes at once
        if runtime is not None:
            await runtime.store.close()
        if self._gc_frozen:  # the old state is garbage now
            self._gc_frozen = False
            gc_policy.release()
        await self._stand_by()

    async def _stand_by(self) -> None:
        """Poll the store's lease (every tenth of the lease timeout); when it is free
        or expired, take it with the next epoch, load the state (newest snapshot plus
        tail replay, the recovery path) and serve."""
        from txnstream.ledger import LeaseWatch  # (imports psycopg: only when used)

        assert self.store_url is not None
        watch = LeaseWatch(self.store_url.url)
        # A tenth: the poll is one small read, and its interval adds to every failover.
        poll = self.config.lease_timeout / 10
        try:
            while True:
                lease = await watch.read()
                self.active_url = None if lease is None else lease.active_url
                if lease is None or lease.free:
                    if lease is not None and lease.holder is not None:
                        # expired, not released: its holder may be paused mid-write
                        ended = await watch.end_sessions(lease)
                        if ended:
                            log.warning("ended %d session(s) of the expired active", ended)
                    try:
                        await self._load()
                        break
                    except DataDirLockedError:
                        pass  # another standby won it
                    except Exception as exc:  # noqa: BLE001 - report, keep standing by
                        log.warning("cannot take over the store yet: %s", exc)
                await asyncio.sleep(poll)
        finally:
            await watch.close()
        self.active_url = None
        self._failure = None
        self.metrics.failovers.inc()
        log.warning("took over the store's lease: this server is the active now")
        self.state = EngineState.OPEN
        self._start_background()

    def _wake_all(self) -> None:
        runtime = self._runtime
        if runtime is not None:
            runtime.subscriptions.close()
            for topic in runtime.topics.values():
                topic.notify()

    # -- background ----------------------------------------------------------------

    async def _maintain(self) -> None:
        """Detach silent HTTP consumers; abort buffers' transactions below the watermark;
        forget expired idempotent producers."""
        rt = self._rt  # a background task serves one term (they stop before it ends)
        next_expiry = 0.0
        while True:
            await asyncio.sleep(_MAINTENANCE_INTERVAL)
            batch = WriteBatch()
            # expired deliveries count toward redelivery limits, which outlive restarts
            rt.subscriptions.expire(time.monotonic(), self.config.consumer_expiry, batch)
            low_watermark = rt.coordinator.low_watermark()
            prepare_low_watermark_aborts(batch, list(rt.topics.values()), low_watermark)
            expiry = self.config.producer_expiry
            if time.monotonic() >= next_expiry:  # (a look at every producer: not every pass)
                next_expiry = time.monotonic() + min(expiry / 10, _PRODUCER_EXPIRY_CHECK)
                prepare_producer_expiry(batch, list(rt.topics.values()), expiry)
            if batch:
                await rt.store.write(batch)

    async def _snapshot_loop(self) -> None:
        """Take snapshots as the policy asks; apply retention."""
        rt = self._rt
        every, interval = self.config.snapshot_every, self.config.snapshot_interval
        tick = min(0.5, interval / 2)
        next_retention = 0.0
        while True:
            await asyncio.sleep(tick)
            batch = WriteBatch()
            for topic in list(rt.topics.values()):
                state = rt.snapshots.get(topic.topic_id)
                if state is not None and is_due(state, topic, every=every, interval=interval):
                    await take_snapshot(batch, topic, state)  # seals in slices
            if batch:
                await rt.store.write(batch)
            if time.monotonic() >= next_retention:
                next_retention = time.monotonic() + self.config.retention_check_interval
                every_topic = self.config.default_retention is not None
                for name in list(rt.topics if every_topic else rt.retention):
                    if name in rt.topics:
                        await self._apply_retention(rt.topics[name])

    def _on_txn_ended(self, record: TxnRecord, committed: bool) -> None:
        if committed:
            self.metrics.txns_committed.inc()
        else:
            self.metrics.txns_aborted.inc()
            if record.timed_out:
                self.metrics.txns_timed_out.inc()

    # -- transactions --------------------------------------------------------------

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
        self._check_open()
        owner = owner_name(principal)
        store = self._rt.store
        if store.over_limit or store.failure is not None:
            await store.wait_writable()
            self._check_open()
        rt = self._rt
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
        return Transaction(self, record.txn_id)

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
        record = await self._decide(txn, commit=True, principal=principal)
        return await self._rt.coordinator.read_info(record)

    async def abort(self, txn: TxnId | str, *, principal: PrincipalArg = None) -> TxnInfo:
        """Abort; returns once the decision and every topic's marker are durable.

        ``principal``: who asks (:class:`ForbiddenError` for another's transaction).
        """
        record = await self._decide(txn, commit=False, principal=principal)
        return await self._rt.coordinator.read_info(record)

    async def _decide(
        self, txn: TxnId | str, *, commit: bool, principal: PrincipalArg = None
    ) -> TxnRecord:
        """Commit or abort, durable on return, without building the :class:`TxnInfo`
        (what ``Transaction.commit`` and ``abort`` need)."""
        self._check_open()
        if principal is not None:
            await self._check_owner(txn, principal)
        started = time.perf_counter()
        coordinator = self._rt.coordinator
        try:
            if commit:
                record = await coordinator.commit(txn)
            else:
                record = await coordinator.abort(txn)
        except FencedError:
            self.metrics.fenced_requests.inc()
            raise
        if commit:
            self.metrics.commit_latency.observe(time.perf_counter() - started)
        return record

    def _is_open(self, txn: TxnId) -> bool:
        """Whether ``txn`` is open and not fenced (a scope that ends with an exception
        aborts it then)."""
        record = self._rt.coordinator.get(txn)
        return record.state is TxnState.OPEN and not record.fenced

    async def get_transaction(self, txn: TxnId | str, *, principal: PrincipalArg = None) -> TxnInfo:
        """The transaction's current state, label and topics.

        ``principal``: who asks (:class:`ForbiddenError` for another's transaction).
        """
        self._check_open()
        await self._check_owner(txn, principal)
        coordinator = self._rt.coordinator
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
        self._check_open()
        p = as_principal(principal)
        only = p.name if p is not None and is_restricted(p) else None  # a non-admin's own
        async for page in self._rt.coordinator.iter_txns(state, label_prefix, older_than_ms):
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
        self._check_open()
        for name, ids in (("commit", commit), ("abort", abort)):
            if isinstance(ids, str) or not isinstance(ids, Sequence):
                raise InvalidArgumentError(f"{name} must be a list of transaction ids")
        if is_restricted(as_principal(principal)):  # (else no per-transaction step)
            for txn in [*commit, *abort]:
                await self._check_owner(txn, principal)
        try:
            return await self._rt.coordinator.finish(
                commit, abort, idempotence_key, owner=owner_name(principal)
            )
        except FencedError:
            self.metrics.fenced_requests.inc()
            raise

    # -- subscribing ----------------------------------------------------------------

    async def subscribe(
        self,
        topic: str,
        name: str,
        *,
        type: str = "exclusive",
        initial_position: str = "earliest",
        isolation: str = "read_committed",
        max_redeliveries: int | None = None,
        dead_letter_topic: str | None = None,
        nack_delay_ms: int | None = None,
    ) -> SubscriptionHandle:
        """Create the subscription if needed and attach a new consumer to it (on a
        partitioned topic, to every partition's: it receives from them all; the consumer
        policy fields as :meth:`create_subscription` takes them)."""
        await self.create_subscription(
            topic,
            name,
            type=type,
            initial_position=initial_position,
            isolation=isolation,
            max_redeliveries=max_redeliveries,
            dead_letter_topic=dead_letter_topic,
            nack_delay_ms=nack_delay_ms,
        )
        consumer = f"consumer-{next(self._consumer_ids)}"
        for part in self.partitions_of(topic) or [topic]:
            self._subscription(part, name).attach(consumer, expires=False)
        return SubscriptionHandle(self, topic, name, consumer)


def _unreachable(store: Store, path: Path) -> str:
    return (
        f"writes refused: the free-space reserve (min_free_bytes = {store.min_free_bytes})"
        f" is larger than the whole file system of {path} ({store.disk_bytes} bytes), so"
        " new data is always refused; lower --min-free-bytes or use a larger disk"
    )


class _EngineOpener:
    """``await Engine.open(...)`` or ``async with Engine.open(...) as engine``."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __await__(self) -> Any:
        return self._open().__await__()

    async def _open(self) -> Engine:
        await self._engine._open()
        return self._engine

    async def __aenter__(self) -> Engine:
        return await self._open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._engine.close()
