"""txnstream's embedded surface: :class:`Engine`, its configuration, handles, value types
and the one error tree rooted at :class:`EngineError`.

Never imports FastAPI, typer, httpx, kafka-python or PySpark: the adapters live in the
subpackages ``txnstream.api.http``, ``.kafka``, ``.client``, ``.cli`` and ``.spark``, and
use only what this module exports. ``txnstream`` itself re-exports this surface.
"""

from txnstream.dispatcher import AbortedTxnRange, FetchedEntry, FetchResult, Message
from txnstream.ledger import (
    DB_FILE,
    AckConflictError,
    ClosedError,
    ConflictError,
    ConsumerBusyError,
    CorruptEntryError,
    DataDirLockedError,
    DrillError,
    EngineError,
    EngineFailedError,
    FencedError,
    ForbiddenError,
    IncompatibleSnapshotError,
    InsufficientStorageError,
    InvalidArgumentError,
    LedgerError,
    NotFoundError,
    OffloadNotConfiguredError,
    OutgoingMessage,
    Position,
    RemoteStorageError,
    SnapshotError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    TooLargeError,
    TopicNotFoundError,
    TxnId,
    TxnNotFoundError,
    TxnNotOpenError,
    TxnStreamHttpError,
    TxnStreamSourceError,
    TxnStreamTransportError,
    validate_name,
)
from txnstream.txn_buffer import CommittedReader, CommittedView, FinishResult, TxnInfo, TxnState

from ._config import EngineConfig
from ._core import EngineState, Health, Principal, ProduceResult
from ._engine import Engine
from ._handles import SubscriptionHandle, Transaction
from ._offsets import TopicOffsets
from ._replay_check import TopicReplay, replay_check
from ._stats import RecoverySummary, TopicStats

__all__ = [
    "AbortedTxnRange",
    "AckConflictError",
    "ClosedError",
    "CommittedReader",
    "CommittedView",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
    "DB_FILE",
    "DataDirLockedError",
    "DrillError",
    "Engine",
    "EngineConfig",
    "EngineError",
    "EngineFailedError",
    "EngineState",
    "FencedError",
    "FetchResult",
    "FetchedEntry",
    "FinishResult",
    "ForbiddenError",
    "Health",
    "IncompatibleSnapshotError",
    "InsufficientStorageError",
    "InvalidArgumentError",
    "LedgerError",
    "Message",
    "NotFoundError",
    "OffloadNotConfiguredError",
    "OutgoingMessage",
    "Position",
    "Principal",
    "ProduceResult",
    "RecoverySummary",
    "RemoteStorageError",
    "SnapshotError",
    "SubscriptionConflictError",
    "SubscriptionHandle",
    "SubscriptionNotFoundError",
    "TooLargeError",
    "TopicNotFoundError",
    "TopicOffsets",
    "TopicReplay",
    "TopicStats",
    "Transaction",
    "TxnId",
    "TxnInfo",
    "TxnNotFoundError",
    "TxnNotOpenError",
    "TxnState",
    "TxnStreamHttpError",
    "TxnStreamSourceError",
    "TxnStreamTransportError",
    "replay_check",
    "validate_name",
]
