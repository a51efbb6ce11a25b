"""The subscription registry: every subscription of every topic, and its stored rows.

Owns the stored subscriptions (create, load, delete; cursors are written by each
:class:`Subscription`), detaches idle consumers, and is the coordinator's ack
participant: when a transaction ends, :meth:`SubscriptionRegistry.prepare_txn_end`
applies (commit) or releases (abort) its transactional acks in the same batch as the
decision, so the acks and the decision become durable together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from txnstream.ledger import (
    InvalidArgumentError,
    Position,
    Store,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    WriteBatch,
    now_ms,
    validate_name,
)
from txnstream.txn_buffer import Topic, TxnRecord

from ._acks import read_limit
from ._cursor import Cursor
from ._message import Isolation, SubscriptionType, parse_enum
from ._policy import ConsumerPolicy
from ._subscription import Subscription


class SubscriptionRegistry:
    """Subscriptions keyed by ``(topic name, subscription name)``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._subscriptions: dict[tuple[str, str], Subscription] = {}
        self.on_dead_letter: Callable[[], None] | None = None
        """Called when a subscription has messages to move to its dead-letter topic."""
        # per topic: the delivery times of messages sent with one, until they pass
        self._deliver_at: dict[str, dict[Position, int]] = {}

    def _add(self, subscription: Subscription) -> None:
        subscription.on_dead_letter = self.on_dead_letter
        subscription.deliver_at = self._deliver_at.setdefault(subscription.topic.name, {})
        self._subscriptions[(subscription.topic.name, subscription.name)] = subscription

    def delay_delivery(
        self, batch: WriteBatch, topic: Topic, timed: Iterable[tuple[Position, int]]
    ) -> None:
        """Record the delivery times of messages being appended to ``topic`` (in
        ``batch``, before their positions become readable)."""
        times = self._deliver_at.setdefault(topic.name, {})
        for position, at in timed:
            times[position] = at
            batch.put_delivery_time(topic.topic_id, position.ledger_id, position.entry_id, at)

    def prune_delivery_times(self, batch: WriteBatch, now: int) -> None:
        """Forget the delivery times that have passed (in memory and in ``batch``)."""
        pruned = False
        for times in self._deliver_at.values():
            passed = [p for p, at in times.items() if at <= now]
            for position in passed:
                del times[position]
            pruned = pruned or bool(passed)
        if pruned:
            batch.prune_delivery_times(now)

    @property
    def has_delivery_times(self) -> bool:
        """Whether any message waits for its delivery time."""
        return any(self._deliver_at.values())

    async def load(self, topics_by_id: Mapping[int, Topic]) -> None:
        """Load every stored subscription of the given topics (recovery), with their
        consumer policies and stored redelivery state."""
        rows = await self._store.subscription_rows()
        by_id: dict[tuple[int, str], Subscription] = {}
        for topic_id, name, type_, isolation, cursor, created_ms in rows:
            topic = topics_by_id.get(topic_id)
            if topic is not None:
                subscription = Subscription(
                    topic,
                    name,
                    SubscriptionType(type_),
                    Isolation(isolation),
                    Cursor.decode(cursor),
                    created_ms,
                )
                self._add(subscription)
                by_id[(topic_id, name)] = subscription
        for topic_id, name, policy in await self._store.subscription_policy_rows():
            if (found := by_id.get((topic_id, name))) is not None:
                found.policy = ConsumerPolicy.decode(policy)
        for (
            topic_id,
            name,
            ledger_id,
            entry_id,
            count,
            not_before,
        ) in await self._store.redelivery_rows():
            if (found := by_id.get((topic_id, name))) is not None:
                found.load_redelivery(Position(ledger_id, entry_id), count, not_before)
        names = {topic_id: topic.name for topic_id, topic in topics_by_id.items()}
        for topic_id, ledger_id, entry_id, at in await self._store.delivery_time_rows(now_ms()):
            if topic_id in names:
                times = self._deliver_at.setdefault(names[topic_id], {})
                times[Position(ledger_id, entry_id)] = at

    def dead_lettering(self) -> list[Subscription]:
        """The subscriptions with messages waiting for their dead-letter move."""
        return [s for s in self._subscriptions.values() if s.dead_letters]

    def __iter__(self) -> Iterator[Subscription]:
        return iter(list(self._subscriptions.values()))

    def of_topic(self, topic: str) -> list[Subscription]:
        """The subscriptions of ``topic``, in creation order."""
        return [sub for (name, _), sub in self._subscriptions.items() if name == topic]

    def find(self, topic: str, name: str) -> Subscription | None:
        """The subscription, or None."""
        return self._subscriptions.get((topic, name))

    def get(self, topic: str, name: str) -> Subscription:
        """The subscription; :class:`SubscriptionNotFoundError` (or a name error) if none."""
        subscription = self._subscriptions.get((topic, name))
        if subscription is None:
            validate_name(name, "subscription")
            raise SubscriptionNotFoundError(f"subscription {name!r} not found on topic {topic!r}")
        return subscription

    async def create(
        self,
        topic: Topic,
        name: str,
        *,
        type: str,
        initial_position: str,
        isolation: str,
        policy: ConsumerPolicy | None = None,
    ) -> bool:
        """Create a subscription (durable on return); False if it exists alike.

        Raises :class:`SubscriptionConflictError` if it exists with another type or
        isolation. A ``policy`` given for an existing subscription replaces its policy
        (as Pulsar's policies change on a live subscription). The caller serialises
        administrative changes.
        """
        validate_name(name, "subscription")
        sub_type = parse_enum(SubscriptionType, type, "subscription type")
        sub_isolation = parse_enum(Isolation, isolation, "isolation")
        if initial_position not in ("earliest", "latest"):
            raise InvalidArgumentError("initial_position must be 'earliest' or 'latest'")
        existing = self._subscriptions.get((topic.name, name))
        if existing is not None:
            if existing.type is not sub_type or existing.isolation is not sub_isolation:
                raise SubscriptionConflictError(
                    f"subscription {name!r} exists as {existing.type}/{existing.isolation}"
                )
            if policy is not None and policy != existing.policy:
                batch = WriteBatch()
                batch.put_subscription_policy(topic.topic_id, name, policy.encode())
                await self._store.write(batch)
                existing.policy = policy
            return False
        cursor = Cursor(read_limit(topic, sub_isolation) if initial_position == "latest" else None)
        created = now_ms()
        batch = WriteBatch()
        batch.create_subscription(
            topic.topic_id, name, str(sub_type), str(sub_isolation), cursor.encode(), created
        )
        if policy is not None and policy.encode() is not None:
            batch.put_subscription_policy(topic.topic_id, name, policy.encode())
        await self._store.write(batch)
        subscription = Subscription(topic, name, sub_type, sub_isolation, cursor, created)
        if policy is not None:
            subscription.policy = policy
        self._add(subscription)
        return True

    def prepare_delete(self, batch: WriteBatch, subscription: Subscription) -> None:
        """Add the deletion of ``subscription``'s row to ``batch``."""
        batch.drop_subscription(subscription.topic.topic_id, subscription.name)

    def remove(self, subscription: Subscription) -> None:
        """Forget a deleted subscription (after its deletion is durable)."""
        self._subscriptions.pop((subscription.topic.name, subscription.name), None)
        subscription.deleted = True
        subscription.drop_prefetch()
        subscription.cancel_timers()
        subscription.topic.notify()

    @staticmethod
    def prepare_delete_topic(batch: WriteBatch, topic_id: int) -> None:
        """Add the deletion of every subscription row of a topic to ``batch``."""
        batch.drop_subscriptions(topic_id)

    def remove_topic(self, topic: str) -> None:
        """Forget every subscription of a deleted topic."""
        self._deliver_at.pop(topic, None)
        for key in [k for k in self._subscriptions if k[0] == topic]:
            subscription = self._subscriptions.pop(key)
            subscription.deleted = True
            subscription.drop_prefetch()
            subscription.cancel_timers()

    def expire(self, now: float, expiry: float, batch: WriteBatch | None = None) -> None:
        """Detach consumers that have not polled for ``expiry`` seconds (with ``batch``,
        the redelivery counts that changed go into it)."""
        for subscription in self:
            subscription.expire(now, expiry)
            if batch is not None:
                subscription.prepare_redelivery_write(batch)

    def close(self) -> None:
        """Make every waiting receiver leave (the engine is closing or failed)."""
        for subscription in self._subscriptions.values():
            subscription.closed = True
            subscription.drop_prefetch()
            subscription.cancel_timers()
            subscription.topic.notify()

    def hold_open_acks(self, records: Iterable[TxnRecord]) -> None:
        """Re-hold the transactional acks of still-open transactions (recovery)."""
        for record in records:
            for ack in record.acks:
                subscription = self._subscriptions.get((ack.topic, ack.subscription))
                if subscription is not None:
                    positions = [Position.parse(p) for p in ack.positions]
                    subscription.hold_for_txn(positions, ack.cumulative, record.txn_id)

    def prepare_txn_end(self, batch: WriteBatch, record: TxnRecord, committed: bool) -> None:
        """Apply (commit) or release (abort) ``record``'s transactional acks into ``batch``."""
        grouped: dict[tuple[str, str], list[tuple[list[Position], bool]]] = {}
        for ack in record.acks:
            positions = [Position.parse(p) for p in ack.positions]
            grouped.setdefault((ack.topic, ack.subscription), []).append(
                (positions, ack.cumulative)
            )
        for key, acks in grouped.items():
            subscription = self._subscriptions.get(key)
            if subscription is None:
                continue
            subscription.release_txn(record.txn_id, committed, acks)
            if committed:
                subscription.prepare_cursor_write(batch)
            else:
                subscription.prepare_redelivery_write(batch)  # the releases counted
