"""Entries, markers and transaction ids: the vocabulary every layer shares."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from ._errors import InvalidArgumentError
from ._position import Position

_TXN_RE = re.compile(r"^txn-(0|[1-9][0-9]{0,17})$")


@dataclass(frozen=True, order=True, slots=True)
class TxnId:
    """A transaction id: a number from the coordinator's persisted counter, never reused.

    Clients see it as the opaque string ``"txn-<n>"``.

    >>> str(TxnId(17)), TxnId.parse("txn-17")
    ('txn-17', TxnId(17))
    """

    seq: int

    def __str__(self) -> str:
        return f"txn-{self.seq}"

    def __repr__(self) -> str:
        return f"TxnId({self.seq})"

    @classmethod
    def parse(cls, text: str) -> TxnId:
        """Parse ``"txn-<n>"``; raises :class:`InvalidArgumentError` otherwise."""
        match = _TXN_RE.match(text) if isinstance(text, str) else None
        if match is None:
            raise InvalidArgumentError(f"invalid transaction id {text!r}")
        return cls(int(match.group(1)))

    @classmethod
    def coerce(cls, value: TxnId | str) -> TxnId:
        """Accept a :class:`TxnId` or its string form."""
        return value if isinstance(value, TxnId) else cls.parse(value)


class EntryKind(enum.IntEnum):
    """What an entry is: a data message or a transaction marker."""

    DATA = 0
    COMMIT = 1
    ABORT = 2

    @property
    def label(self) -> str:
        """The lowercase name used in JSON (``data``, ``commit``, ``abort``)."""
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """A message a producer hands to the engine (before it has a position)."""

    value: Any
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    deliver_at_ms: int | None = None
    """Not delivered to shared and key_shared subscriptions before this time
    (milliseconds since the epoch; Pulsar's ``deliverAt``); None: at once."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of a topic's log, as stored: data or marker, with its position."""

    position: Position
    kind: EntryKind
    txn_id: TxnId | None
    key: str | None
    value: Any
    properties: dict[str, str]
    publish_time: int
    """Milliseconds since the epoch at append time."""
    size: int = 0
    """Stored bytes of the entry (key, value, properties): for response byte budgets."""
