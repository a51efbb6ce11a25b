"""A subscription's consumer policy: a redelivery limit with a dead-letter topic (Pulsar's
``deadLetterPolicy``) and a delay before nacked messages are delivered again.

Redelivery state that must outlive a restart (how often each position was released
unacknowledged, and not before when it is delivered again) is stored per position for a
subscription whose policy needs it (:attr:`ConsumerPolicy.persistent`), written with the
next cursor write or right after the nack or consumer expiry that changed it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from txnstream.ledger import InvalidArgumentError, validate_name

MAX_NACK_DELAY_MS = 7 * 24 * 3600 * 1000
"""The longest nack delay accepted (a week)."""


@dataclass(frozen=True, slots=True)
class ConsumerPolicy:
    """How a subscription treats messages released without an acknowledgement."""

    max_redeliveries: int | None = None
    """A message delivered ``max_redeliveries + 1`` times without an ack (nacks and
    expired deliveries count) moves to :attr:`dead_letter_topic`; None: no limit."""
    dead_letter_topic: str | None = None
    """Where such messages go (default ``{topic}-{subscription}-DLQ``, as Pulsar's)."""
    nack_delay_ms: int = 0
    """How long a nacked message waits before it is delivered again (shared and
    key_shared subscriptions; ordered ones redeliver at once, in order)."""

    def __post_init__(self) -> None:
        limit = self.max_redeliveries
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 1_000_000
        ):
            raise InvalidArgumentError("max_redeliveries must be an integer in 0..1000000")
        if self.dead_letter_topic is not None:
            if not isinstance(self.dead_letter_topic, str):
                raise InvalidArgumentError("dead_letter_topic must be a topic name")
            validate_name(self.dead_letter_topic)
            if limit is None:
                raise InvalidArgumentError("dead_letter_topic needs max_redeliveries")
        _check_delay(self.nack_delay_ms, "nack_delay_ms")

    @property
    def persistent(self) -> bool:
        """Whether redelivery state must be stored (a limit or a delay to honour)."""
        return self.max_redeliveries is not None or self.nack_delay_ms > 0

    def dead_letter_topic_of(self, topic: str, subscription: str) -> str:
        """The dead-letter topic for ``subscription`` of ``topic``."""
        return self.dead_letter_topic or f"{topic}-{subscription}-DLQ"

    def as_dict(self) -> dict[str, Any]:
        """The policy's fields as JSON (the HTTP names)."""
        return {
            "max_redeliveries": self.max_redeliveries,
            "dead_letter_topic": self.dead_letter_topic,
            "nack_delay_ms": self.nack_delay_ms,
        }

    def encode(self) -> bytes | None:
        """The stored form (None for the defaults)."""
        if self == ConsumerPolicy():
            return None
        return json.dumps(self.as_dict(), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> ConsumerPolicy:
        """The policy :meth:`encode` stored."""
        if data is None:
            return cls()
        fields = json.loads(data)
        return cls(fields["max_redeliveries"], fields["dead_letter_topic"], fields["nack_delay_ms"])


def _check_delay(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_NACK_DELAY_MS:
        raise InvalidArgumentError(f"{name} must be an integer in 0..{MAX_NACK_DELAY_MS}")


def check_delay_ms(value: Any, name: str = "delay_ms") -> int:
    """``value`` as a delay in milliseconds, or :class:`InvalidArgumentError`."""
    _check_delay(value, name)
    return int(value)
