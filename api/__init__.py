"""txnstream's public surface: the embedded :class:`Engine` and its configuration.

Also re-exports the whole error tree rooted at :class:`EngineError`. Never imports
FastAPI: the HTTP app lives in ``api._http`` and the CLI in ``api._cli``.
"""

from dispatcher import Isolation, Message, SubscriptionType
from ledger import (
    AckConflictError,
    ClosedError,
    ConflictError,
    ConsumerBusyError,
    CorruptEntryError,
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
    TxnStreamSourceError,
    decode_payload,
    encode_payload,
    encode_value,
)
from txn_buffer import CommittedReader, CommittedView, FinishResult, TxnInfo, TxnState

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

Subscription = SubscriptionHandle

__all__ = [
    "AbortedTxnRange",
    "AckConflictError",
    "ClosedError",
    "CommittedReader",
    "CommittedView",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
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
    "Transaction",
    "TxnId",
    "TxnInfo",
    "TxnNotFoundError",
    "TxnNotOpenError",
    "TxnState",
    "TxnStreamSourceError",
    "decode_payload",
    "encode_payload",
    "encode_value",
    "validate_name",
]
