"""The bottom layer: positions, entries, the msgpack codec, and the managed ledger on SQLite.

Also home of the engine's one exception hierarchy (:class:`EngineError` and its tree).
"""

from ._catalog import Catalog, ProducerRow, TopicRow, validate_name
from ._codec import (
    decode_payload,
    encode_payload,
    encode_value,
    pack,
    plain_payload_layout,
    unpack,
)
from ._entry import Entry, EntryKind, OutgoingMessage, TxnId
from ._errors import (
    AckConflictError,
    ClosedError,
    ConflictError,
    ConsumerBusyError,
    CorruptEntryError,
    DataDirLockedError,
    EngineError,
    EngineFailedError,
    FencedError,
    IncompatibleSnapshotError,
    InsufficientStorageError,
    InvalidArgumentError,
    LedgerError,
    NotFoundError,
    SnapshotError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    TooLargeError,
    TopicNotFoundError,
    TxnNotFoundError,
    TxnNotOpenError,
    TxnStreamSourceError,
)
from ._ledger import EntryMeta, LedgerInfo, ManagedLedger, ms_to_datetime, now_ms
from ._lock import LOCK_FILE, DirectoryLock
from ._position import Position
from ._schema import DB_FILE
from ._store import Store, WriteBatch

__all__ = [
    "AckConflictError",
    "Catalog",
    "ClosedError",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
    "DB_FILE",
    "DataDirLockedError",
    "DirectoryLock",
    "EngineError",
    "EngineFailedError",
    "Entry",
    "EntryKind",
    "EntryMeta",
    "FencedError",
    "IncompatibleSnapshotError",
    "InsufficientStorageError",
    "InvalidArgumentError",
    "LOCK_FILE",
    "LedgerError",
    "LedgerInfo",
    "ManagedLedger",
    "NotFoundError",
    "OutgoingMessage",
    "Position",
    "ProducerRow",
    "SnapshotError",
    "Store",
    "SubscriptionConflictError",
    "SubscriptionNotFoundError",
    "TooLargeError",
    "TopicNotFoundError",
    "TopicRow",
    "TxnId",
    "TxnNotFoundError",
    "TxnNotOpenError",
    "TxnStreamSourceError",
    "WriteBatch",
    "decode_payload",
    "encode_payload",
    "encode_value",
    "ms_to_datetime",
    "now_ms",
    "pack",
    "plain_payload_layout",
    "unpack",
    "validate_name",
]
