"""The bottom layer: positions, entries, the msgpack codec, the managed ledger, and the
storage seam (:class:`Store`, :class:`WriteBatch`) with its SQLite and PostgreSQL
implementations.

Also home of the engine's one exception hierarchy (:class:`EngineError` and its tree).
"""

import typing

from ._entry import Entry, EntryKind, OutgoingMessage, TxnId
from ._errors import (
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
    LeaseLostError,
    LedgerError,
    NotFoundError,
    OffloadNotConfiguredError,
    OffloadPrefixClaimedError,
    RemoteStorageError,
    SnapshotError,
    SubscriptionConflictError,
    SubscriptionNotFoundError,
    TooLargeError,
    TopicNotFoundError,
    TxnNotFoundError,
    TxnNotOpenError,
)
from ._lazy import lazy_attributes
from ._position import Position

if typing.TYPE_CHECKING:
    from ._batch import WriteBatch
    from ._catalog import (
        Catalog,
        PartitionedRow,
        ProducerRow,
        StoreIdentity,
        TopicRow,
        partition_name,
        validate_name,
    )
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
    from ._ledger import ManagedLedger, TailAppender, ms_to_datetime, now_ms
    from ._lock import LOCK_FILE, DirectoryLock
    from ._offload import OffloadStore, normalize_url, sidecar_url
    from ._parquet import AbortedIndexRow, OffloadedObject, Row, json_text, split_value
    from ._pg_store import LeaseWatch, PgStore
    from ._pg_url import PostgresUrl, store_location
    from ._reads import EntryMeta, decode_row
    from ._schema import DB_FILE
    from ._sqlite_store import SqliteStore
    from ._sqlite_view import database_file
    from ._store import DataRow, Member, StorageMetrics, Store, StoreReader, process_id
    from ._tiers import LedgerInfo

# PEP 562, as pydantic's ``__init__`` does: positions, entries and the errors load with
# the package; the rest (SQLite, msgpack, Parquet, the writer process) on first use, so a
# client of the HTTP API (``txnstream.api.client``, the CLI) does not pay for the engine.
_LAZY: dict[str, str] = {
    "WriteBatch": "._batch",
    "Catalog": "._catalog",
    "StoreIdentity": "._catalog",
    "ProducerRow": "._catalog",
    "PartitionedRow": "._catalog",
    "partition_name": "._catalog",
    "TopicRow": "._catalog",
    "validate_name": "._catalog",
    "PACK_ERRORS": "._codec",
    "Body": "._codec",
    "decode_payload": "._codec",
    "decode_payloads": "._codec",
    "encode_payload": "._codec",
    "encode_payloads": "._codec",
    "encode_value": "._codec",
    "encode_value_payloads": "._codec",
    "pack": "._codec",
    "plain_payload_layout": "._codec",
    "unpack": "._codec",
    "value_packer": "._codec",
    "TailAppender": "._ledger",
    "ManagedLedger": "._ledger",
    "ms_to_datetime": "._ledger",
    "now_ms": "._ledger",
    "LOCK_FILE": "._lock",
    "DirectoryLock": "._lock",
    "OffloadStore": "._offload",
    "normalize_url": "._offload",
    "sidecar_url": "._offload",
    "AbortedIndexRow": "._parquet",
    "OffloadedObject": "._parquet",
    "Row": "._parquet",
    "json_text": "._parquet",
    "split_value": "._parquet",
    "LeaseWatch": "._pg_store",
    "PgStore": "._pg_store",  # imports psycopg (~0.2 s): only an engine that uses one pays
    "PostgresUrl": "._pg_url",
    "store_location": "._pg_url",
    "EntryMeta": "._reads",
    "decode_row": "._reads",
    "DB_FILE": "._schema",
    "SqliteStore": "._sqlite_store",
    "database_file": "._sqlite_view",
    "DataRow": "._store",
    "Member": "._store",
    "StorageMetrics": "._store",
    "process_id": "._store",
    "Store": "._store",
    "StoreReader": "._store",
    "LedgerInfo": "._tiers",
}


__all__ = [
    "AbortedIndexRow",
    "AckConflictError",
    "Body",
    "Catalog",
    "ClosedError",
    "ConflictError",
    "ConsumerBusyError",
    "CorruptEntryError",
    "CorruptObjectError",
    "DB_FILE",
    "DataDirLockedError",
    "DataDirectoryLostError",
    "DataRow",
    "DirectoryLock",
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
    "LeaseWatch",
    "LedgerError",
    "LedgerInfo",
    "ManagedLedger",
    "Member",
    "NotFoundError",
    "OffloadNotConfiguredError",
    "OffloadPrefixClaimedError",
    "OffloadStore",
    "OffloadedObject",
    "OutgoingMessage",
    "PACK_ERRORS",
    "PartitionedRow",
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
    "StoreIdentity",
    "StoreReader",
    "SubscriptionConflictError",
    "SubscriptionNotFoundError",
    "TailAppender",
    "TooLargeError",
    "TopicNotFoundError",
    "TopicRow",
    "TxnId",
    "TxnNotFoundError",
    "TxnNotOpenError",
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
    "lazy_attributes",
    "ms_to_datetime",
    "normalize_url",
    "now_ms",
    "pack",
    "partition_name",
    "plain_payload_layout",
    "process_id",
    "sidecar_url",
    "split_value",
    "store_location",
    "unpack",
    "validate_name",
    "value_packer",
]

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, __all__)
