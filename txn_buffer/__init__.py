"""Per-topic transaction buffers (stable position) and the transaction coordinator."""

from ._buffer import AbortedTxn, OpenTxn, TxnBuffer
from ._coordinator import (
    AckParticipant,
    Coordinator,
    FinishResult,
    PendingAck,
    TxnInfo,
    TxnRecord,
)
from ._state import TxnState
from ._topic import ProducerState, Topic

__all__ = [
    "AbortedTxn",
    "AckParticipant",
    "Coordinator",
    "FinishResult",
    "OpenTxn",
    "PendingAck",
    "ProducerState",
    "Topic",
    "TxnBuffer",
    "TxnInfo",
    "TxnRecord",
    "TxnState",
]
