"""What a subscription hands out and is made of: its type and isolation level, the
:class:`Message` a consumer receives, and the :class:`Consumer` record."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledger import InvalidArgumentError, Position, TxnId, ms_to_datetime


class SubscriptionType(enum.StrEnum):
    """How a subscription shares its messages among consumers."""

    EXCLUSIVE = "exclusive"
    FAILOVER = "failover"
    SHARED = "shared"
    KEY_SHARED = "key_shared"


class Isolation(enum.StrEnum):
    """What a subscription may read."""

    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"


def parse_enum(kind: type[enum.StrEnum], value: Any, what: str) -> Any:
    """``kind(value)`` with an :class:`InvalidArgumentError` naming the allowed values."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise InvalidArgumentError(f"invalid {what} {value!r}: one of {allowed}") from None


class Message(tuple):  # type: ignore[type-arg]
    """A delivered message: ``position``, ``value``, ``key``, ``properties``, ``txn``,
    ``publish_time`` and ``redelivery_count``, read-only.

    Underneath it is one flat tuple, so a delivery batch makes its messages without a
    Python call per message and each is a single object for the cyclic collector to
    walk (a consumer holding 100,000 messages is 100,000 objects, not 300,000); the
    fields are computed when read.
    """

    __slots__ = ()

    # (key, properties, publish_time_ms, value, ledger_id, entry_id, txn seq,
    #  redelivery_count): the decoded payload (see ledger.decode_payloads), then the
    #  stored row's position and transaction, then the count

    @property
    def position(self) -> Position:
        """Where the message lies in its topic."""
        return Position(self[4], self[5])

    @property
    def value(self) -> Any:
        """The value as sent (``bytes`` stays ``bytes``, ``str`` stays ``str``)."""
        return self[3]

    @property
    def key(self) -> str | None:
        """The message key, if any."""
        key: str | None = self[0]
        return key

    @property
    def properties(self) -> dict[str, str]:
        """The message properties."""
        properties: dict[str, str] = self[1]
        return properties

    @property
    def txn(self) -> str | None:
        """The id of the transaction it was sent in (``"txn-<n>"``), or None."""
        seq = self[6]
        return None if seq is None else str(TxnId(seq))

    @property
    def publish_time(self) -> datetime:
        """When it was appended (UTC)."""
        return ms_to_datetime(self[2])

    @property
    def redelivery_count(self) -> int:
        """How often it was delivered before (nack, detached consumer, aborted ack)."""
        count: int = self[7]
        return count

    def __repr__(self) -> str:
        return (
            f"Message(position={self.position!r}, value={self.value!r}, key={self.key!r},"
            f" properties={self.properties!r}, txn={self.txn!r},"
            f" publish_time={self.publish_time!r}, redelivery_count={self.redelivery_count})"
        )


@dataclass(slots=True)
class Consumer:
    """A consumer attached to a subscription."""

    name: str
    expires: bool
    last_seen: float
    polling: int = 0
    """Receives in progress: a consumer waiting in a long poll is not idle."""
