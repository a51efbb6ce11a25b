"""Partitioned topics, as in Pulsar: a name over N ordinary topics ``{name}-partition-{i}``.

Each partition is a topic with its own ledger, transaction buffer, subscriptions and Kafka
offsets; the parent is only a name and a partition count (durable in the catalog). What
this module adds over the single-topic engine:

- routing: a message produced to the parent goes to partition
  ``toPositive(murmur2(key)) % N`` (Kafka's default partitioner, so a key lands in the
  same partition whichever client produced it), round-robin without a key;
- a subscription on the parent is the same subscription on every partition: ``receive``
  merges them, and the positions it hands out name their partition
  (:class:`PartitionPosition`, ``"L:E:P"`` as Pulsar writes a partitioned message id), so
  ``ack``/``nack``/``release`` route each to its partition. Positions of plain topics
  stay ``"L:E"``.

The fan-out lives here, over the per-partition subscriptions, not in the dispatcher.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Self, cast

import msgspec
from kafka.partitioner.default import murmur2

from txnstream.dispatcher import Isolation, Message
from txnstream.ledger import (
    InvalidArgumentError,
    Position,
    TxnId,
    encode_value,
    partition_name,
)

from ._consume import Consuming, check_uncommitted
from ._core import Core, PositionsArg, PrincipalArg
from ._handles import SubscriptionHandle

MAX_PARTITIONS = 1024
"""The most partitions a topic may have."""

_PARTITION_POSITION_RE = re.compile(r"^(\d{1,19}):(\d{1,19}):(\d{1,9})$")


def partition_for_key(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` (its UTF-8 bytes):
    ``toPositive(murmur2(key)) % partitions``, as the Java client and librdkafka's
    ``murmur2_random`` do.

    >>> partition_for_key("foobar", 1000)
    166
    """
    return (int(murmur2(key.encode())) & 0x7FFFFFFF) % partitions


class PartitionPosition(Position):
    """A position in one partition of a partitioned topic: ``"L:E:P"`` (ledger, entry,
    partition index), what a subscription on the parent hands out and takes back.

    >>> str(PartitionPosition(3, 7, 2))
    '3:7:2'
    >>> PartitionPosition.parse("3:7:2").partition
    2
    """

    __slots__ = ()

    def __new__(cls, ledger_id: int, entry_id: int, partition: int) -> Self:
        return tuple.__new__(cls, (ledger_id, entry_id, partition))

    @property
    def partition(self) -> int:
        """The partition's index."""
        index: int = tuple.__getitem__(self, 2)
        return index

    @property
    def plain(self) -> Position:
        """The position within its partition (``"L:E"``)."""
        return Position(self.ledger_id, self.entry_id)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.partition}"

    def __repr__(self) -> str:
        return f"PartitionPosition({self.ledger_id}, {self.entry_id}, {self.partition})"

    @classmethod
    def parse(cls, text: str) -> PartitionPosition:
        """Parse ``"L:E:P"``; raises :class:`InvalidArgumentError` on anything else."""
        match = _PARTITION_POSITION_RE.match(text) if isinstance(text, str) else None
        if match is None:
            raise InvalidArgumentError(
                f"invalid position {text!r} on a partitioned topic: expected"
                " 'ledger:entry:partition'"
            )
        return cls(int(match.group(1)), int(match.group(2)), int(match.group(3)))


class PartitionMessage(Message, frozen=True):
    """A message received through a subscription on a partitioned topic: its
    :attr:`position` names its partition (``"L:E:P"``); :attr:`topic` is the partition's
    topic."""

    _partition: int
    _topic: str

    @classmethod
    def of(cls, message: Message, partition: int, topic: str) -> PartitionMessage:
        """``message`` (from partition ``partition``, topic ``topic``) with its partition."""
        made: PartitionMessage = cast(Any, cls)(
            *msgspec.structs.astuple(message), partition, topic
        )  # (its fields, then these two: mypy cannot count a starred tuple)
        return made

    @property
    def position(self) -> PartitionPosition:
        """Where the message lies: ledger, entry and partition index."""
        plain = super().position
        return PartitionPosition(plain.ledger_id, plain.entry_id, self._partition)

    @property
    def partition(self) -> int:
        """The index of the partition it came from."""
        return self._partition

    @property
    def topic(self) -> str:
        """The partition's topic name, ``{topic}-partition-{i}``."""
        return self._topic


