"""Who may do what: grants, the permissions they hold, and what each operation needs.

One set of rules for every front door (DESIGN.md): a door names the engine operation a
request is and asks the caller's :class:`~txnstream.api.Principal` (:meth:`may_do`); it
decides nothing itself. The engine checks what depends on stored state itself: receiving
from a read_uncommitted subscription needs ``read_uncommitted``, which only the
subscription knows.

A :class:`Grant` holds permissions on a topic name or prefix (``"billing-*"``) and, like
Kafka's group ACLs, the subscriptions they cover there. A grant that names no
subscriptions covers all of the topic's (what such a grant meant before subscription
rights existed, so a file written then neither loses nor gains access); reading
uncommitted data needs its own permission, never implied by ``consume``.
"""

from __future__ import annotations

from dataclasses import dataclass

PERMISSIONS = ("produce", "consume", "manage", "read_uncommitted")
"""``produce``: send (also in transactions); ``consume``: subscribe, receive, ack, nack,
seek, fetch, stats; ``manage``: create and delete the topic and its subscriptions, its
offload, retention and message TTL; ``read_uncommitted``: read open transactions' data (a
read_uncommitted subscription or fetch), on top of ``consume``."""

OPERATIONS: dict[str, tuple[str, ...]] = {
    "create_topic": ("manage",),
    "delete_topic": ("manage",),
    "set_offload": ("manage",),
    "run_offload": ("manage",),
    "set_retention": ("manage",),
    "set_ttl": ("manage",),
    "produce": ("produce",),
    "stats": ("consume",),
    "fetch": ("consume",),
    "ledgers": ("consume",),
    "create_subscription": ("consume", "manage"),  # subscribing creates it
    "delete_subscription": ("manage",),
    "receive": ("consume",),
    "ack": ("consume",),
    "nack": ("consume",),
    "seek": ("consume",),
}
"""Each operation on a topic (or one of its subscriptions) and the permissions of which it
needs one."""

ALL_SUBSCRIPTIONS = ("*",)
"""The subscriptions a grant covers when it names none."""


def matches(pattern: str, name: str) -> bool:
    """True if ``name`` is ``pattern`` or starts with its prefix (``"billing-*"``)."""
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return name == pattern


@dataclass(frozen=True, slots=True)
class Grant:
    """Permissions on a topic name or prefix, for the subscriptions of ``subscriptions``."""

    topic: str
    actions: frozenset[str]
    subscriptions: tuple[str, ...] = ALL_SUBSCRIPTIONS

    def matches(self, topic: str) -> bool:
        """True if ``topic`` is this grant's name or starts with its prefix."""
        return matches(self.topic, topic)

    def allows(self, permission: str, topic: str, subscription: str | None = None) -> bool:
        """True if it gives ``permission`` on ``topic`` (and ``subscription``, if named)."""
        return (
            permission in self.actions
            and matches(self.topic, topic)
            and (subscription is None or any(matches(p, subscription) for p in self.subscriptions))
        )
