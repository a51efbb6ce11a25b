"""What every part of the engine shares: the current term and the checks calls start with.

:class:`Core` holds what outlives a term of serving (configuration, metrics, the
offloaded-object reader, the admin and tier locks), the lifecycle state, and the term
itself, one :class:`~txnstream.api._runtime.Runtime` in one attribute. The engine's parts
(producing :mod:`txnstream.api._produce`, consuming :mod:`txnstream.api._consume` and
:mod:`txnstream.api._partitions`, topics :mod:`txnstream.api._admin`, transactions
:mod:`txnstream.api._txns`, the lifecycle :mod:`txnstream.api._lifecycle`, ...) each take
the one :class:`Core` and reach the term only through :attr:`Core.rt`, so none can see a
new store beside an old coordinator.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from txnstream.ledger import (
    ClosedError,
    CorruptObjectError,
    EngineFailedError,
    FencedError,
    ForbiddenError,
    InvalidArgumentError,
    Member,
    OffloadStore,
    Position,
    PostgresUrl,
    TopicNotFoundError,
    TxnId,
    process_id,
    store_location,
    validate_name,
)
from txnstream.txn_buffer import Topic, TxnRecord

from ._config import EngineConfig
from ._grants import OPERATIONS, Grant
from ._metrics import EngineMetrics
from ._runtime import Runtime
from ._stats import RecoverySummary

if TYPE_CHECKING:
    from txnstream.ledger import LeaseWatch  # (imports psycopg: only when used)

PositionsArg = Sequence[Position | str] | Position | str
log = logging.getLogger("txnstream.engine")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a call acts for, when the caller names one (the HTTP server with ``--auth``).

    A transaction belongs to the principal that began it; another non-``admin`` principal
    naming it gets :class:`ForbiddenError`. Transactional ids, ``finish`` idempotence keys
    and idempotent producer names are scoped to ``name``. Calls that name no principal
    (the embedded API) are unrestricted and unscoped, as before principals existed.
    """

    name: str
    admin: bool = False
    grants: tuple[Grant, ...] = ()
    """What it may do on topics and subscriptions (:mod:`txnstream.api._grants`); an admin
    may do everything."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidArgumentError("a principal's name must be a non-empty string")

    def may(self, permission: str, topic: str, subscription: str | None = None) -> bool:
        """True if it holds ``permission`` on ``topic`` (and on ``subscription``, if named)."""
        return self.admin or any(g.allows(permission, topic, subscription) for g in self.grants)

    def may_do(self, operation: str, topic: str, subscription: str | None = None) -> bool:
        """True if it may do ``operation`` (a key of :data:`~txnstream.api._grants.OPERATIONS`)
        on ``topic`` (and ``subscription``, for the operations on one)."""
        return any(self.may(p, topic, subscription) for p in OPERATIONS[operation])

    def sees(self, topic: str) -> bool:
        """True if it has any grant on ``topic`` (or is an admin): it is listed to it."""
        return self.admin or any(g.matches(topic) for g in self.grants)

    def check(self, permission: str, topic: str, subscription: str | None = None) -> None:
        """Raise :class:`ForbiddenError` (reason ``no_grant``) unless it :meth:`may`."""
        if not self.may(permission, topic, subscription):
            on = f"topic {topic!r}" if subscription is None else f"subscription {subscription!r}"
            if subscription is not None:
                on += f" of topic {topic!r}"
            refused = ForbiddenError(f"principal {self.name!r} may not {permission} on {on}")
            refused.reason = "no_grant"  # type: ignore[attr-defined]  # for the refusal count
            raise refused


PrincipalArg = Principal | str | None
"""A :class:`Principal`, a plain name (a non-admin principal) or None (unrestricted)."""


def as_principal(principal: PrincipalArg) -> Principal | None:
    """``principal`` as a :class:`Principal` (a ``str`` names a non-admin one)."""
    if principal is None or isinstance(principal, Principal):
        return principal
    if isinstance(principal, str):
        return Principal(principal)
    raise InvalidArgumentError("principal must be a Principal, a name or None")


def owner_name(principal: PrincipalArg) -> str | None:
    """The namespace ``principal`` scopes names in (None: the unscoped one)."""
    p = as_principal(principal)
    return None if p is None else p.name


def is_restricted(principal: Principal | None) -> bool:
    """True if ``principal`` may act only on its own transactions."""
    return principal is not None and not principal.admin


class EngineState(enum.Enum):
    """Lifecycle of an :class:`Engine`."""

    UNOPENED = "unopened"
    OPEN = "open"
    RECOVERING = "recovering"
    STANDBY = "standby"
    """PostgreSQL store: another server holds the store's lease; this one waits to take
    over (every call answers unavailable meanwhile)."""
    CLOSING = "closing"
    CLOSED = "closed"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Health:
    """``status`` is ``ok`` (writes accepted), ``degraded`` (reads only: e.g. the disk is
    full), ``recovering``, ``standby`` (another server is the active) or ``failed``;
    ``reason`` says why when it is not ``ok``."""

    status: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class ProduceResult:
    """Positions of a produced batch; ``duplicate`` if an idempotent producer resent it."""

    positions: list[Position]
    duplicate: bool
    topics: list[str] | None = None
    """Produced to a partitioned topic: the partition topic of each position, in order
    (None for any other topic)."""


def parse_positions(positions: PositionsArg) -> list[Position]:
    if isinstance(positions, Position | str):
        return [Position.coerce(positions)]
    if not isinstance(positions, Sequence):
        raise InvalidArgumentError("positions must be a list")
    items = cast("Sequence[Position | str]", positions)  # a Position (a tuple) went above
    return [Position.coerce(p) for p in items]


def check_values(values: Sequence[Any]) -> Sequence[Any]:
    if isinstance(values, str | bytes | dict) or not isinstance(values, Sequence):
        raise InvalidArgumentError("values must be a list")
    return values


class Core:
    """The lifecycle state, the current term and what outlives terms; the checks every
    engine call starts with. One per engine, shared by its parts."""

    def __init__(self, path: str | Path, config: EngineConfig | None = None) -> None:
        location = store_location(path)  # a path, a postgresql:// URL, or an error
        self.store_url = location if isinstance(location, PostgresUrl) else None
        """The PostgreSQL store's URL; None for a SQLite data directory."""
        self.path = location if isinstance(location, Path) else Path()
        """The SQLite data directory (unused, the current directory, with PostgreSQL)."""
        self.config = config or EngineConfig()
        self.metrics = EngineMetrics()
        self.state = EngineState.UNOPENED
        self.failure: BaseException | None = None
        """Why the engine is recovering or failed (None while it serves)."""
        self.recovery: RecoverySummary | None = None
        """What the last open (or in-place recovery) rebuilt; None before the first open."""
        self.active_url: str | None = None
        """While a standby: the active's advertised URL as the lease row says (None when
        unknown)."""
        self.active_kafka: str | None = None
        """While a standby: the active's advertised Kafka address (``HOST:PORT``) as the
        lease row says (None when unknown, or when the active has no Kafka listener)."""
        self.watch: LeaseWatch | None = None
        """While a standby: its view of the store's lease (and catalog)."""
        self.member = process_id()
        """This server's id among those sharing a PostgreSQL store (one per process)."""
        self.runtime: Runtime | None = None
        """This term's store and the state rebuilt from it (None while none is open);
        replaced whole on in-place recovery, failover and step-down (see
        :mod:`txnstream.api._runtime`)."""
        # one reader/writer of offloaded objects for the engine's life (its caches and
        # fetch counters survive an in-place recovery)
        self.remote = OffloadStore(self.config.offload_url)
        self.remote.on_index_fetch = self.metrics.offload_index_fetches.inc
        self.remote.on_data_fetch = self.metrics.offload_data_fetches.inc
        self.remote.on_corrupt = self._on_corrupt_object
        self.tier_lock = asyncio.Lock()
        """Serializes what changes a topic's tiers: offload steps, retention, deletion."""
        self.admin_lock = asyncio.Lock()
        """Serializes topic and subscription creation and deletion."""

    def _on_corrupt_object(self, error: CorruptObjectError) -> None:
        """A damaged offloaded object was found (in a worker thread; once per object)."""
        self.metrics.offload_corrupt_objects.inc()
        log.error("%s; its reads answer unavailable until it is repaired", error)

    def check_open(self) -> None:
        """Raise the error a call gets in the engine's state unless it is open."""
        if self.state is EngineState.OPEN:
            return
        if self.state is EngineState.FAILED:
            raise EngineFailedError(f"the engine failed: {self.failure}") from self.failure
        if self.state is EngineState.RECOVERING:
            raise EngineFailedError(
                f"the engine is recovering from a storage failure: {self.failure}"
            )
        if self.state is EngineState.STANDBY:
            raise EngineFailedError(
                f"this server is a standby; the active is {self.active_url or 'not known'}"
            )
        raise ClosedError(f"the engine is {self.state.value}")

    @property
    def members(self) -> tuple[Member, ...]:
        """The servers sharing the store (PostgreSQL), as last read: by the active's
        store at each lease renewal, by a standby at each lease poll; empty otherwise."""
        if self.runtime is not None:
            return self.runtime.store.members
        if self.watch is not None:
            return self.watch.members
        return ()

    @property
    def rt(self) -> Runtime:
        """This term's :class:`Runtime`; while there is none, the error a call gets in
        the engine's state (closed, recovering, standby, failed)."""
        runtime = self.runtime
        if runtime is None:
            self.check_open()
            raise ClosedError("the engine is not open")
        return runtime

    def topic(self, name: str) -> Topic:
        """The open engine's topic ``name`` (a partitioned topic's parent is not one)."""
        self.check_open()
        runtime = self.rt
        topic = runtime.topics.get(name)
        if topic is None:
            validate_name(name)
            if name in runtime.partitioned:
                raise InvalidArgumentError(
                    f"topic {name!r} is partitioned: this call takes one of its partitions"
                    f" ({name}-partition-0 ...)"
                )
            raise TopicNotFoundError(f"topic {name!r} not found")
        return topic

    async def check_owner(self, txn: TxnId | str, principal: PrincipalArg) -> None:
        """Raise :class:`ForbiddenError` unless ``principal`` may act on ``txn`` (its own,
        or an admin, or no principal); :class:`TxnNotFoundError` if it is unknown."""
        p = as_principal(principal)
        if not is_restricted(p):
            return
        assert p is not None
        coordinator = self.rt.coordinator
        record = coordinator.get(txn)
        if await coordinator.owner_of(record) != p.name:
            raise ForbiddenError(f"transaction {record.txn_id} belongs to another principal")

    def check_txn(self, txn: TxnId | str) -> TxnRecord:
        """``txn``'s record if it is open (fenced: counted, and :class:`FencedError`)."""
        try:
            return self.rt.coordinator.check_open(txn)
        except FencedError:
            self.metrics.fenced_requests.inc()
            raise

    async def delete_objects(self, urls: Sequence[str], topic: str | None = None) -> None:
        """Delete offloaded objects (and, with ``topic``, everything under its prefix of
        the configured store), off the event loop; failures are logged."""
        remote = self.remote
        if not urls and (topic is None or remote.base_url is None):
            return

        def delete() -> None:
            for url in urls:
                remote.delete_ledger(url)
            if topic is not None and remote.base_url is not None:
                remote.delete_topic(topic)

        try:
            await asyncio.to_thread(delete)
        except OSError as exc:
            log.warning("could not delete offloaded objects (%s); they stay as orphans", exc)
