"""txnstream's public surface: the embedded :class:`Engine` and its configuration.

Also re-exports the whole error tree rooted at :class:`EngineError`. Never imports
FastAPI: the HTTP app lives in ``api._http`` and the CLI in ``api._cli``.
"""

from dispatcher import Isolation, Message, SubscriptionType
from ledger import (
    DB_FILE,
    AckConflictError,
    ClosedError,
    ConflictError,
    ConsumerBusyError,
    CorruptEntryError,
    DrillError,
    EngineError,
    EngineFailedError,
    FencedError,
    IncompatibleSnapshotError,
    InvalidArgumentError,
    LedgerError,
    NotFoundError,
    OutgoingMessage,
    Position,
    SnapshotError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    TooLargeError,
    TopicNotFoundError,
    TxnId,
    TxnNotFoundError,
    TxnNotOpenError,
    TxnStreamHttpError,
    TxnStreamTransportError,
)
from txn_buffer import FinishResult, TxnInfo, TxnState

from ._config import EngineConfig
from ._engine import (
    AbortedTxnRange,
    Engine,
    EngineState,
    FetchedEntry,
    FetchResult,
    ProduceResult,
    SubscriptionHandle,
    Transaction,
    validate_name,
)
from ._replay_check import TopicReplay, replay_check

Subscription = SubscriptionHandle

__all__ = [
    "AbortedTxnRange",
    "AckConflictError",
    "ClosedError",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
    "DB_FILE",
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
    "IncompatibleSnapshotError",
    "InvalidArgumentError",
    "Isolation",
    "LedgerError",
    "Message",
    "NotFoundError",
    "OutgoingMessage",
    "Position",
    "ProduceResult",
    "SnapshotError",
    "Subscription",
    "SubscriptionConflictError",
    "SubscriptionHandle",
    "SubscriptionNotFoundError",
    "SubscriptionType",
    "TooLargeError",
    "TopicNotFoundError",
    "TopicReplay",
    "Transaction",
    "TxnId",
    "TxnInfo",
    "TxnNotFoundError",
    "TxnNotOpenError",
    "TxnState",
    "TxnStreamHttpError",
    "TxnStreamTransportError",
    "replay_check",
    "validate_name",
]
