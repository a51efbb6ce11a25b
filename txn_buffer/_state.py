"""Transaction states and the transitions allowed between them."""

from __future__ import annotations

import enum


class TxnState(enum.StrEnum):
    """A transaction's life: open, then committing/aborting, then committed/aborted."""

    OPEN = "open"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTING = "aborting"
    ABORTED = "aborted"

    @property
    def is_ended(self) -> bool:
        """True once the decision is durable."""
        return self in (TxnState.COMMITTED, TxnState.ABORTED)

    def can_become(self, other: TxnState) -> bool:
        """Whether the transition table allows ``self -> other``."""
        return other in _TRANSITIONS[self]


_TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.OPEN: frozenset({TxnState.COMMITTING, TxnState.ABORTING}),
    TxnState.COMMITTING: frozenset({TxnState.COMMITTED}),
    TxnState.ABORTING: frozenset({TxnState.ABORTED}),
    TxnState.COMMITTED: frozenset(),
    TxnState.ABORTED: frozenset(),
}
