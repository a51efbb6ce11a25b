"""The subscription registry: every subscription of every topic, and its stored rows.

Owns the stored subscriptions (create, load, delete; cursors are written by each
:class:`Subscription`), detaches idle consumers, and is the coordinator's ack
participant: when a transaction ends, :meth:`SubscriptionRegistry.prepare_txn_end`
applies (commit) or releases (abort) its transactional acks in the same batch as the
decision, so the acks and the decision become durable together.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

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
from ._subscription import Subscription


class SubscriptionRegistry:
    """Subscriptions keyed by ``(topic name, subscription name)``."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._subscriptions: dict[tuple[str, str], Subscription] = {}

    async def load(self, topics_by_id: Mapping[int, Topic]) -> None:
        """Load every stored subscription of the given topics (recovery)."""
        rows = await self._store.subscription_rows()
        for topic_id, name, type_, isolation, cursor, created_ms in rows:
            topic = topics_by_id.get(topic_id)
            if topic is not None:
                self._subscriptions[(topic.name, name)] = Subscription(
                    topic,
                    name,
                    SubscriptionType(type_),
                    Isolation(isolation),
                    Cursor.decode(cursor),
                    created_ms,
                )

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
    ) -> bool:
        """Create a subscription (durable on return); False if it exists alike.

        Raises :class:`SubscriptionConflictError` if it exists with another type or
        isolation. The caller serialises administrative changes.
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
            return False
        cursor = Cursor(read_limit(topic, sub_isolation) if initial_position == "latest" else None)
        created = now_ms()
        batch = WriteBatch()
        batch.create_subscription(
            topic.topic_id, name, str(sub_type), str(sub_isolation), cursor.encode(), created
        )
        await self._store.write(batch)
        self._subscriptions[(topic.name, name)] = Subscription(
            topic, name, sub_type, sub_isolation, cursor, created
        )
        return True

    def prepare_delete(self, batch: WriteBatch, subscription: Subscription) -> None:
        """Add the deletion of ``subscription``'s row to ``batch``."""
        batch.drop_subscription(subscription.topic.topic_id, subscription.name)

    def remove(self, subscription: Subscription) -> None:
        """Forget a deleted subscription (after its deletion is durable)."""
        self._subscriptions.pop((subscription.topic.name, subscription.name), None)
        subscription.deleted = True
        subscription.drop_prefetch()
        subscription.topic.notify()

    @staticmethod
    def prepare_delete_topic(batch: WriteBatch, topic_id: int) -> None:
        """Add the deletion of every subscription row of a topic to ``batch``."""
        batch.drop_subscriptions(topic_id)

    def remove_topic(self, topic: str) -> None:
        """Forget every subscription of a deleted topic."""
        for key in [k for k in self._subscriptions if k[0] == topic]:
            subscription = self._subscriptions.pop(key)
            subscription.deleted = True
            subscription.drop_prefetch()

    def expire(self, now: float, expiry: float) -> None:
        """Detach consumers that have not polled for ``expiry`` seconds."""
        for subscription in self:
            subscription.expire(now, expiry)

    def close(self) -> None:
        """Make every waiting receiver leave (the engine is closing or failed)."""
        for subscription in self._subscriptions.values():
            subscription.closed = True
            subscription.drop_prefetch()
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
