"""Record batches v2 in and out, with aiokafka's compiled ``aiokafka.record`` codec.

The codec is aiokafka's Cython port of Kafka's ``DefaultRecordBatch`` (the same format
kafka-python's pure Python ``kafka.record`` reads and writes, byte for byte, ~30-50x
faster: ~0.3 us a record to decode and ~0.5 us to encode instead of ~10-25 us); the
protocol framing and request/response structs stay kafka-python's. The test suite checks
both codecs agree (``tests/kafka/test_records.py``).

In: a produced batch's records become :class:`~txnstream.api.OutgoingMessage` (value as
bytes, key as UTF-8 text, headers as properties) with the batch's producer fields. Out:
fetched entries become batches of consecutive entries that share a kind and transaction,
each at its offsets. A transaction's batches carry its id as their producer id (ids are
never reused, so a read_committed client's aborted list names exactly it) and its marker
is a control batch; everything else has no producer id.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c

from txnstream.api import FetchedEntry, OutgoingMessage

_NO_PRODUCER = -1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type (0 abort, 1 commit)
_CONTROL_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch
# A batch's head: base offset, length (of what follows), partition leader epoch, magic.
_HEAD = struct.Struct(">qiib")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LEADER_EPOCH_AT = 12
_LENGTH_FIELD_END = 12  # base offset and length: what the length does not count
_MIN_LENGTH = 49  # the header after the length field, up to and with the record count
_CRC = struct.Struct(">I")
_CRC_AT = 17  # after the magic byte; covers everything from the attributes on
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21
_CONTROL_BIT = 0x20
_NO_HEADERS: list[tuple[str, bytes | None]] = []  # (the codec never changes it)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


class RecordsError(ValueError):
    """A produced record set that cannot be stored (corrupt, not v2, bad key or header)."""


@dataclass(frozen=True, slots=True)
class ProducedBatch:
    """The records of one produced batch and its producer fields (-1: none)."""

    messages: list[OutgoingMessage]
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool


def read_batches(data: bytes | memoryview | None) -> list[ProducedBatch]:
    """Decode a Produce partition's record set (record batches v2 only); every byte must
    belong to a whole batch whose CRC matches."""
    if not data:
        raise RecordsError("an empty record set")
    # One bytes object: each batch is a view of it, and CPython ends every bytes object
    # with a NUL byte, so even a corrupt varint at the very end stops inside it.
    data = bytes(data)
    view = memoryview(data)
    batches = []
    at, end = 0, len(data)
    while at < end:
        if end - at < _HEAD.size:
            raise RecordsError("a truncated record batch")
        _, length, _, magic = _HEAD.unpack_from(data, at)
        if magic != 2:
            raise RecordsError("only record batch v2 (magic 2) is supported")
        stop = at + _LENGTH_FIELD_END + length
        if length < _MIN_LENGTH or stop > end:
            raise RecordsError("a truncated record batch")
        batches.append(_read_batch(view[at:stop]))
        at = stop
    return batches


def _read_batch(data: memoryview) -> ProducedBatch:
    try:
        batch = DefaultRecordBatch(data)
        if not batch.validate_crc():
            raise RecordsError("a record batch fails its CRC check")
        if batch.is_control_batch:
            raise RecordsError("clients may not produce control batches")
        messages = [
            OutgoingMessage(
                record.value,
                None if record.key is None else record.key.decode(),
                {name: "" if value is None else value.decode() for name, value in record.headers}
                if record.headers
                else {},
            )
            for record in batch
        ]
    except RecordsError:
        raise
    except UnicodeDecodeError:
        raise RecordsError("record keys and header values must be UTF-8 text") from None
    except Exception as exc:  # noqa: BLE001 - the codec's errors on any bad input: corrupt
        raise RecordsError(f"a corrupt record batch: {exc}") from None
    if not messages:
        raise RecordsError("an empty record batch")
    return ProducedBatch(
        messages,
        batch.producer_id,
        batch.producer_epoch,
        batch.base_sequence,
        bool(batch.is_transactional),
    )


def value_bytes(value: Any) -> bytes | None:
    """A stored value as Kafka bytes: bytes as they are, text as UTF-8, anything else
    as its compact JSON in UTF-8 (None stays a null value)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def timestamp_ms(when: datetime) -> int:
    """An aware datetime as Kafka's record timestamp: whole ms since the epoch (exact)."""
    return (when - _EPOCH) // _MS


def producer_id_of(txn: str | None) -> int:
    """The producer id a transaction's batches carry: its sequence number (``txn-<n>``)."""
    return _NO_PRODUCER if txn is None else int(txn.rpartition("-")[2])


def build_batches(entries: Sequence[FetchedEntry], offsets: Sequence[int]) -> bytes:
    """``entries`` (at ``offsets``) as record batches v2, one per run of consecutive
    entries with the same kind and transaction.

    One pass with the run's state in locals (a fetch builds up to 10,000 records here,
    on the loop): per record only its fields are read and handed to the compiled
    builder.
    """
    out = bytearray()
    builder: Any = None
    run_kind: str | None = None
    run_txn: str | None = None
    control = False
    base = 0
    when: datetime | None = None
    timestamp = 0
    for entry, offset in zip(entries, offsets, strict=True):
        kind, txn = entry.kind, entry.txn
        if builder is None or kind != run_kind or txn != run_txn:
            if builder is not None:
                out += _finish(builder, base, control)
            run_kind, run_txn, base = kind, txn, offset
            control = kind != "data"
            producer = producer_id_of(txn)
            builder = DefaultRecordBatchBuilder(
                2,  # magic
                0,  # no compression
                txn is not None,
                producer,
                0 if producer >= 0 else -1,  # producer epoch
                -1,  # no base sequence: the broker's batches, not a producer's
                sys.maxsize,  # no size limit: the caller bounds the size
            )
        if entry.publish_time != when:  # (a produced batch's entries share it)
            when = entry.publish_time
            timestamp = timestamp_ms(when)
        if control:
            key = _CONTROL_KEY.pack(0, 1 if kind == "commit" else 0)
            builder.append(offset - base, timestamp, key, _CONTROL_VALUE.pack(0, 0), [])
            continue
        value = entry.value
        properties = entry.properties
        text_key = entry.key
        builder.append(
            offset - base,
            timestamp,
            None if text_key is None else text_key.encode(),
            value if value is None or type(value) is bytes else value_bytes(value),
            [(k, v.encode()) for k, v in properties.items()] if properties else _NO_HEADERS,
        )
    if builder is not None:
        out += _finish(builder, base, control)
    return bytes(out)


def _finish(builder: Any, base: int, control: bool) -> bytearray:
    """A run's built batch at ``base``."""
    batch: bytearray = builder.build()
    # Both outside the CRC (it starts at the attributes), so set after the build: the
    # offset, and the partition leader epoch Metadata names (0; the codec writes -1).
    _BASE_OFFSET.pack_into(batch, 0, base)
    _LEADER_EPOCH.pack_into(batch, _LEADER_EPOCH_AT, 0)
    if control:
        _mark_control(batch)
    return batch


def _mark_control(batch: bytearray) -> None:
    """Set a built batch's control bit (the codec writes the attributes a producer
    sets; this one only a broker does) and its CRC again."""
    (attributes,) = _ATTRIBUTES.unpack_from(batch, _ATTRIBUTES_AT)
    _ATTRIBUTES.pack_into(batch, _ATTRIBUTES_AT, attributes | _CONTROL_BIT)
    _CRC.pack_into(batch, _CRC_AT, crc32c(memoryview(batch)[_ATTRIBUTES_AT:]))
