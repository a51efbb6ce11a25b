"""Kafka producer ids, epochs and transactional ids, over the engine's transactions.

An idempotent producer gets a random 62-bit producer id (no two producers share one in
practice, across restarts too, without a durable counter) and stores its batches under
the engine's idempotent producer name ``kafka-<id>-<epoch>``: the engine keeps the
producer's last sequence and positions durable with the data, answers a retried batch
with its original positions, and the listener refuses a gap.

A transactional id keeps one producer id (derived from the id) and a new epoch at each
InitProducerId; its transaction is one engine transaction begun with the same
``transactional_id`` at the first AddPartitionsToTxn, so a new epoch's begin fences the
old holder as the engine's fencing does, and a request that names an older epoch is
refused. Epochs live in memory, so a server that has not seen a transactional id since it
started (or became the active, after a failover) does not know its last epoch: the id's
first InitProducerId there starts at a random epoch, so that a zombie initialised before
(by another active, or before a restart) is refused (its epoch is not the current one,
but for a 1 in 32767 chance), and requests naming it get INVALID_PRODUCER_EPOCH. The
sequence numbers of a transactional producer's batches are kept under a name of its own
session (``kafka-<id>-<epoch>-<session>``, new at every InitProducerId): a producer
initialised again must never find an earlier session's sequence numbers, which would
make its first batches look like duplicates of batches already stored. A transactional id
no request used for ``EngineConfig.transactional_id_expiry`` seconds, with no open
transaction, is forgotten (Kafka's ``transactional.id.expiration.ms``): its next
InitProducerId starts it over at epoch 0.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from dataclasses import dataclass, field

from txnstream.api import Principal, Transaction

_ID_BITS = 62
_MAX_EPOCH = 32767


def producer_name(producer_id: int, epoch: int, session: str | None = None) -> str:
    """The engine's idempotent producer name of a Kafka producer (and ``session``, the
    InitProducerId of a transactional one)."""
    name = f"kafka-{producer_id}-{epoch}"
    return name if session is None else f"{name}-{session}"


@dataclass(slots=True)
class TxnProducer:
    """A transactional id's producer: id, current epoch and its open transaction."""

    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    principal: Principal | None = None
    """Who it belongs to (with SASL): the engine scopes its transactional id to it."""
    txn: Transaction | None = None
    topics: set[str] = field(default_factory=set)
    session: str = ""
    """Made at each InitProducerId: its batches' sequence numbers are this session's."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    used: float = field(default_factory=time.monotonic)
    """When a request last named it (``time.monotonic()``): it expires idle."""


class Producers:
    """The listener's producer registry (one per listener)."""

    def __init__(self) -> None:
        self._txn: dict[tuple[str | None, str], TxnProducer] = {}  # by (owner, id)
        self._expired: set[tuple[str | None, str]] = set()  # forgotten idle, this term

    @staticmethod
    def new_id() -> int:
        """A fresh idempotent producer id."""
        return secrets.randbits(_ID_BITS)

    @staticmethod
    def transactional_producer_id(transactional_id: str, owner: str | None = None) -> int:
        """A transactional id's producer id: the same on every InitProducerId."""
        key = transactional_id if owner is None else f"{owner}\0{transactional_id}"
        digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
        return int.from_bytes(digest) >> (64 - _ID_BITS)

    def entry(self, transactional_id: str, principal: Principal | None = None) -> TxnProducer:
        """The transactional id's producer (no session until its first InitProducerId);
        each principal has its own transactional ids, as over HTTP."""
        owner = None if principal is None else principal.name
        producer = self._txn.get((owner, transactional_id))
        if producer is None:
            key = owner, transactional_id
            # forgotten idle this term: it starts over at epoch 0, as in Kafka; never seen
            # this term: at a random epoch (its last one is not known, see above)
            before = -1 if key in self._expired else secrets.randbelow(_MAX_EPOCH) - 1
            self._expired.discard(key)
            producer = self._txn[key] = TxnProducer(
                transactional_id,
                self.transactional_producer_id(transactional_id, owner),
                before,
                0,
                principal,
            )
        producer.used = time.monotonic()
        return producer

    def get(self, transactional_id: str, principal: Principal | None = None) -> TxnProducer | None:
        """The transactional id's producer, if one initialised it since start."""
        owner = None if principal is None else principal.name
        producer = self._txn.get((owner, transactional_id))
        if producer is None or not producer.session:  # (not initialised yet)
            return None
        producer.used = time.monotonic()
        return producer

    def expired(self, transactional_id: str, principal: Principal | None = None) -> bool:
        """Whether the transactional id was forgotten idle (:meth:`expire`) since this
        server became the active, rather than never initialised here."""
        owner = None if principal is None else principal.name
        return (owner, transactional_id) in self._expired

    def clear(self) -> None:
        """Forget every transactional id (this server stopped being the active: their
        engine transactions are the store's, ended or fenced by the next active)."""
        self._txn.clear()
        self._expired.clear()

    def expire(self, idle: float) -> int:
        """Forget the transactional ids no request named for ``idle`` seconds that have
        no open transaction and no request under way; returns how many."""
        before = time.monotonic() - idle
        expired = [
            key
            for key, p in self._txn.items()
            if p.used < before and p.txn is None and not p.lock.locked()
        ]
        for key in expired:
            del self._txn[key]
        self._expired.update(expired)
        return len(expired)


def new_session() -> str:
    """A new InitProducerId session's name (unique in practice: 64 random bits)."""
    return secrets.token_hex(8)


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (wrapping within int16)."""
    return (epoch + 1) % _MAX_EPOCH