class PartitionedConsuming:
    """The engine's consuming side (a part of :class:`~txnstream.api.Engine`): each call
    on a plain topic is :class:`~txnstream.api._consume.Consuming`'s; on a partitioned
    topic's parent it fans out to its partitions' subscriptions."""

    def __init__(self, core: Core, plain: Consuming) -> None:
        self._core = core
        self._plain = plain
        """Consuming one (plain or partition) topic."""
        self._consumer_ids = itertools.count(1)

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
            self._plain.subscription(part, name).attach(consumer, expires=False)
        return SubscriptionHandle(self, topic, name, consumer)

    def partitions_of(self, topic: str) -> list[str] | None:
        """The partition topics of partitioned ``topic``, by index; None for any other."""
        runtime = self._core.runtime  # (None once closed: a handle may detach after close)
        row = None if runtime is None else runtime.partitioned.get(topic)
        if row is None:
            return None
        return [partition_name(topic, i) for i in range(row.partitions)]

    def _by_partition(
        self, topic: str, positions: PositionsArg
    ) -> dict[int, list[Position]] | None:
        """``positions`` on parent ``topic`` grouped by partition (None: not a parent)."""
        row = self._core.rt.partitioned.get(topic)
        if row is None:
            return None
        items: Sequence[Position | str]
        if isinstance(positions, Position | str):
            items = [positions]
        elif isinstance(positions, Sequence):
            items = cast("Sequence[Position | str]", positions)
        else:
            raise InvalidArgumentError("positions must be a list")
        grouped: dict[int, list[Position]] = {}
        for item in items:
            position = (
                item if isinstance(item, PartitionPosition) else PartitionPosition.parse(str(item))
            )
            if not 0 <= position.partition < row.partitions:
                raise InvalidArgumentError(
                    f"position {position}: topic {topic!r} has {row.partitions} partitions"
                )
            grouped.setdefault(position.partition, []).append(position.plain)
        return grouped

    async def create_subscription(
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
        principal: PrincipalArg = None,
    ) -> bool:
        """Create a subscription (on a partitioned topic: on every partition, each with
        the consumer policy); False if it exists with the same type and isolation (see
        :meth:`Consuming.create_subscription`)."""
        policy: dict[str, Any] = {
            "max_redeliveries": max_redeliveries,
            "dead_letter_topic": dead_letter_topic,
            "nack_delay_ms": nack_delay_ms,
        }
        parts = self.partitions_of(topic)
        if parts is None:
            return await self._plain.create_subscription(
                topic,
                name,
                type=type,
                initial_position=initial_position,
                isolation=isolation,
                principal=principal,
                **policy,
            )
        if isolation == "read_uncommitted":  # the rights are the parent's (its name)
            check_uncommitted(principal, topic, name)
        created = False
        for part in parts:
            created |= await self._plain.create_subscription(
                part,
                name,
                type=type,
                initial_position=initial_position,
                isolation=isolation,
                **policy,  # the rights were the parent's (its name), checked above
            )
        return created

    def detach(self, topic: str, subscription: str, consumer: str) -> None:
        """Detach ``consumer`` (from every partition of a partitioned topic)."""
        for part in self.partitions_of(topic) or [topic]:
            self._plain.detach(part, subscription, consumer)

    async def receive(
        self,
        topic: str,
        subscription: str,
        *,
        consumer: str = "default",
        max: int = 100,
        timeout: float = 0.0,
        expires: bool = True,
        max_bytes: int | None = None,
        principal: PrincipalArg = None,
    ) -> list[Message]:
        """Deliver up to ``max`` messages (see :meth:`Consuming.receive`); on a
        partitioned topic, merged from its partitions, each a :class:`PartitionMessage`."""
        parts = self.partitions_of(topic)
        if parts is None:
            return await self._plain.receive(
                topic,
                subscription,
                consumer=consumer,
                max=max,
                timeout=timeout,
                expires=expires,
                max_bytes=max_bytes,
                principal=principal,
            )
        if not isinstance(timeout, int | float) or timeout < 0:
            raise InvalidArgumentError("timeout must be a non-negative number of seconds")
        if principal is not None:  # the rights are the parent's (its name)
            sub = self._plain.subscription(parts[0], subscription)
            if sub.isolation is not Isolation.READ_COMMITTED:
                check_uncommitted(principal, topic, subscription)
        deadline = time.monotonic() + timeout
        first = self._core.rt.receive_from.get(topic, 0)
        while True:
            # Take every partition's change event before looking: a message arriving
            # after a partition was looked at sets its event, so the wait below sees it.
            events = [self._core.topic(part).change_event() for part in parts]
            out: list[Message] = []
            budget = max_bytes
            # start at a rotating partition: a busy one cannot starve the others
            for step in range(len(parts)):
                index = (first + step) % len(parts)
                got = await self._plain.receive(
                    parts[index],
                    subscription,
                    consumer=consumer,
                    max=max - len(out),
                    timeout=0.0,
                    expires=expires,
                    max_bytes=budget,
                )
                out.extend(PartitionMessage.of(m, index, parts[index]) for m in got)
                if budget is not None and got:
                    # what the next partition may still hand out: the limit less these
                    # values' packed bytes (each partition gives at least one message
                    # when it has any, so the limit can be passed by its last message)
                    budget -= sum(len(encode_value(m.value)) for m in got)
                if len(out) >= max or (budget is not None and budget <= 0):
                    break
            self._core.rt.receive_from[topic] = (first + 1) % len(parts)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            waits = [asyncio.ensure_future(event.wait()) for event in events]
            try:
                await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waits:
                    task.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
            self._core.check_open()

    async def ack(
        self,
        topic: str,
        subscription: str,
        positions: PositionsArg,
        *,
        cumulative: bool = False,
        txn: TxnId | str | None = None,
        principal: PrincipalArg = None,
    ) -> int:
        """Acknowledge positions (see :meth:`Consuming.ack`); on a partitioned topic,
        ``"L:E:P"`` positions, each acknowledged on its partition."""
        grouped = self._by_partition(topic, positions)
        if grouped is None:
            return await self._plain.ack(
                topic, subscription, positions, cumulative=cumulative, txn=txn, principal=principal
            )
        self._plain.subscription(partition_name(topic, 0), subscription)  # 404 before any ack
        acked = 0
        for index, plain in grouped.items():
            acked += await self._plain.ack(
                partition_name(topic, index),
                subscription,
                plain,
                cumulative=cumulative,
                txn=txn,
                principal=principal,
            )
        return acked

    async def subscription_policy(self, topic: str, subscription: str) -> dict[str, Any]:
        """The consumer policy (see :meth:`Consuming.subscription_policy`); a partitioned
        topic's subscriptions share theirs, so its first partition's says it."""
        parts = self.partitions_of(topic)
        if parts is None:
            return await self._plain.subscription_policy(topic, subscription)
        return await self._plain.subscription_policy(parts[0], subscription)

    async def nack(
        self,
        topic: str,
        subscription: str,
        positions: PositionsArg,
        *,
        delay_ms: int | None = None,
    ) -> None:
        """Redeliver positions (on a partitioned topic, ``"L:E:P"`` ones), after
        ``delay_ms`` (see :meth:`Consuming.nack`)."""
        grouped = self._by_partition(topic, positions)
        if grouped is None:
            return await self._plain.nack(topic, subscription, positions, delay_ms=delay_ms)
        for index, plain in grouped.items():
            await self._plain.nack(
                partition_name(topic, index), subscription, plain, delay_ms=delay_ms
            )

    async def release(self, topic: str, subscription: str, positions: PositionsArg) -> None:
        """Take back delivered positions (on a partitioned topic, ``"L:E:P"`` ones)."""
        grouped = self._by_partition(topic, positions)
        if grouped is None:
            return await self._plain.release(topic, subscription, positions)
        for index, plain in grouped.items():
            await self._plain.release(partition_name(topic, index), subscription, plain)

    async def seek(
        self, topic: str, subscription: str, position: Position | str | datetime
    ) -> Position | str:
        """Reset the cursor (see :meth:`Consuming.seek`). On a partitioned topic,
        ``"earliest"``, ``"latest"`` and a datetime move every partition's cursor; an
        ``"L:E:P"`` position moves that partition's only."""
        parts = self.partitions_of(topic)
        if parts is None:
            return await self._plain.seek(topic, subscription, position)
        if isinstance(position, datetime) or position in ("earliest", "latest"):
            for part in parts:
                await self._plain.seek(part, subscription, position)
            return position if isinstance(position, str) else position.isoformat()
        grouped = self._by_partition(topic, [position])
        assert grouped is not None
        ((index, (plain,)),) = grouped.items()
        found = await self._plain.seek(partition_name(topic, index), subscription, plain)
        if isinstance(found, Position):
            return PartitionPosition(found.ledger_id, found.entry_id, index)
        return found

    async def delete_subscription(self, topic: str, subscription: str) -> None:
        """Delete a subscription (on a partitioned topic: on every partition)."""
        parts = self.partitions_of(topic)
        if parts is None:
            return await self._plain.delete_subscription(topic, subscription)
        self._plain.subscription(parts[0], subscription)  # 404 when there is none
        for part in parts:
            if self._core.rt.subscriptions.find(part, subscription) is not None:
                await self._plain.delete_subscription(part, subscription)
