"""The Parquet format of offloaded ledgers: one row per entry (the Spark source's columns
plus ``kind``, ``aborted`` and, for values the other columns cannot carry exactly,
``payload``), and the aborted-index sidecar. Pure data conversion, no I/O: the object
store is :mod:`txnstream.ledger._offload`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from ._codec import decode_payload, encode_payload, encode_value
from ._entry import Entry, EntryKind, TxnId
from ._errors import LedgerError
from ._position import Position

ROW_GROUP_BYTES = 1 << 20
"""Target uncompressed payload bytes of one row group (a range read's unit)."""
_ROW_GROUP_ROWS = (16, 8192)
_SUFFIX = ".parquet"
_SIDECAR_SUFFIX = ".aborted.parquet"
_COMMITTED_KEY = b"txnstream.committed_data"
_SIDECAR_KEY = b"txnstream.sidecar"
"""In a ledger object's footer: ``<size> sha256:<hex>`` of its aborted-index sidecar."""
_KINDS = {"data": EntryKind.DATA, "commit": EntryKind.COMMIT, "abort": EntryKind.ABORT}
_KIND_LABELS = {int(kind): kind.label for kind in EntryKind}
_KIND_ORDER = [kind.label for kind in sorted(EntryKind)]  # a label's index is its value
_TXN_PREFIX = len(str(TxnId(0))) - 1  # "txn-": the sequence follows
_ENTRY_COLUMNS = (
    "entry_id",
    "kind",
    "txn",
    "key",
    "value",
    "value_json",
    "properties",
    "publish_time",
    "payload",
)

Row = tuple[int, int, int, "int | None", bytes]
"""A stored entry as read: ``(ledger_id, entry_id, kind, txn seq or None, payload)``."""
RawRow = tuple[int, int, int | None, bytes]
"""``(entry_id, kind, txn sequence or None, payload)`` of one stored entry."""
MetaRow = tuple[int, EntryKind, int | None]
"""``(entry_id, kind, txn sequence or None)``: an entry without its payload."""


# -- value columns (shared with the Spark source) -------------------------------------


def json_text(value: Any) -> str | None:
    """The JSON text of a message value, or None if it is not JSON (bytes inside, ...)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):
        return None


def split_value(value: Any) -> tuple[bytes | None, str | None]:
    """``(value, value_json)`` columns of one message value.

    bytes stay bytes (``value_json`` null); a string gives its UTF-8 bytes and its JSON
    text; any other JSON value gives the UTF-8 of its JSON text in both columns; null
    gives ``(None, "null")``; a value JSON cannot hold gives its ``repr`` and null.

    >>> split_value(b"x"), split_value("é"), split_value({"a": 1})
    ((b'x', None), (b'\\xc3\\xa9', '"é"'), (b'{"a":1}', '{"a":1}'))
    """
    if isinstance(value, bytes):
        return value, None
    if value is None:
        return None, "null"
    text = json_text(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass"), text
    if text is None:
        return repr(value).encode("utf-8"), None
    return text.encode("utf-8"), text


def _exact(value: Any, text: str | None) -> bool:
    """True if ``(value, value_json)`` give ``value`` back exactly (no payload needed)."""
    kind = type(value)
    if kind is bytes or kind is str or value is None:
        return True
    if text is None:
        return False
    if kind is int or kind is float or kind is bool:
        return True
    # JSON turns integer map keys into strings; equality catches that (and any other
    # container the text does not round-trip)
    return bool(json.loads(text) == value)


# -- locations ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffloadedObject:
    """What an upload left in the store, verified: the ledger object's URL, size and
    checksum (``sha256:<hex>``), and the sidecar's size (None: no sidecar)."""

    url: str
    size: int
    checksum: str
    sidecar_size: int | None


@dataclass(frozen=True, slots=True)
class AbortedIndexRow:
    """One row of a ledger's aborted index: an aborted transaction whose ABORT marker
    lies in the ledger, with its first and last data positions and the stable position
    when it was aborted."""

    txn_id: TxnId
    first: Position
    last: Position
    marker: Position
    stable: Position | None


def _row_group_rows(rows: Sequence[RawRow]) -> int:
    average = sum(len(r[3]) for r in rows) / len(rows) if rows else 1
    low, high = _ROW_GROUP_ROWS
    return int(min(high, max(low, ROW_GROUP_BYTES // max(1, average))))


def ledger_table(ledger_id: int, rows: Sequence[RawRow], aborted: Collection[int]) -> Any:
    """The Arrow table of one ledger's entries (``rows`` in entry order, ids 0..n-1);
    ``aborted``: the sequences of its aborted transactions. Raises
    :class:`~txnstream.ledger.CorruptEntryError` for a payload that does not decode."""
    import pyarrow as pa  # type: ignore[import-untyped]

    entry_ids: list[int] = []
    kinds: list[str] = []
    txns: list[str | None] = []
    flags: list[bool] = []
    keys: list[str | None] = []
    values: list[bytes | None] = []
    texts: list[str | None] = []
    props: list[list[tuple[str, str]]] = []
    publish: list[int] = []
    payloads: list[bytes | None] = []
    committed = 0
    for expected, (entry_id, kind, txn, data) in enumerate(rows):
        if entry_id != expected:
            raise LedgerError(f"ledger {ledger_id} is not dense at entry {expected}")
        key, value, properties, publish_ms = decode_payload(data)
        value_bytes, text = split_value(value)
        is_aborted = kind == 0 and txn is not None and txn in aborted
        committed += kind == 0 and not is_aborted
        entry_ids.append(entry_id)
        kinds.append(_KIND_LABELS[kind])
        txns.append(None if txn is None else f"txn-{txn}")
        flags.append(is_aborted)
        keys.append(key)
        values.append(value_bytes)
        texts.append(text)
        props.append(list(properties.items()) if properties else [])
        publish.append(publish_ms)
        payloads.append(None if _exact(value, text) else data)
    ids = pa.array(entry_ids, pa.int64())
    n = len(entry_ids)
    position = pa.array([f"{ledger_id}:{e}" for e in entry_ids], pa.string())
    publish_us = pa.array([ms * 1000 for ms in publish], pa.int64())
    table = pa.table(
        {
            "position": position,
            "ledger_id": pa.repeat(pa.scalar(ledger_id, pa.int64()), n),
            "entry_id": ids,
            "key": pa.array(keys, pa.string()),
            "value": pa.array(values, pa.binary()),
            "value_json": pa.array(texts, pa.string()),
            "properties": pa.array(props, pa.map_(pa.string(), pa.string())),
            "txn": pa.array(txns, pa.string()),
            "publish_time": publish_us.cast(pa.timestamp("us", tz="UTC")),
            "kind": pa.array(kinds, pa.string()),
            "aborted": pa.array(flags, pa.bool_()),
            "payload": pa.array(payloads, pa.binary()),
        }
    )
    return table.replace_schema_metadata({_COMMITTED_KEY: str(committed).encode()})


def _sidecar_table(rows: Sequence[AbortedIndexRow]) -> Any:
    import pyarrow as pa

    def ints(values: list[int | None]) -> Any:
        return pa.array(values, pa.int64())

    return pa.table(
        {
            "txn": pa.array([str(r.txn_id) for r in rows], pa.string()),
            "first_ledger": ints([r.first.ledger_id for r in rows]),
            "first_entry": ints([r.first.entry_id for r in rows]),
            "last_ledger": ints([r.last.ledger_id for r in rows]),
            "last_entry": ints([r.last.entry_id for r in rows]),
            "marker_ledger": ints([r.marker.ledger_id for r in rows]),
            "marker_entry": ints([r.marker.entry_id for r in rows]),
            "stable_ledger": ints([None if r.stable is None else r.stable.ledger_id for r in rows]),
            "stable_entry": ints([None if r.stable is None else r.stable.entry_id for r in rows]),
        }
    )


def _sidecar_rows(table: Any) -> list[AbortedIndexRow]:
    out = []
    for row in table.to_pylist():
        stable = (
            None
            if row["stable_ledger"] is None
            else Position(row["stable_ledger"], row["stable_entry"])
        )
        out.append(
            AbortedIndexRow(
                TxnId.parse(row["txn"]),
                Position(row["first_ledger"], row["first_entry"]),
                Position(row["last_ledger"], row["last_entry"]),
                Position(row["marker_ledger"], row["marker_entry"]),
                stable,
            )
        )
    return out


def _parquet_bytes(table: Any, row_group_rows: int) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    sink = pa.BufferOutputStream()
    pq.write_table(
        table,
        sink,
        row_group_size=row_group_rows,
        compression="zstd",
        write_statistics=True,
        write_page_checksum=True,  # a reader verifies every page it decodes (CRC-32)
    )
    return sink.getvalue()


def rows_of(ledger_id: int, table: Any) -> list[Row]:
    """Rows of an offloaded object as the local tier's range reads give them,
    ``(ledger_id, entry_id, kind, txn sequence or None, payload)``, so a subscription
    delivers both tiers by one path. The kind and txn columns convert by pyarrow
    compute; an entry stored without its payload (its value columns hold it exactly)
    gets one encoded from them."""
    import pyarrow as pa
    import pyarrow.compute as pc  # type: ignore[import-untyped]

    count = table.num_rows
    kinds = pc.index_in(table.column("kind"), value_set=pa.array(_KIND_ORDER)).to_pylist()
    txns = pc.cast(pc.utf8_slice_codeunits(table.column("txn"), _TXN_PREFIX), pa.int64())
    if "payload" in table.column_names:
        payloads = table.column("payload").to_pylist()
    else:
        payloads = [None] * count
    missing = [i for i, payload in enumerate(payloads) if payload is None]
    if missing:
        fields = _fields(table)
        for i in missing:
            key, value, properties, publish_ms = fields(i)
            payloads[i] = encode_payload(key, encode_value(value), properties, publish_ms)
    return list(
        zip(
            itertools.repeat(ledger_id),
            table.column("entry_id").to_pylist(),
            kinds,
            txns.to_pylist(),
            payloads,
            strict=False,  # (the repeat is endless)
        )
    )


def _fields(table: Any) -> Callable[[int], tuple[str | None, Any, dict[str, str], int]]:
    """``(key, value, properties, publish_time ms)`` of row ``i`` from the value columns
    (for entries offloaded without their payload)."""
    import pyarrow as pa

    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    texts = table.column("value_json").to_pylist()
    props = table.column("properties").to_pylist()
    publish = table.column("publish_time").cast(pa.int64()).to_pylist()

    def fields(i: int) -> tuple[str | None, Any, dict[str, str], int]:
        text = texts[i]
        value = values[i] if text is None else json.loads(text)
        return keys[i], value, dict(props[i]) if props[i] else {}, publish[i] // 1000

    return fields


def entries_of(ledger_id: int, table: Any) -> list[Entry]:
    """Entries from rows of an offloaded object (as :func:`ledger_table` wrote them)."""
    entry_ids = table.column("entry_id").to_pylist()
    kinds = table.column("kind").to_pylist()
    txns = table.column("txn").to_pylist()
    columns = table.column_names
    payloads = table.column("payload").to_pylist() if "payload" in columns else [None] * len(kinds)
    fields = _fields(table)
    out = []
    for i, entry_id in enumerate(entry_ids):
        txn = txns[i]
        payload = payloads[i]
        if payload is not None:
            key, value, properties, publish_ms = decode_payload(payload)
        else:
            key, value, properties, publish_ms = fields(i)
        out.append(
            Entry(
                position=Position(ledger_id, entry_id),
                kind=_KINDS[kinds[i]],
                txn_id=None if txn is None else TxnId(int(txn[_TXN_PREFIX:])),
                key=key,
                value=value,
                properties=properties,
                publish_time=publish_ms,
            )
        )
    return out


# -- the store ------------------------------------------------------------------------
