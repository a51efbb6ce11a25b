"""Kafka producer ids, epochs and transactional ids, over the engine's transactions.

An idempotent producer gets a random 62-bit producer id (no two producers share one in
practice, across restarts too, without a durable counter) and stores its batches under
the engine's idempotent producer name ``kafka-<id>-<epoch>``: the engine keeps the
producer's last sequence and positions durable with the data, answers a retried batch
with its original positions, and the listener refuses a gap.

A transactional id keeps one producer id (derived from the id) and a new epoch at each
InitProducerId. The epoch is the engine's, durable as Kafka's transaction coordinator
state is (:meth:`~txnstream.api.Engine.bump_producer_epoch`): the bump fences the id's
transaction (aborting it if open) and raises its epoch in one flush, fenced like every
write of the store, so a zombie holding any older epoch is refused after a restart or a
failover too, never by chance. The id's transaction is one engine transaction begun
with the same ``transactional_id`` at the first AddPartitionsToTxn (or AddOffsetsToTxn).

**Going on after a failover or a restart.** What this module keeps in memory
(:class:`TxnProducer`) is only a cache beside the engine's epoch, valid while it is the
same :class:`~txnstream.api.ProducerEpoch` object (a new one at each bump, and at each
load of the store). When it is not (this server restarted, or became the active, or
another one bumped the id meanwhile), the producer state is rebuilt from the engine: its
epoch, and the transaction it is in
(:meth:`~txnstream.api.Engine.producer_transaction`). A producer that goes on with its
current producer id and epoch is then served: its open transaction is resumed and may
commit or abort, a transaction a timeout ended answers as it would have, and a commit
already decided answers as done. What a rebuilt producer added with AddPartitionsToTxn
is not known (only what it wrote is durable), so its Produce may name any partition it
may write until its transaction ends; one it had begun but not written to yet is begun
again at its first Produce (nothing of it was durable, nothing of it acknowledged).
That is safe because the listener acknowledges a transaction's Produce and
TxnOffsetCommit only once durable (:meth:`~txnstream.api.Engine.sync`): the resumed
transaction holds everything its producer was told was stored.

The sequence numbers of a transactional producer's batches are kept under the name of
its epoch's session (``kafka-<id>-<epoch>-<session>``, the engine's, new at every bump
and durable with it): a producer initialised again never finds an earlier session's
sequence numbers (which would make its first batches look like duplicates), and one
that goes on after a failover finds its own, so a batch it sends again is stored once.
A transactional id with no bump and no transaction begun for
``EngineConfig.transactional_id_expiry`` seconds, and no open transaction, is forgotten
(Kafka's ``transactional.id.expiration.ms``), durably: its next InitProducerId starts it
over at epoch 0, and a zombie naming it gets INVALID_PRODUCER_ID_MAPPING.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from dataclasses import dataclass, field

from txnstream.api import Principal, ProducerEpoch, Transaction

_ID_BITS = 62
MAX_EPOCH = 32767
"""Kafka's epochs are int16: the engine's epoch ``e`` is Kafka's ``e % MAX_EPOCH``."""


def producer_name(producer_id: int, epoch: int, session: str | None = None) -> str:
    """The engine's idempotent producer name of a Kafka producer (and ``session``, the
    epoch's of a transactional one)."""
    name = f"kafka-{producer_id}-{epoch}"
    return name if session is None else f"{name}-{session}"


def kafka_epoch(durable: ProducerEpoch) -> int:
    """The Kafka epoch of the engine's producer epoch (wrapping within int16)."""
    return durable.epoch % MAX_EPOCH


@dataclass(slots=True)
class TxnProducer:
    """A transactional id's producer: what this server keeps beside its durable epoch."""

    transactional_id: str
    producer_id: int
    durable: ProducerEpoch
    """The engine's epoch this state goes with (compared by identity)."""
    timeout_ms: int
    lock: asyncio.Lock
    principal: Principal | None = None
    """Who it belongs to (with SASL): the engine scopes its transactional id to it."""
    txn: Transaction | None = None
    topics: set[str] = field(default_factory=set)
    resumed: bool = False
    """Rebuilt from the engine (after a restart or failover) in its current
    transaction: the partitions it added are not known, any it may write is taken."""

    @property
    def epoch(self) -> int:
        """Its Kafka epoch."""
        return kafka_epoch(self.durable)

    @property
    def session(self) -> str:
        """Its epoch's session: its batches' sequence numbers are this session's."""
        return self.durable.session


def _key(transactional_id: str, principal: Principal | None) -> tuple[str | None, str]:
    return None if principal is None else principal.name, transactional_id


class Producers:
    """The listener's cache of transactional producers (one per listener)."""

    def __init__(self) -> None:
        self._txn: dict[tuple[str | None, str], TxnProducer] = {}  # by (owner, id)
        self._locks: dict[tuple[str | None, str], asyncio.Lock] = {}

    @staticmethod
    def new_id() -> int:
        """A fresh idempotent producer id."""
        return secrets.randbits(_ID_BITS)

    @staticmethod
    def transactional_producer_id(transactional_id: str, principal: Principal | None = None) -> int:
        """A transactional id's (of ``principal``) producer id: the same on every
        InitProducerId."""
        owner, _ = _key(transactional_id, principal)
        key = transactional_id if owner is None else f"{owner}\0{transactional_id}"
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return int.from_bytes(digest) >> (64 - _ID_BITS)

    def lock(self, transactional_id: str, principal: Principal | None = None) -> asyncio.Lock:
        """The lock a transactional id's requests that change its state take (each
        principal has its own transactional ids, as over HTTP)."""
        return self._locks.setdefault(_key(transactional_id, principal), asyncio.Lock())

    def get(self, transactional_id: str, principal: Principal | None = None) -> TxnProducer | None:
        """The cached producer of the transactional id, if any (check it against the
        engine's epoch before use)."""
        return self._txn.get(_key(transactional_id, principal))

    def put(self, producer: TxnProducer) -> None:
        """Cache ``producer``."""
        self._txn[_key(producer.transactional_id, producer.principal)] = producer

    def drop(self, transactional_id: str, principal: Principal | None = None) -> None:
        """Forget the cached producer of the transactional id."""
        self._txn.pop(_key(transactional_id, principal), None)

    def clear(self) -> None:
        """Forget every cached producer (this server stopped being the active: their
        state is the store's, and the next active's)."""
        self._txn.clear()
        self._locks = {k: lock for k, lock in self._locks.items() if lock.locked()}

    def cached(self) -> list[TxnProducer]:
        """Every cached producer."""
        return list(self._txn.values())

    def prune_locks(self) -> None:
        """Drop the locks of ids with no cached producer and no request under way."""
        self._locks = {
            k: lock for k, lock in self._locks.items() if k in self._txn or lock.locked()
        }
