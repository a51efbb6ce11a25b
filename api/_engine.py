"""Engine: the embedded facade and composition root.

An :class:`Engine` is a small facade over parts that each own their state and name their
dependencies (each a plain class; none reaches into another's privates):

- :class:`~txnstream.api._core.Core`: the lifecycle state, the current term (one
  :class:`~txnstream.api._runtime.Runtime`: the store, every topic, the coordinator, the
  subscription registry and their policies, replaced in one assignment) and the checks
  every call starts with; every part below takes it;
- :class:`~txnstream.api._lifecycle.Lifecycle`: open, close, in-place recovery, standby
  and failover, health, and every background task;
- :class:`~txnstream.api._produce.Producing`, :class:`~txnstream.api._txns.Transactions`,
  :class:`~txnstream.api._partitions.PartitionedConsuming` (over
  :class:`~txnstream.api._consume.Consuming`), :class:`~txnstream.api._offsets.Offsets`;
- :class:`~txnstream.api._admin.TopicAdmin` (topics, statistics, retention, snapshots),
  :class:`~txnstream.api._policies.ConsumerPolicies` (message TTL, dead letters),
  :class:`~txnstream.api._offload.Offloading` (tiered storage) and
  :class:`~txnstream.api._maintenance.Maintenance` (the periodic upkeep).

Each public method of the engine *is* its part's: a :class:`_Part` attribute shows the
part's signature and docstring on the class (``help(Engine)``), and the first lookup on
an engine binds the part's method to it, so a call costs what a call of the part costs
(the same Python calls per operation as when the engine was one class).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Self, TypeVar, overload

from ._admin import TopicAdmin
from ._config import EngineConfig
from ._consume import Consuming
from ._core import Core, EngineState
from ._lifecycle import Lifecycle
from ._maintenance import Maintenance
from ._offload import Offloading
from ._offsets import Offsets
from ._partitions import PartitionedConsuming
from ._policies import ConsumerPolicies
from ._produce import Producing
from ._runtime import Runtime
from ._stats import RecoverySummary
from ._txns import Transactions

if TYPE_CHECKING:
    from txnstream.ledger import Member

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Part(Generic[_P, _R]):
    """An engine method that is a part's (``Engine.send = _Part("_producing",
    Producing.send)``): on the class, the part's function (its signature and docstring
    for ``help`` and ``inspect``); on an engine, the part's bound method, which the first
    lookup stores on the engine so that later ones find it directly (no call through
    here, nor a delegating frame, on the hot path)."""

    def __init__(self, part: str, method: Callable[Concatenate[Any, _P], _R]) -> None:
        self._part = part
        self._method = method
        self._name = method.__name__
        self.__doc__ = method.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        if name != self._name:  # an engine method is its part's method of the same name
            raise TypeError(f"{owner.__name__}.{name} would be {self._part}.{self._name}")

    @overload
    def __get__(
        self, engine: None, owner: type | None = None
    ) -> Callable[Concatenate[Any, _P], _R]: ...

    @overload
    def __get__(self, engine: object, owner: type | None = None) -> Callable[_P, _R]: ...

    def __get__(self, engine: object, owner: type | None = None) -> Callable[..., _R]:
        if engine is None:
            return self._method
        bound: Callable[_P, _R] = getattr(getattr(engine, self._part), self._name)
        vars(engine)[self._name] = bound  # (an instance attribute: found first from now)
        return bound


class Engine:
    """An embedded txnstream engine over one data directory.

    Use ``async with Engine.open(path) as engine:`` or ``engine = await Engine.open(path)``
    then ``await engine.close()``. One engine per data directory per process.
    """

    if TYPE_CHECKING:  # (the core's, read through __getattr__: not class attributes)
        state: EngineState
        """The lifecycle state."""
        recovery: RecoverySummary | None
        """What the last open (or in-place recovery) rebuilt; None before the first open."""
        active_url: str | None
        """While a standby: the active's advertised URL (None when unknown)."""
        active_kafka: str | None
        """While a standby: the active's advertised Kafka address (None when unknown)."""
        members: tuple[Member, ...]
        """The servers sharing the store (PostgreSQL), as last read; empty otherwise."""

    def __init__(self, path: str | Path, config: EngineConfig | None = None) -> None:
        core = self._core = Core(path, config)
        self.path = core.path
        """The SQLite data directory (unused, the current directory, with PostgreSQL)."""
        self.store_url = core.store_url
        """The PostgreSQL store's URL; None for a SQLite data directory."""
        self.config = core.config
        self.metrics = core.metrics
        self._producing = Producing(core)
        self._plain = Consuming(core)  # one topic's (fetch; the rest through the next)
        self._consuming = PartitionedConsuming(core, self._plain)
        self._offsets = Offsets(core, self._consuming)
        self._transactions = Transactions(core, self._producing, self._consuming)
        self._admin = TopicAdmin(core)
        self._policies = ConsumerPolicies(core, self._admin)
        self._offloading = Offloading(core)
        self._lifecycle = Lifecycle(
            core,
            transactions=self._transactions,
            maintenance=Maintenance(core, self._admin),
            policies=self._policies,
            offloading=self._offloading,
        )

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            """``state``, ``recovery``, ``active_url``, ``active_kafka``, ``members``: the core's,
            read as they are now (attributes, not properties: the public surface is the
            methods)."""
            if name in _CORE_VIEW:
                return getattr(self._core, name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def _rt(self) -> Runtime:
        """This term's runtime (tests and benchmarks look into it)."""
        return self._core.rt

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
        return _EngineOpener(cls(path, config), standby)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- lifecycle and health --------------------------------------------------------
    close = _Part("_lifecycle", Lifecycle.close)
    health = _Part("_lifecycle", Lifecycle.health)
    storage_metrics = _Part("_lifecycle", Lifecycle.storage_metrics)
    standby_catalog = _Part("_lifecycle", Lifecycle.standby_catalog)

    # -- topics and their policies ---------------------------------------------------
    create_topic = _Part("_admin", TopicAdmin.create_topic)
    delete_topic = _Part("_admin", TopicAdmin.delete_topic)
    list_topics = _Part("_admin", TopicAdmin.list_topics)
    partitioned_topics = _Part("_admin", TopicAdmin.partitioned_topics)
    parent_of = _Part("_admin", TopicAdmin.parent_of)
    stats = _Part("_admin", TopicAdmin.stats)
    topic_stats = _Part("_admin", TopicAdmin.topic_stats)
    set_retention = _Part("_admin", TopicAdmin.set_retention)
    apply_retention = _Part("_admin", TopicAdmin.apply_retention)
    take_snapshot = _Part("_admin", TopicAdmin.take_snapshot)
    set_ttl = _Part("_policies", ConsumerPolicies.set_ttl)
    ttl = _Part("_policies", ConsumerPolicies.ttl)
    apply_ttl = _Part("_policies", ConsumerPolicies.apply_ttl)
    set_offload = _Part("_offloading", Offloading.set_offload)
    offload = _Part("_offloading", Offloading.offload)
    list_ledgers = _Part("_offloading", Offloading.list_ledgers)

    # -- producing -------------------------------------------------------------------
    send = _Part("_producing", Producing.send)
    send_many = _Part("_producing", Producing.send_many)
    send_batch = _Part("_producing", Producing.send_batch)
    produce = _Part("_producing", Producing.produce)
    produce_values = _Part("_producing", Producing.produce_values)
    produce_start = _Part("_producing", Producing.produce_start)

    # -- transactions ----------------------------------------------------------------
    begin = _Part("_transactions", Transactions.begin)
    transaction = _Part("_transactions", Transactions.transaction)
    commit = _Part("_transactions", Transactions.commit)
    abort = _Part("_transactions", Transactions.abort)
    finish = _Part("_transactions", Transactions.finish)
    get_transaction = _Part("_transactions", Transactions.get_transaction)
    transactions = _Part("_transactions", Transactions.transactions)
    iter_transactions = _Part("_transactions", Transactions.iter_transactions)
    producer_epoch = _Part("_transactions", Transactions.producer_epoch)
    bump_producer_epoch = _Part("_transactions", Transactions.bump_producer_epoch)
    producer_transaction = _Part("_transactions", Transactions.producer_transaction)
    expire_producer_epochs = _Part("_transactions", Transactions.expire_producer_epochs)
    sync = _Part("_transactions", Transactions.sync)

    # -- consuming -------------------------------------------------------------------
    subscribe = _Part("_consuming", PartitionedConsuming.subscribe)
    create_subscription = _Part("_consuming", PartitionedConsuming.create_subscription)
    subscription_policy = _Part("_consuming", PartitionedConsuming.subscription_policy)
    delete_subscription = _Part("_consuming", PartitionedConsuming.delete_subscription)
    partitions_of = _Part("_consuming", PartitionedConsuming.partitions_of)
    receive = _Part("_consuming", PartitionedConsuming.receive)
    ack = _Part("_consuming", PartitionedConsuming.ack)
    nack = _Part("_consuming", PartitionedConsuming.nack)
    release = _Part("_consuming", PartitionedConsuming.release)
    seek = _Part("_consuming", PartitionedConsuming.seek)
    fetch = _Part("_plain", Consuming.fetch)

    # -- offsets (the Kafka listener's view of a topic) ------------------------------
    offsets = _Part("_offsets", Offsets.offsets)
    offset_of = _Part("_offsets", Offsets.offset_of)
    position_at = _Part("_offsets", Offsets.position_at)
    committed_offset = _Part("_offsets", Offsets.committed_offset)
    commit_offset = _Part("_offsets", Offsets.commit_offset)
    watch = _Part("_offsets", Offsets.watch)
    last_sequence = _Part("_offsets", Offsets.last_sequence)


_CORE_VIEW = frozenset({"state", "recovery", "active_url", "active_kafka", "members"})
"""The engine's attributes that are its core's (they change as it lives)."""


class _EngineOpener:
    """``await Engine.open(...)`` or ``async with Engine.open(...) as engine``."""

    def __init__(self, engine: Engine, standby: bool) -> None:
        self._engine = engine
        self._standby = standby

    def __await__(self) -> Any:
        return self._open().__await__()

    async def _open(self) -> Engine:
        await self._engine._lifecycle.open(standby=self._standby)
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
