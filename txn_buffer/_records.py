"""The coordinator's records: a transaction as stored and as clients see it, pending
transactional acks, ``finish`` results, reasons and compact outcomes of ended transactions,
and principal-scoped names."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from txnstream.ledger import TxnId, WriteBatch, ms_to_datetime

from ._state import TxnState

_SCOPE = "\x1f"  # unit separator: not in principal names, rare in ids

REASONS = ("client", "timeout", "fenced", "low_watermark")
"""Why a transaction ended: its client ended it, it timed out, a newer holder of its
``transactional_id`` fenced it, or the low watermark passed it."""


def scoped_name(owner: str | None, name: str) -> str:
    """``name`` in ``owner``'s namespace: the same text for no owner (unchanged from
    before owners existed), else a form no other owner's name can take.

    >>> scoped_name(None, "w1"), scoped_name("billing", "w1")
    ('w1', '\\x1fbilling\\x1fw1')
    """
    return name if owner is None else f"{_SCOPE}{owner}{_SCOPE}{name}"


@dataclass(slots=True)
class IdEpoch:
    """What the coordinator keeps of a transactional id with a producer epoch (one row)."""

    epoch: ProducerEpoch
    used_ms: int
    """When it was last bumped or began a transaction (its expiry counts from there)."""
    txn_seq: int | None = None
    """The epoch's newest transaction (None: none yet): the one its producer is in."""

    def write(self, batch: WriteBatch, name: str) -> None:
        """Upsert its row (``name``: the id in its owner's namespace) into ``batch``."""
        batch.put_producer_epoch(
            name, self.epoch.epoch, self.epoch.session, self.used_ms, self.txn_seq
        )


@dataclass(frozen=True, slots=True, eq=False)
class ProducerEpoch:
    """A transactional id's producer epoch, durable (see ``Coordinator.bump_epoch``).

    Compared by identity: each bump makes a new one, and so does each load of the
    coordinator (a restart, a failover), so a front door that keeps state beside it (a
    Kafka producer's open transaction) knows that state is still this one's.
    """

    epoch: int
    """Raised by every bump: a producer holding an older one is a zombie."""
    session: str
    """Unique to the bump that made this epoch (64 random bits), across expiries too:
    state kept per producer incarnation (its sequence numbers) is named after it."""


@dataclass(frozen=True, slots=True)
class TxnInfo:
    """A transaction as clients see it (``reason`` once it ended: see :data:`REASONS`)."""

    txn: str
    state: str
    label: str | None
    topics: list[str]
    fenced: bool
    timeout_ms: int
    created_at: datetime
    deadline: datetime
    reason: str | None
    owner: str | None = None
    """The principal that began it (None: begun without one)."""


@dataclass(frozen=True, slots=True)
class PendingAck:
    """A transactional ack waiting for its transaction's decision."""

    topic: str
    subscription: str
    positions: tuple[str, ...]
    cumulative: bool


@dataclass(slots=True, eq=False)
class TxnRecord:
    """The coordinator's record of one transaction."""

    txn_id: TxnId
    state: TxnState
    timeout_ms: int
    deadline_ms: int
    transactional_id: str | None
    label: str | None
    created_ms: int
    fenced: bool = False
    topics: dict[str, None] = field(default_factory=dict)
    acks: list[PendingAck] = field(default_factory=list)
    ended_ms: int | None = None
    reason: str | None = None
    persisted: bool = False
    owner: str | None = None
    compact: bool = False
    """Rebuilt from a kept outcome: state, fenced and reason are real, the rest is not."""

    @property
    def holder_key(self) -> str | None:
        """Its ``transactional_id`` in its owner's namespace (None without one)."""
        tid = self.transactional_id
        return None if tid is None else scoped_name(self.owner, tid)

    @property
    def timed_out(self) -> bool:
        """True if the transaction was aborted by its timeout."""
        return self.reason == "timeout"

    def info(self) -> TxnInfo:
        """The public view of this record."""
        return TxnInfo(
            str(self.txn_id),
            str(self.state),
            self.label,
            list(self.topics),
            self.fenced,
            self.timeout_ms,
            ms_to_datetime(self.created_ms),
            ms_to_datetime(self.deadline_ms),
            self.reason if self.state.is_ended else None,
            self.owner,
        )


@dataclass(frozen=True, slots=True)
class FinishResult:
    """What ``finish`` decided."""

    committed: list[str]
    aborted: list[str]
    duplicate: bool


class AckParticipant(Protocol):
    """Applies or releases a transaction's pending acks (implemented by the engine)."""

    def prepare_txn_end(self, batch: WriteBatch, record: TxnRecord, committed: bool) -> None:
        """Add the cursor updates of ``record``'s acks to ``batch``."""


def _not_open(record: TxnRecord) -> str:
    """Why ``record`` takes no more work, in words (a timeout says so)."""
    if record.reason == "timeout":
        return (
            f"transaction {record.txn_id} timed out (its {record.timeout_ms} ms timeout passed)"
            " and was aborted"
        )
    return f"transaction {record.txn_id} is {record.state}"


_REASON_CODES = {reason: i + 1 for i, reason in enumerate(REASONS)}


def _outcome_code(committed: bool, fenced: bool, reason: str | None) -> int:
    """One small int: bit 0 committed, bit 1 fenced, the rest the reason's index + 1."""
    return int(committed) | int(fenced) << 1 | _REASON_CODES.get(reason or "", 0) << 2


def _from_outcome(seq: int, code: int) -> TxnRecord:
    reason = REASONS[(code >> 2) - 1] if code >> 2 else None
    state = TxnState.COMMITTED if code & 1 else TxnState.ABORTED
    record = TxnRecord(TxnId(seq), state, 0, 0, None, None, 0, bool(code & 2), reason=reason)
    record.compact = True
    return record
