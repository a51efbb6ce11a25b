"""Consuming: subscriptions, delivery, acknowledgements, seek, and the range fetch."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from txnstream.dispatcher import (
    ConsumerPolicy,
    FetchResult,
    Isolation,
    Message,
    Subscription,
    check_delay_ms,
    fetch,
    position_at,
)
from txnstream.ledger import (
    ClosedError,
    InvalidArgumentError,
    Position,
    TxnId,
    WriteBatch,
    validate_name,
)
from txnstream.txn_buffer import PendingAck

from ._core import (
    Core,
    EngineState,
    PositionsArg,
    PrincipalArg,
    as_principal,
    parse_positions,
)

_MAX_RECEIVE = 10_000


class Consuming:
    """Consuming one topic: subscriptions, delivery, acknowledgements, seek and the
    range fetch (:class:`~txnstream.api._partitions.PartitionedConsuming` fans the
    engine's calls out over a partitioned topic's partitions through it)."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._config = core.config
        self._metrics = core.metrics

    def subscription(self, topic: str, name: str) -> Subscription:
        """Subscription ``name`` of the open engine's topic ``topic``."""
        self._core.topic(topic)
        return self._core.rt.subscriptions.get(topic, name)

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
        """Create a subscription; False if it exists with the same type and isolation.

        Consumer policy (Pulsar's ``deadLetterPolicy`` and negative ack delay): a message
        delivered ``max_redeliveries + 1`` times without an ack (nacks and expired
        deliveries count) moves to ``dead_letter_topic`` (default
        ``{topic}-{name}-DLQ``, created when needed) atomically with its ack; a nacked
        message waits ``nack_delay_ms`` before it is delivered again (shared and
        key_shared; exclusive and failover redeliver at once, in order). Given for an
        existing subscription, the policy fields replace its policy.

        Raises :class:`SubscriptionConflictError` if it exists with other settings; with a
        ``principal``, :class:`ForbiddenError` for a read_uncommitted one it may not read.
        """
        validate_name(name, "subscription")
        if isolation == "read_uncommitted":
            check_uncommitted(principal, topic, name)
        policy = None
        if max_redeliveries is not None or dead_letter_topic is not None or nack_delay_ms:
            policy = ConsumerPolicy(max_redeliveries, dead_letter_topic, nack_delay_ms or 0)
            target = policy.dead_letter_topic_of(topic, name)
            validate_name(target)  # the default name may be too long
            if target == topic:
                raise InvalidArgumentError("dead_letter_topic must not be the topic itself")
            if policy.max_redeliveries is not None and (p := as_principal(principal)):
                p.check("produce", target)  # the engine writes there on the caller's behalf
        elif nack_delay_ms is not None:
            policy = ConsumerPolicy()  # nack_delay_ms=0 given: back to the defaults
        async with self._core.admin_lock:
            return await self._core.rt.subscriptions.create(
                self._core.topic(topic),
                name,
                type=type,
                initial_position=initial_position,
                isolation=isolation,
                policy=policy,
            )

    async def subscription_policy(self, topic: str, subscription: str) -> dict[str, Any]:
        """The subscription's consumer policy: ``max_redeliveries``, ``dead_letter_topic``
        (the one in force, the default included) and ``nack_delay_ms``."""
        sub = self.subscription(topic, subscription)
        policy = sub.policy.as_dict()
        if sub.policy.max_redeliveries is not None:
            policy["dead_letter_topic"] = sub.policy.dead_letter_topic_of(topic, subscription)
        return policy

    def detach(self, topic: str, subscription: str, consumer: str) -> None:
        """Detach ``consumer``; its unacknowledged messages go to others (nothing to do
        once the engine is closed)."""
        runtime = self._core.runtime
        if runtime is not None and (sub := runtime.subscriptions.find(topic, subscription)):
            sub.detach(consumer)

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
        """Deliver up to ``max`` messages to ``consumer``, waiting up to ``timeout`` s.

        Attaches the consumer (an ``expires`` consumer is detached after
        ``consumer_expiry`` seconds without polling). With ``max_bytes``, the messages
        hold at most that many stored bytes, but at least one comes back. With a
        ``principal``, a read_uncommitted subscription needs its ``read_uncommitted``.
        """
        _check_max_bytes(max_bytes)
        if isinstance(max, bool) or not isinstance(max, int) or not 1 <= max <= _MAX_RECEIVE:
            raise InvalidArgumentError(f"max must be an integer in 1..{_MAX_RECEIVE}")
        if not isinstance(timeout, int | float) or timeout < 0:
            raise InvalidArgumentError("timeout must be a non-negative number of seconds")
        validate_name(consumer, "consumer")  # it is shown in stats, logs and the console
        max_wait = timeout
        sub = self.subscription(topic, subscription)
        if principal is not None and sub.isolation is not Isolation.READ_COMMITTED:
            check_uncommitted(principal, topic, subscription)
        sub.attach(consumer, expires=expires, expiry=self._config.consumer_expiry)
        started = time.perf_counter()
        while True:
            try:
                messages = await sub.receive(consumer, max, timeout, max_bytes)
                break
            except ClosedError:
                # The engine began recovering in place while this waited: say so (503
                # recovering), or, if it is open again already, wait on for the rest of
                # the time on the rebuilt subscription — never an empty answer at once.
                self._core.check_open()
                timeout = max_wait - (time.perf_counter() - started)
                if timeout <= 0:
                    messages = []
                    break
                sub = self.subscription(topic, subscription)
                sub.attach(consumer, expires=expires, expiry=self._config.consumer_expiry)
        if self._core.state is not EngineState.OPEN:
            self._core.check_open()
        if messages:
            self._metrics.receive_wait.observe(time.perf_counter() - started)
            self._metrics.messages_out.labels(topic).inc(len(messages))
        return messages

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
        """Acknowledge positions (durable on return); with ``txn``, on its commit only.

        With a ``principal``, ``txn`` must be its own (:class:`ForbiddenError`).
        """
        sub = self.subscription(topic, subscription)
        if txn is not None and principal is not None:
            await self._core.check_owner(txn, principal)
            sub = self.subscription(topic, subscription)  # it may have gone meanwhile
        parsed = parse_positions(positions)
        if not parsed:
            return 0
        batch = WriteBatch()
        if txn is not None:
            record = self._core.check_txn(txn)
            sub.check_ack(parsed, cumulative, record.txn_id)
            ack = PendingAck(topic, subscription, tuple(str(p) for p in parsed), cumulative)
            self._core.rt.coordinator.register_ack(batch, record, ack)
            sub.hold_for_txn(parsed, cumulative, record.txn_id)
        else:
            sub.check_ack(parsed, cumulative, None)
            sub.apply_ack(parsed, cumulative)
            sub.prepare_cursor_write(batch)
            sub.prefetch_next()  # while this waits for the fsync, the next range is read
        await self._core.rt.store.write(batch)
        return len(parsed)

    async def nack(
        self,
        topic: str,
        subscription: str,
        positions: PositionsArg,
        *,
        delay_ms: int | None = None,
    ) -> None:
        """Redeliver delivered, unacknowledged positions with ``redelivery_count + 1``,
        after ``delay_ms`` (default: the subscription's ``nack_delay_ms``; shared and
        key_shared subscriptions only). Past the subscription's ``max_redeliveries``,
        they move to its dead-letter topic instead."""
        if delay_ms is not None:
            delay_ms = check_delay_ms(delay_ms)
        sub = self.subscription(topic, subscription)
        sub.nack(parse_positions(positions), delay_ms)
        batch = WriteBatch()
        sub.prepare_redelivery_write(batch)  # a limit or delay must outlive a restart
        if batch:
            await self._core.rt.store.write(batch)

    async def release(self, topic: str, subscription: str, positions: PositionsArg) -> None:
        """Take back delivered positions their receiver never read (e.g. its connection
        closed as they were sent): delivered again first, not counted as redeliveries."""
        self.subscription(topic, subscription).release(parse_positions(positions))

    async def seek(
        self, topic: str, subscription: str, position: Position | str | datetime
    ) -> Position | str:
        """Reset the cursor: before ``position`` acknowledged, from it on not.

        ``position`` is a :class:`Position` (or ``"L:E"``), ``"earliest"``, ``"latest"``,
        or a time zone aware :class:`~datetime.datetime`: the first entry published at or
        after it (``"latest"`` if none was). Returns where the cursor went.
        """
        sub = self.subscription(topic, subscription)
        target: Position | str
        if isinstance(position, datetime):
            target = await position_at(self._core.topic(topic), position) or "latest"
        elif position in ("earliest", "latest"):
            target = str(position)
        else:
            target = Position.coerce(position)
        sub.seek(target)
        batch = WriteBatch()
        sub.prepare_cursor_write(batch)
        await self._core.rt.store.write(batch)
        return target

    async def delete_subscription(self, topic: str, subscription: str) -> None:
        """Delete a subscription and its cursor."""
        async with self._core.admin_lock:
            sub = self.subscription(topic, subscription)
            rt = self._core.rt
            batch = WriteBatch()
            rt.subscriptions.prepare_delete(batch, sub)
            rt.coordinator.forget(batch, topic, subscription)
            await rt.store.write(batch)
            rt.subscriptions.remove(sub)

    async def fetch(
        self,
        topic: str,
        start: Position | str | datetime | None = None,
        *,
        max: int = 1000,
        isolation: str = "read_committed",
        max_bytes: int | None = None,
        principal: PrincipalArg = None,
    ) -> FetchResult:
        """Raw entries from ``start`` (inclusive) up to the read limit, with the aborted list.

        read_committed returns entries at or below the stable position; ``aborted``
        names exactly the aborted transactions with data entries in the result. With
        ``max_bytes``, the entries hold at most that many stored bytes (at least one).
        With a ``principal``, read_uncommitted needs its ``read_uncommitted``. A time zone
        aware :class:`~datetime.datetime` ``start`` starts at the first entry published at
        or after it (none: an empty result whose ``next`` is the end).
        """
        _check_max_bytes(max_bytes)
        if isolation == "read_uncommitted":
            check_uncommitted(principal, topic)
        owner = self._core.topic(topic)
        if isinstance(start, datetime):
            found = await position_at(owner, start)
            last = owner.buffer.last_confirmed
            if found is None and last is not None:
                found = Position(last.ledger_id, last.entry_id + 1)  # past the end
            start = found
        return await fetch(owner, start, max=max, isolation=isolation, max_bytes=max_bytes)


def check_uncommitted(principal: PrincipalArg, topic: str, subscription: str | None = None) -> None:
    """Reading open transactions' data needs ``read_uncommitted`` (no principal: anyone)."""
    p = as_principal(principal)
    if p is not None:
        p.check("read_uncommitted", topic, subscription)


def _check_max_bytes(max_bytes: int | None) -> None:
    if max_bytes is not None and (
        isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1
    ):
        raise InvalidArgumentError("max_bytes must be a positive integer")
