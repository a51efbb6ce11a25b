"""The bottom layer: positions, entries, the msgpack codec, and the managed ledger on SQLite.

Also home of the engine's one exception hierarchy (:class:`EngineError` and its tree).
"""

from ._codec import decode_payload, encode_payload, encode_value, pack, unpack
from ._entry import Entry, EntryKind, Marker, OutgoingMessage, TxnId
from ._errors import (
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
    SnapshotError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    TooLargeError,
    TopicNotFoundError,
    TxnNotFoundError,
    TxnNotOpenError,
    TxnStreamHttpError,
    TxnStreamTransportError,
)
from ._ledger import EntryMeta, LedgerInfo, ManagedLedger, decode_row, ms_to_datetime, now_ms
from ._position import Position
from ._schema import DB_FILE
from ._store import Store, WriteBatch

__all__ = [
    "AckConflictError",
    "ClosedError",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
    "DB_FILE",
    "DrillError",
    "EngineError",
    "EngineFailedError",
    "Entry",
    "EntryKind",
    "EntryMeta",
    "FencedError",
    "IncompatibleSnapshotError",
    "InvalidArgumentError",
    "LedgerError",
    "LedgerInfo",
    "ManagedLedger",
    "Marker",
    "NotFoundError",
    "OutgoingMessage",
    "Position",
    "SnapshotError",
    "Store",
    "SubscriptionConflictError",
    "SubscriptionNotFoundError",
    "TooLargeError",
    "TopicNotFoundError",
    "TxnId",
    "TxnNotFoundError",
    "TxnNotOpenError",
    "TxnStreamHttpError",
    "TxnStreamTransportError",
    "WriteBatch",
    "decode_payload",
    "decode_row",
    "encode_payload",
    "encode_value",
    "ms_to_datetime",
    "now_ms",
    "pack",
    "unpack",
]
