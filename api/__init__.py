"""txnstream's embedded surface: :class:`Engine`, its configuration, handles, value types
and the one error tree rooted at :class:`EngineError`.

Never imports FastAPI, typer, httpx, kafka-python or PySpark: the adapters live in the
subpackages ``txnstream.api.http``, ``.kafka``, ``.client``, ``.cli`` and ``.spark``, and
use only what this module exports (plus the few front-door helpers of
:mod:`txnstream.api.support`). ``txnstream`` itself re-exports this surface.
"""

import typing

from txnstream.ledger import (
    AckConflictError,
    ClosedError,
    ConflictError,
    ConsumerBusyError,
    CorruptEntryError,
    CorruptObjectError,
    DataDirectoryLostError,
    DataDirLockedError,
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
    OffloadPrefixClaimedError,
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
)
from txnstream.ledger import lazy_attributes as _lazy_attributes

if typing.TYPE_CHECKING:
    from txnstream.dispatcher import AbortedTxnRange, FetchedEntry, FetchResult, Message
    from txnstream.txn_buffer import FinishResult, ProducerEpoch, TxnInfo, TxnState

    from ._config import EngineConfig, RetentionPolicy
    from ._core import EngineState, Health, Principal, ProduceResult
    from ._engine import Engine
    from ._grants import OPERATIONS, PERMISSIONS, Grant
    from ._handles import SubscriptionHandle, Transaction
    from ._offsets import TopicOffsets
    from ._partitions import PartitionMessage, PartitionPosition, partition_for_key
    from ._stats import RecoverySummary, TopicStats
    from .cli.drills import DrillError
    from .client import TxnStreamHttpError, TxnStreamTransportError
    from .spark import TxnStreamSourceError

# PEP 562 (see ``txnstream.ledger``): positions and the error tree load with the package,
# the engine and its value types on first use, so ``txnstream.api.client`` and the CLI's
# client commands start without SQLite, the engine or its dependencies.
_LAZY: dict[str, str] = {
    "AbortedTxnRange": "txnstream.dispatcher",
    "FetchedEntry": "txnstream.dispatcher",
    "FetchResult": "txnstream.dispatcher",
    "Message": "txnstream.dispatcher",
    "FinishResult": "txnstream.txn_buffer",
    "ProducerEpoch": "txnstream.txn_buffer",
    "TxnInfo": "txnstream.txn_buffer",
    "TxnState": "txnstream.txn_buffer",
    "EngineConfig": "._config",
    "RetentionPolicy": "._config",
    "EngineState": "._core",
    "Health": "._core",
    "Principal": "._core",
    "ProduceResult": "._core",
    "Engine": "._engine",
    "OPERATIONS": "._grants",
    "PERMISSIONS": "._grants",
    "Grant": "._grants",
    "TopicOffsets": "._offsets",
    "PartitionMessage": "._partitions",
    "PartitionPosition": "._partitions",
    "partition_for_key": "._partitions",
    "SubscriptionHandle": "._handles",
    "Transaction": "._handles",
    "RecoverySummary": "._stats",
    "TopicStats": "._stats",
    # the adapters' errors, defined where they are raised (see ``txnstream.ledger._errors``)
    "DrillError": ".cli.drills._errors",
    "TxnStreamHttpError": ".client._errors",
    "TxnStreamTransportError": ".client._errors",
    "TxnStreamSourceError": ".spark._errors",
}


__all__ = [
    "AbortedTxnRange",
    "AckConflictError",
    "ClosedError",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
    "CorruptObjectError",
    "DataDirLockedError",
    "DataDirectoryLostError",
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
    "Grant",
    "Health",
    "IncompatibleSnapshotError",
    "InsufficientStorageError",
    "InvalidArgumentError",
    "LedgerError",
    "Message",
    "NotFoundError",
    "OPERATIONS",
    "OffloadNotConfiguredError",
    "OffloadPrefixClaimedError",
    "OutgoingMessage",
    "PERMISSIONS",
    "PartitionMessage",
    "PartitionPosition",
    "Position",
    "Principal",
    "ProduceResult",
    "ProducerEpoch",
    "RecoverySummary",
    "RemoteStorageError",
    "RetentionPolicy",
    "SnapshotError",
    "SubscriptionConflictError",
    "SubscriptionHandle",
    "SubscriptionNotFoundError",
    "TooLargeError",
    "TopicNotFoundError",
    "TopicOffsets",
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
    "partition_for_key",
]

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, __all__)
