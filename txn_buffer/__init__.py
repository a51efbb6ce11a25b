"""Per-topic transaction buffers (stable position) and the transaction coordinator.

Also :class:`CommittedReader`, the same committed view read from a data directory's file.
"""

from ._aborted import AbortedRow, AbortedSet
from ._buffer import AbortedTxn, OpenTxn, TxnBuffer
from ._committed_reader import CommittedReader, CommittedView, DataRow, OffloadedLedger
from ._coordinator import Coordinator
from ._records import (
    AckParticipant,
    FinishResult,
    PendingAck,
    ProducerEpoch,
    TxnInfo,
    TxnRecord,
    scoped_name,
)
from ._state import TxnState
from ._topic import ProducerState, Topic, TxnRunAppender

__all__ = [
    "AbortedRow",
    "AbortedSet",
    "AbortedTxn",
    "AckParticipant",
    "CommittedReader",
    "CommittedView",
    "Coordinator",
    "DataRow",
    "FinishResult",
    "OffloadedLedger",
    "OpenTxn",
    "PendingAck",
    "ProducerEpoch",
    "ProducerState",
    "Topic",
    "TxnBuffer",
    "TxnInfo",
    "TxnRecord",
    "TxnRunAppender",
    "TxnState",
    "scoped_name",
]
