"""The catalog: the ledger layer's rows about topics (topics, producers, aborted index).

Every table that describes a topic's log belongs to this layer: ``topics``, ``ledgers``
and ``entries`` (the latter two written by :class:`~txnstream.ledger.ManagedLedger`),
``producers`` (idempotent-producer state, durable in the same batch as the data it
describes) and ``aborted_txns`` (Kafka's per-ledger aborted-transaction index, written
in the batch of the ABORT marker). Upper layers own their own tables — the coordinator
``txns``/``finish_keys``/``producer_epochs``, the dispatcher ``subscriptions``, snapshots
``snapshots`` and ``snapshot_segments`` — and never write these.

Methods named ``prepare_*`` add statements to a :class:`~txnstream.ledger.WriteBatch` (durable
with whatever else the batch carries); the ``async`` ones read through the store.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from ._batch import WriteBatch
from ._codec import pack, unpack
from ._errors import InvalidArgumentError
from ._position import Position
from ._store import Store

_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def validate_name(name: Any, what: str = "topic") -> str:
    """Check a topic or subscription name; raises :class:`InvalidArgumentError`.

    >>> validate_name("orders")
    'orders'
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InvalidArgumentError(
            f"invalid {what} name {name!r}: 1-200 characters of [A-Za-z0-9._-]"
        )
    if name.startswith("__"):
        raise InvalidArgumentError(f"{what} names starting with '__' are reserved")
    if name in (".", ".."):  # they cannot be reached in a URL path
        raise InvalidArgumentError(f"{what} names '.' and '..' are not allowed")
    return name


@dataclass(frozen=True, slots=True)
class StoreIdentity:
    """A data directory's identity: made once, written into every object it offloads.

    ``adopts_legacy``: the directory offloaded before identities existed, so the objects
    named without one that it recorded are its own. ``minted`` says why the identity was
    made at this open (``"new"``, ``"migrated"``, ``"copied"``), None when it was there."""

    store_id: str
    adopts_legacy: bool
    minted: str | None


@dataclass(frozen=True, slots=True)
class TopicRow:
    """A topic as stored: id, name, creation time, its encoded retention and offload
    policies."""

    topic_id: int
    name: str
    created_ms: int
    retention: bytes | None
    offload: bytes | None = None


@dataclass(frozen=True, slots=True)
class PartitionedRow:
    """A partitioned topic as stored: its name, partition count and creation time (its
    partitions are topics of their own, named by :func:`partition_name`)."""

    name: str
    partitions: int
    created_ms: int


def partition_name(topic: str, index: int) -> str:
    """The name of partition ``index`` of partitioned topic ``topic``.

    >>> partition_name("orders", 2)
    'orders-partition-2'
    """
    return f"{topic}-partition-{index}"


@dataclass(frozen=True, slots=True)
class ProducerRow:
    """An idempotent producer's last stored batch on a topic."""

    producer: str
    last_seq: int
    first_seq: int
    positions: list[Position]
    stored_ms: int | None = None
    """When that batch was stored (ms since the epoch); None in rows written before
    producers expired (the reader takes its own start as their time)."""


