"""txnstream: a transactional topic engine (Pulsar's transaction buffer, Kafka's last stable
offset) for asyncio services, an HTTP server and Spark pipelines.

The embedded surface (:class:`Engine`, its configuration, handles, value types and the one
error tree rooted at :class:`EngineError`) is re-exported from :mod:`txnstream.api`. The
layers are subpackages: ``txnstream.ledger`` <- ``txnstream.txn_buffer`` <-
{``txnstream.dispatcher``, ``txnstream.snapshots``} <- ``txnstream.api`` (whose adapters are
``txnstream.api.http``, ``.client``, ``.cli`` and ``.spark``).
"""

import importlib
import typing

if typing.TYPE_CHECKING:
    from txnstream.api import (
        DB_FILE,
        AbortedTxnRange,
        AckConflictError,
        ClosedError,
        CommittedReader,
        CommittedView,
        ConflictError,
        ConsumerBusyError,
        CorruptEntryError,
        DataDirLockedError,
        DrillError,
        Engine,
        EngineConfig,
        EngineError,
        EngineFailedError,
        EngineState,
        FencedError,
        FetchedEntry,
        FetchResult,
        FinishResult,
        ForbiddenError,
        Health,
        IncompatibleSnapshotError,
        InsufficientStorageError,
        InvalidArgumentError,
        LedgerError,
        Message,
        NotFoundError,
        OffloadNotConfiguredError,
        OutgoingMessage,
        Position,
        Principal,
        ProduceResult,
        RecoverySummary,
        RemoteStorageError,
        RetentionPolicy,
        SnapshotError,
        SubscriptionConflictError,
        SubscriptionHandle,
        SubscriptionNotFoundError,
        TooLargeError,
        TopicNotFoundError,
        TopicReplay,
        TopicStats,
        Transaction,
        TxnId,
        TxnInfo,
        TxnNotFoundError,
        TxnNotOpenError,
        TxnState,
        TxnStreamHttpError,
        TxnStreamSourceError,
        TxnStreamTransportError,
        replay_check,
        validate_name,
    )


def __getattr__(name: str) -> typing.Any:
    # Lazily, as txnstream.api loads its names: ``import txnstream.api.client`` (and the
    # command line) must not load the engine through this package's ``__init__``.
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("txnstream.api"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
    "RetentionPolicy",
    "SnapshotError",
    "SubscriptionConflictError",
    "SubscriptionHandle",
    "SubscriptionNotFoundError",
    "TooLargeError",
    "TopicNotFoundError",
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
