"""What a subscription hands out and is made of: its type and isolation level, the
:class:`Message` a consumer receives, and the :class:`Consumer` record."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from txnstream.ledger import InvalidArgumentError, Position, TxnId, ms_to_datetime


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


class Message(msgspec.Struct, frozen=True):
    """A delivered message: ``position``, ``value``, ``key``, ``properties``, ``txn``,
    ``publish_time`` and ``redelivery_count``, read-only (equal when all are; pickles).

    A msgspec struct, not a tuple (no ``len()``, no indexing), whose seven fields come in
    the order a delivery batch has them: the decoded body ``key, properties, publish time,
    value`` (see :func:`txnstream.ledger.decode_payloads`), then the position as one int
    (ledger id above bit 64, entry id below: the int the subscription keys its pending
    set with), the transaction's seq and the count. Its constructor is one C call, so a
    delivery batch makes its messages with ``starmap(Message, ...)``, without a Python
    call per message; ``key``, ``value`` and ``redelivery_count`` are read as stored (no
    call either), the others computed when read. A message of atomic fields is never
    tracked by the cyclic collector: a consumer holding 100,000 messages costs a full
    collection little.
    """

    key: str | None
    """The message key, if any."""
    _properties: tuple[tuple[str, str], ...]
    _publish_ms: int
    value: Any
    """The value as sent (``bytes`` stays ``bytes``, ``str`` stays ``str``)."""
    _position: int
    _txn_seq: int | None
    redelivery_count: int
    """How often it was delivered before (nack, detached consumer, aborted ack)."""

    @property
    def position(self) -> Position:
        """Where the message lies in its topic."""
        return key_position(self._position)

    @property
    def properties(self) -> dict[str, str]:
        """The message properties (a new dict each time: the message stays as it was)."""
        return dict(self._properties)

    @property
    def txn(self) -> str | None:
        """The id of the transaction it was sent in (``"txn-<n>"``), or None."""
        seq = self._txn_seq
        return None if seq is None else str(TxnId(seq))

    @property
    def publish_time(self) -> datetime:
        """When it was appended (UTC)."""
        return ms_to_datetime(self._publish_ms)

    def __repr__(self) -> str:
        return (
            f"Message(position={self.position!r}, value={self.value!r}, key={self.key!r},"
            f" properties={self.properties!r}, txn={self.txn!r},"
            f" publish_time={self.publish_time!r}, redelivery_count={self.redelivery_count})"
        )


def position_key(position: Position) -> int:
    """An int ordered as positions are: a cheap dict key for a delivered position."""
    return (position.ledger_id << 64) | position.entry_id


def key_position(key: int) -> Position:
    """The position a :func:`position_key` stands for."""
    return Position(key >> 64, key & _ENTRY_MASK)


_ENTRY_MASK = (1 << 64) - 1


@dataclass(slots=True)
class Consumer:
    """A consumer attached to a subscription."""

    name: str
    expires: bool
    last_seen: float
    polling: int = 0
    """Receives in progress: a consumer waiting in a long poll is not idle."""