class Catalog:
    """Reads and prepares writes of the topic-level rows of one store."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def topics(self) -> list[TopicRow]:
        """Every topic, by id."""
        rows = await self._store.topic_rows()
        return [TopicRow(int(t), str(n), int(c), r, o) for t, n, c, r, o in rows]

    async def partitioned(self) -> list[PartitionedRow]:
        """Every partitioned topic, by name."""
        rows = await self._store.partitioned_rows()
        return [PartitionedRow(str(n), int(p), int(c)) for n, p, c in rows]

    @staticmethod
    def prepare_create_partitioned(
        batch: WriteBatch, name: str, partitions: int, created_ms: int
    ) -> None:
        """Record a partitioned topic (its partitions are created as topics beside it)."""
        batch.create_partitioned(name, partitions, created_ms)

    @staticmethod
    def prepare_delete_partitioned(batch: WriteBatch, name: str) -> None:
        """Forget a partitioned topic (its partitions are deleted as topics beside it)."""
        batch.drop_partitioned(name)

    async def next_topic_id(self) -> int:
        """An id never used by any topic, deleted ones included."""
        return await self._store.next_topic_id()

    @staticmethod
    def prepare_create_topic(batch: WriteBatch, topic_id: int, name: str, created_ms: int) -> None:
        """Insert the topic's row and move the id counter past it."""
        batch.create_topic(topic_id, name, created_ms)

    async def store_identity(self, home: str) -> StoreIdentity:
        """This data directory's identity, made once (durable on return).

        ``home`` names where the directory lives (its inode numbers): a directory found
        elsewhere than it was made (copied, or restored from a backup) gets a new identity
        of its own, so two copies never take each other's objects for theirs.
        """
        values = await self._store.store_meta(("store_id", "store_home", "store_legacy"))
        current = values.get("store_id")
        if current is not None and values.get("store_home") == home:
            # a number in SQLite, text in PostgreSQL
            return StoreIdentity(str(current), bool(int(values.get("store_legacy") or 0)), None)
        if current is None:
            remote = await self._store.remote_ledger_count()
            adopts, minted = bool(remote), ("migrated" if remote else "new")
        else:
            adopts, minted = False, "copied"
        identity = StoreIdentity(uuid.uuid4().hex, adopts, minted)
        batch = WriteBatch()
        for key, value in (
            ("store_id", identity.store_id),
            ("store_home", home),
            ("store_legacy", int(adopts)),
        ):
            batch.put_store_meta(key, value)
        await self._store.write(batch)
        return identity

    @staticmethod
    def prepare_retention(batch: WriteBatch, topic_id: int, encoded: bytes | None) -> None:
        """Store the topic's encoded retention policy."""
        batch.put_retention(topic_id, encoded)

    @staticmethod
    def prepare_offload_policy(batch: WriteBatch, topic_id: int, encoded: bytes | None) -> None:
        """Store the topic's encoded offload policy."""
        batch.put_offload_policy(topic_id, encoded)

    @staticmethod
    def prepare_delete_topic(batch: WriteBatch, topic_id: int) -> None:
        """Delete every row this layer holds for the topic (its log included)."""
        batch.drop_topic(topic_id)

    async def producers(self, topic_id: int) -> list[ProducerRow]:
        """The idempotent producers of a topic with their last stored batch."""
        rows = await self._store.producer_rows(topic_id)
        out = []
        for producer, last_seq, packed in rows:
            first_seq, positions, *rest = unpack(packed)
            out.append(
                ProducerRow(
                    producer,
                    last_seq,
                    first_seq,
                    [Position.parse(p) for p in positions],
                    rest[0] if rest else None,
                )
            )
        return out

    @staticmethod
    def prepare_producer(
        batch: WriteBatch,
        topic_id: int,
        producer: str,
        first_seq: int,
        positions: list[Position],
        stored_ms: int,
    ) -> None:
        """Record a producer's batch (first sequence, positions and when it was stored:
        in the packed blob, so rows of either form read back)."""
        last_seq = first_seq + len(positions) - 1
        packed = pack([first_seq, [str(p) for p in positions], stored_ms])
        batch.put_producer(topic_id, producer, last_seq, packed)

    @staticmethod
    def prepare_drop_producer(batch: WriteBatch, topic_id: int, producer: str) -> None:
        """Forget an idempotent producer (its state expired)."""
        batch.drop_producer(topic_id, producer)

    @staticmethod
    def prepare_aborted(
        batch: WriteBatch,
        topic_id: int,
        txn_seq: int,
        first: Position,
        last: Position,
        marker: Position,
        stable: Position | None,
    ) -> None:
        """Add an aborted transaction's row to the per-ledger aborted index."""
        batch.put_aborted(
            (
                topic_id,
                txn_seq,
                first.ledger_id,
                first.entry_id,
                last.ledger_id,
                last.entry_id,
                marker.ledger_id,
                marker.entry_id,
                None if stable is None else stable.ledger_id,
                None if stable is None else stable.entry_id,
            ),
        )
