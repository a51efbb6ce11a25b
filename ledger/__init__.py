"""The bottom layer: positions, entries, the msgpack codec, the managed ledger, and the
storage seam (:class:`Store`, :class:`WriteBatch`) with its SQLite and PostgreSQL
implementations.

Also home of the engine's one exception hierarchy (:class:`EngineError` and its tree).
"""

import typing as _typing

from ._batch import WriteBatch
from ._catalog import Catalog, ProducerRow, TopicRow, validate_name
from ._codec import (
    PACK_ERRORS,
    Body,
    decode_payload,
    decode_payloads,
    encode_payload,
    encode_payloads,
    encode_value,
    encode_value_payloads,
    pack,
    plain_payload_layout,
    unpack,
    value_packer,
)
from ._entry import Entry, EntryKind, OutgoingMessage, TxnId
from ._errors import (
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
    LeaseLostError,
    LedgerError,
    NotFoundError,
    OffloadNotConfiguredError,
    RemoteStorageError,
    SnapshotError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    TooLargeError,
    TopicNotFoundError,
    TxnNotFoundError,
    TxnNotOpenError,
    TxnStreamHttpError,
    TxnStreamSourceError,
    TxnStreamTransportError,
)
from ._ledger import AppendLane, ManagedLedger, ms_to_datetime, now_ms
from ._lock import LOCK_FILE, DirectoryLock
from ._offload import OffloadStore, normalize_url, sidecar_url
from ._parquet import AbortedIndexRow, OffloadedObject, Row, json_text, split_value
from ._pg_url import PostgresUrl, store_location
from ._position import Position
from ._reads import EntryMeta, decode_row
from ._schema import DB_FILE
from ._sqlite_store import SqliteStore
from ._sqlite_view import database_file
from ._store import DataRow, StorageMetrics, Store, StoreReader
from ._tiers import LedgerInfo

if _typing.TYPE_CHECKING:
    from ._pg_store import PgStore


def __getattr__(name: str) -> _typing.Any:
    # The PostgreSQL store imports psycopg (~0.2 s): only an engine that uses one pays.
    if name == "PgStore":
        from ._pg_store import PgStore

        return PgStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AbortedIndexRow",
    "AckConflictError",
    "AppendLane",
    "Body",
    "Catalog",
    "ClosedError",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
    "DB_FILE",
    "DataDirLockedError",
    "DataRow",
    "DirectoryLock",
    "DrillError",
    "EngineError",
    "EngineFailedError",
    "Entry",
    "EntryKind",
    "EntryMeta",
    "FencedError",
    "ForbiddenError",
    "IncompatibleSnapshotError",
    "InsufficientStorageError",
    "InvalidArgumentError",
    "LOCK_FILE",
    "LeaseLostError",
    "LedgerError",
    "LedgerInfo",
    "ManagedLedger",
    "NotFoundError",
    "OffloadNotConfiguredError",
    "OffloadStore",
    "OffloadedObject",
    "OutgoingMessage",
    "PACK_ERRORS",
    "PgStore",
    "Position",
    "PostgresUrl",
    "ProducerRow",
    "RemoteStorageError",
    "Row",
    "SnapshotError",
    "SqliteStore",
    "StorageMetrics",
    "Store",
    "StoreReader",
    "SubscriptionConflictError",
    "SubscriptionNotFoundError",
    "TooLargeError",
    "TopicNotFoundError",
    "TopicRow",
    "TxnId",
    "TxnNotFoundError",
    "TxnNotOpenError",
    "TxnStreamHttpError",
    "TxnStreamSourceError",
    "TxnStreamTransportError",
    "WriteBatch",
    "database_file",
    "decode_payload",
    "decode_payloads",
    "decode_row",
    "encode_payload",
    "encode_payloads",
    "encode_value",
    "encode_value_payloads",
    "json_text",
    "ms_to_datetime",
    "normalize_url",
    "now_ms",
    "pack",
    "plain_payload_layout",
    "sidecar_url",
    "split_value",
    "store_location",
    "unpack",
    "validate_name",
    "value_packer",
]
