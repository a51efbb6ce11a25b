"""Record batches v2 in and out, with kafka-python's ``kafka.record`` codec.

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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaError
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from txnstream.api import FetchedEntry, OutgoingMessage

_NO_PRODUCER = -1
_CONTROL_KEY = struct.Struct(">hh")  # version 0, type (0 abort, 1 commit)
_CONTROL_VALUE = struct.Struct(">hi")  # version 0, coordinator epoch
_BASE_OFFSET = struct.Struct(">q")


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
    """Decode a Produce partition's record set (record batches v2 only)."""
    if not data:
        raise RecordsError("an empty record set")
    try:
        records = MemoryRecords(bytes(data))
        batches = []
        while (batch := records.next_batch()) is not None:
            if batch.magic != 2:
                raise RecordsError("only record batch v2 (magic 2) is supported")
            if batch.is_control_batch:
                raise RecordsError("clients may not produce control batches")
            if not batch.validate_crc():
                raise RecordsError("a record batch fails its CRC check")
            messages = [_message(record) for record in batch]
            if not messages:
                raise RecordsError("an empty record batch")
            batches.append(
                ProducedBatch(
                    messages,
                    batch.producer_id,
                    batch.producer_epoch,
                    batch.base_sequence,
                    bool(batch.is_transactional),
                )
            )
    except (KafkaError, ValueError, IndexError, struct.error) as exc:
        if isinstance(exc, RecordsError):
            raise
        raise RecordsError(f"a corrupt record set: {exc}") from None
    if not batches:
        raise RecordsError("an empty record set")
    return batches


def _message(record: Any) -> OutgoingMessage:
    key = record.key
    try:
        text_key = None if key is None else bytes(key).decode()
        properties = {
            str(name): "" if value is None else bytes(value).decode()
            for name, value in record.headers
        }
    except UnicodeDecodeError:
        raise RecordsError("record keys and header values must be UTF-8 text") from None
    value = record.value
    return OutgoingMessage(None if value is None else bytes(value), text_key, properties)


def value_bytes(value: Any) -> bytes | None:
    """A stored value as Kafka bytes: bytes as they are, text as UTF-8, anything else
    as its compact JSON in UTF-8 (None stays a null value)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


class _Builder(DefaultRecordBatchBuilder):  # type: ignore[misc]
    """The codec's builder, which writes the attributes a broker adds: the control bit."""

    __slots__ = ("_control",)

    def __init__(self, producer_id: int, transactional: bool, control: bool) -> None:
        super().__init__(
            magic=2,
            compression_type=0,
            is_transactional=transactional,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=-1,
            batch_size=1 << 62,  # the caller bounds the size
        )
        self._control = control

    def _get_attributes(self, include_compression_type: bool = True) -> int:
        attributes: int = super()._get_attributes(include_compression_type)
        return attributes | (self.CONTROL_MASK if self._control else 0)


def _runs(entries: Sequence[FetchedEntry]) -> Iterator[Sequence[FetchedEntry]]:
    """Consecutive entries with the same kind and transaction."""
    start = 0
    for i in range(1, len(entries) + 1):
        if (
            i == len(entries)
            or entries[i].kind != entries[start].kind
            or entries[i].txn != entries[start].txn
        ):
            yield entries[start:i]
            start = i


def producer_id_of(txn: str | None) -> int:
    """The producer id a transaction's batches carry: its sequence number (``txn-<n>``)."""
    return _NO_PRODUCER if txn is None else int(txn.rpartition("-")[2])


def build_batches(entries: Sequence[FetchedEntry], offsets: Sequence[int]) -> bytes:
    """``entries`` (at ``offsets``) as record batches v2, one per run of kind and txn."""
    out = bytearray()
    at = 0
    for run in _runs(entries):
        first = run[0]
        control = first.kind != "data"
        producer = producer_id_of(first.txn)
        builder = _Builder(producer, first.txn is not None, control)
        base = offsets[at]
        for entry, offset in zip(run, offsets[at : at + len(run)], strict=True):
            timestamp = int(entry.publish_time.timestamp() * 1000)
            if control:
                key = _CONTROL_KEY.pack(0, 1 if entry.kind == "commit" else 0)
                builder.append(offset - base, timestamp, key, _CONTROL_VALUE.pack(0, 0), [])
            else:
                headers = [(k, v.encode()) for k, v in entry.properties.items()]
                key_bytes = None if entry.key is None else entry.key.encode()
                builder.append(
                    offset - base, timestamp, key_bytes, value_bytes(entry.value), headers
                )
        batch = builder.build()
        _BASE_OFFSET.pack_into(batch, 0, base)  # outside the CRC, which starts later
        out += batch
        at += len(run)
    return bytes(out)
