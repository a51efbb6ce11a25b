"""The engine's lifecycle: open, close, in-place recovery, standby and failover, and the
background tasks of each term.

Calls check the lifecycle state first: ``UNOPENED -> OPEN -> CLOSING -> CLOSED``. When the
store or a background task fails, ``OPEN -> RECOVERING -> OPEN``: the engine drops its
term, reopens the store and recovers in place into a new one, with backoff (or goes
``FAILED`` with ``auto_recover=False``); a PostgreSQL store's lost lease drops it the same
way (``STANDBY``). Every change of term is one assignment of ``Core.runtime`` (see
:mod:`txnstream.api._runtime`), made after the old term's background tasks stopped and
before the new term's start. Every background task is started through
:meth:`Lifecycle._spawn`, and cancelled and awaited by :meth:`Lifecycle.close` and by
every change of term. New data is refused while the disk is nearly full
(:class:`InsufficientStorageError`, health ``degraded``); reads go on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from txnstream.ledger import (
    DB_FILE,
    Catalog,
    ClosedError,
    DataDirectoryLostError,
    DataDirLockedError,
    EngineFailedError,
    LeaseLostError,
    StorageMetrics,
    Store,
    WriteBatch,
)

from . import _gc as gc_policy
from ._core import Core, EngineState, Health
from ._maintenance import Maintenance
from ._offload import Offloading
from ._policies import ConsumerPolicies
from ._recovery import load_runtime
from ._stats import summarize_recovery
from ._txns import Transactions

log = logging.getLogger("txnstream.engine")


class Lifecycle:
    """Opening, closing, failing, recovering and standing by; the background tasks (a
    part of :class:`~txnstream.api.Engine`). It makes each term and swaps it into the
    :class:`Core`; the parts whose loops it runs and whose callbacks recovery wires are
    given to it."""

    def __init__(
        self,
        core: Core,
        *,
        transactions: Transactions,
        maintenance: Maintenance,
        policies: ConsumerPolicies,
        offloading: Offloading,
    ) -> None:
        self._core = core
        self._config = core.config
        self._metrics = core.metrics
        self._transactions = transactions
        self._maintenance = maintenance
        self._policies = policies
        self._offloading = offloading
        self._standby_allowed = False
        """PostgreSQL store: wait as a standby when another server holds the lease (and
        step down to one when it is lost), instead of failing."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._gc_frozen = False
        self._gc_young = False
        self._loading: Store | None = None
        """The store a recovery is rebuilding a term from (health reports a full disk
        while the recovery waits for space)."""
        self._storage_metrics = StorageMetrics(database_bytes=0, wal_bytes=0)

    def storage_metrics(self) -> StorageMetrics:
        """What the store reports about its storage (database and write-ahead log
        sizes); while none is open (recovering, closed), what it reported last."""
        runtime = self._core.runtime
        if runtime is not None:
            self._storage_metrics = runtime.store.storage_metrics()
        return self._storage_metrics

    async def open(self, *, standby: bool = False) -> None:
        """Open the store and recover (see :meth:`~txnstream.api.Engine.open`); with
        ``standby`` (PostgreSQL store), stand by while another server holds its lease."""
        core = self._core
        if core.state is not EngineState.UNOPENED:
            raise ClosedError("an engine cannot be reopened; make a new one")
        self._standby_allowed = standby and core.store_url is not None
        if self._core.store_url is None:
            self._core.path.mkdir(parents=True, exist_ok=True)
        with gc_policy.collection_paused(self._config.gc_freeze):
            try:
                await self.load()
            except DataDirLockedError:
                if not self._standby_allowed:
                    raise
                log.info("another server is the active: standing by")
                self._hold_young_threshold()
                self._enter_standby()
                return
            self._hold_young_threshold()
            if self._config.gc_freeze:  # before collection resumes: the young generation
                gc_policy.freeze()  # holds all the recovered objects until then
                self._gc_frozen = True
        self._core.state = EngineState.OPEN
        self._start_background()

    async def load(self) -> None:
        """Open the store, rebuild this term's state from it (recovery) and swap it in."""
        started = time.perf_counter()
        store = await self._open_store()
        if store.reserve_unreachable:
            log.warning("%s", _unreachable(store, self._core.path))
        self._loading = store
        try:
            await self._load_identity(store)
            store.on_failure = self.fail
            store.on_flush = self._metrics.observe_flush
            runtime = await load_runtime(
                store,
                self._config,
                self._core.remote,
                on_txn_ended=self._transactions.on_txn_ended,
                on_dead_letter=self._policies.dead_letter_ready,
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
        self._core.runtime, self._core.recovery = runtime, recovery

    async def _open_store(self) -> Store:
        if self._core.store_url is not None:
            from txnstream.ledger import PgStore  # (imports psycopg: only when used)

            return await PgStore.open(
                self._core.store_url.url,
                max_pending_entries=self._config.max_pending_entries,
                lease_timeout=self._config.lease_timeout,
                advertise_url=self._config.advertise_url,
                advertise_kafka=self._config.kafka_advertise,
                member=self._core.member,
            )
        return await Store.open(
            self._core.path / DB_FILE,
            synchronous="FULL" if self._config.durability == "full" else "NORMAL",
            max_pending_entries=self._config.max_pending_entries,
            min_free_bytes=self._config.min_free_bytes,
            writer_process=self._config.writer == "process",
        )

    async def _load_identity(self, store: Store) -> None:
        """This data directory's store identity (made once; see ``Catalog.store_identity``),
        which names and owns what it offloads."""
        # Inode numbers, not device numbers: those of some mounts (overlay, NFS) change
        # from one mount to the next, and the directory must stay itself across restarts.
        if self._core.store_url is not None:  # a database is where it is: made once, kept
            home = "postgresql"
        else:
            path = self._core.path
            home = f"{path.resolve().stat().st_ino}:{(path / DB_FILE).stat().st_ino}"
        identity = await Catalog(store).store_identity(home)
        self._core.remote.owner = identity.store_id
        self._core.remote.adopts_legacy = identity.adopts_legacy
        if identity.minted == "copied":
            log.warning(
                "data directory %s was copied or restored (it is not where it was made):"
                " its store identity is now %s, and it offloads only into a prefix no"
                " other store claims (see --offload-takeover)",
                self._core.path,
                identity.store_id,
            )
        elif identity.minted is not None:
            log.info("data directory %s: store identity %s", self._core.path, identity.store_id)

    def _start_background(self) -> None:
        runtime = self._core.rt
        self._spawn(runtime.coordinator.run_timeouts(), name="txnstream-timeouts")
        self._spawn(self._maintenance.maintain(), name="txnstream-maintenance")
        self._spawn(self._maintenance.snapshot_loop(), name="txnstream-snapshots")
        self._spawn(self._policies.ttl_loop(), name="txnstream-ttl")
        self._spawn(self._policies.dead_letter_loop(), name="txnstream-dead-letters")
        if runtime.subscriptions.dead_lettering():  # recovered past their limit
            self._policies.dead_letter_ready()
        if self._config.offload_url is not None:
            self._spawn(self._offloading.offload_loop(), name="txnstream-offload")

    async def close(self) -> None:
        """Stop background work, write everything queued, close the store. Idempotent.

        Open transactions stay open with their original deadlines.
        """
        if self._core.state in (EngineState.CLOSED, EngineState.UNOPENED):
            self._core.state = EngineState.CLOSED
            return
        if self._core.state is EngineState.CLOSING:
            return
        recovering = self._core.state is EngineState.RECOVERING
        self._core.state = EngineState.CLOSING
        await self._stop_background()
        runtime = self._core.runtime
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
            if self._gc_young:
                self._gc_young = False
                gc_policy.release_young_threshold()
        self._core.state = EngineState.CLOSED

    def _hold_young_threshold(self) -> None:
        """Collect the young generation less often while this engine is open (see
        ``api/_gc.py``); with ``gc_freeze`` off the collector is left to the host."""
        if self._config.gc_freeze and not self._gc_young:
            gc_policy.hold_young_threshold()
            self._gc_young = True

    def _spawn(self, coro: Coroutine[Any, Any, None], *, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("engine task %s crashed", task.get_name(), exc_info=exc)
            self.fail(exc)

    async def _stop_background(self) -> None:
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def fail(self, exc: BaseException) -> None:
        """The store or a background task failed: recover in place (or stay FAILED)."""
        if self._core.state is not EngineState.OPEN:
            return
        self._core.failure = exc
        self._wake_all()
        if self._standby_allowed and isinstance(exc, LeaseLostError):
            log.error("this server lost the store's lease (%s): stepping down to standby", exc)
            self._core.state = EngineState.STANDBY
            self._core.active_url = self._core.active_kafka = None
            self._spawn(self._step_down(), name="txnstream-step-down")
            return
        # A deleted data directory is not recovered in place: reopening would make a new,
        # empty database where the old one was and serve it as if it were the same.
        if not self._config.auto_recover or isinstance(exc, DataDirectoryLostError):
            self._core.state = EngineState.FAILED
            return
        self._core.state = EngineState.RECOVERING
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
            runtime, self._core.runtime = self._core.runtime, None  # the whole term goes at once
            if runtime is not None:
                await runtime.store.close()
            try:
                await self.load()
            except Exception as exc:  # noqa: BLE001 - any failure: report it, try again
                if self._standby_allowed and isinstance(exc, DataDirLockedError):
                    await self._step_down()  # another server took over meanwhile
                    return
                self._core.failure = exc
                log.warning("recovery failed (%s); retrying in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            break
        if self._gc_frozen:  # the old state is garbage now: let collection reach it
            self._gc_frozen = False
            gc_policy.release()
        log.warning("recovered from a storage failure: %s", self._core.failure)
        self._core.state = EngineState.OPEN
        self._core.failure = None
        self._start_background()

    def health(self) -> Health:
        """Whether writes are accepted now (``ok``), only reads (``degraded``), or
        neither (``recovering``, ``failed``), with the reason."""
        runtime = self._core.runtime
        if self._core.state is EngineState.OPEN and runtime is not None:
            store = runtime.store
            if store.disk_full is not None:
                return Health(
                    "degraded",
                    f"writes refused: the disk of {self._core.path} is full ({store.disk_full});"
                    " writes wait for space and resume by themselves",
                )
            if store.reserve_unreachable:
                return Health("degraded", _unreachable(store, self._core.path))
            if store.space_low:
                return Health(
                    "degraded",
                    f"writes refused: {store.free_bytes} bytes free, fewer than the"
                    f" {store.min_free_bytes} required",
                )
            problem = self._offloading.problem()
            if problem is not None:
                return Health("degraded", problem)
            return Health("ok", None)
        if self._core.state is EngineState.RECOVERING:
            reason = f"reopening after a storage failure: {self._core.failure}"
            loading = runtime.store if runtime is not None else self._loading
            if loading is not None and loading.disk_full is not None:
                reason += f"; the disk of {self._core.path} is full: waiting for space"
            return Health("recovering", reason)
        if self._core.state is EngineState.FAILED:
            return Health("failed", f"the engine failed: {self._core.failure}")
        if self._core.state is EngineState.STANDBY:
            return Health("standby", f"another server is the active: {self._core.active_url}")
        return Health("failed", f"the engine is {self._core.state.value}")

    # -- standby and failover (PostgreSQL store) -------------------------------------

    def _enter_standby(self) -> None:
        self._core.state = EngineState.STANDBY
        self._spawn(self._stand_by(), name="txnstream-standby")

    async def _step_down(self) -> None:
        """The lease is lost: drop everything in memory (the store holds it all), close
        the store and wait as a standby. Calls meanwhile answer unavailable."""
        self._core.state = EngineState.STANDBY
        self._core.active_url = self._core.active_kafka = None
        await self._stop_background()
        runtime, self._core.runtime = self._core.runtime, None  # the whole term goes at once
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
        from txnstream.ledger import LeaseWatch, Member  # (imports psycopg: only when used)

        assert self._core.store_url is not None
        config = self._config
        me = Member(self._core.member, config.advertise_url, config.kafka_advertise)
        watch = self._core.watch = LeaseWatch(
            self._core.store_url.url, member=me, ttl=config.lease_timeout
        )
        # A tenth: the poll is one small read, and its interval adds to every failover.
        poll = config.lease_timeout / 10
        took_over = False
        try:
            while True:
                lease = await watch.read()
                self._core.active_url = None if lease is None else lease.active_url
                self._core.active_kafka = None if lease is None else lease.active_kafka
                if lease is None or lease.free:
                    if lease is not None and lease.holder is not None:
                        # expired, not released: its holder may be paused mid-write
                        ended = await watch.end_sessions(lease)
                        if ended:
                            log.warning("ended %d session(s) of the expired active", ended)
                    try:
                        await self.load()
                        took_over = True
                        break
                    except DataDirLockedError:
                        pass  # another standby won it
                    except Exception as exc:  # noqa: BLE001 - report, keep standing by
                        log.warning("cannot take over the store yet: %s", exc)
                await asyncio.sleep(poll)
        finally:
            self._core.watch = None
            await watch.close(withdraw_member=not took_over)  # (the active's store keeps it)
        self._core.active_url = self._core.active_kafka = None
        self._core.failure = None
        self._metrics.failovers.inc()
        log.warning("took over the store's lease: this server is the active now")
        self._core.state = EngineState.OPEN
        self._start_background()

    async def standby_catalog(self) -> tuple[list[str], dict[str, int]]:
        """On a standby: the store's topic names and partitioned topics (name ->
        partition count) as the active last committed them, read from the store (the
        standby holds none in memory). Raises :class:`EngineFailedError` when this engine
        is not a standby or the store cannot be read now."""
        watch = self._core.watch
        if self._core.state is not EngineState.STANDBY or watch is None:
            raise EngineFailedError(f"the engine is {self._core.state.value}, not a standby")
        found = await watch.catalog()
        if found is None:
            raise EngineFailedError("the store cannot be read now")
        return found

    def _wake_all(self) -> None:
        runtime = self._core.runtime
        if runtime is not None:
            runtime.subscriptions.close()
            for topic in runtime.topics.values():
                topic.notify()


def _unreachable(store: Store, path: Path) -> str:
    return (
        f"writes refused: the free-space reserve (min_free_bytes = {store.min_free_bytes})"
        f" is larger than the whole file system of {path} ({store.disk_bytes} bytes), so"
        " new data is always refused; lower --min-free-bytes or use a larger disk"
    )
