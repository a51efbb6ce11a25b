"""The listener's record batch codec (aiokafka's, compiled) against kafka-python's pure
Python one: a record set either writes decodes to the same records, and the batches the
listener builds for a fetch are the bytes kafka-python's builder writes for them."""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from txnstream.api import FetchedEntry, Position
from txnstream.api.kafka._records import (
    RecordsError,
    build_batches,
    producer_id_of,
    read_batches,
    timestamp_ms,
    value_bytes,
)

pytestmark = pytest.mark.timeout(120)

_TEXT = st.text(max_size=12)
_RECORD = st.tuples(
    st.none() | st.binary(max_size=40),  # value
    st.none() | _TEXT,  # key
    st.lists(st.tuples(_TEXT, _TEXT), max_size=3, unique_by=lambda h: h[0]),  # headers
    st.integers(0, 10_000),  # timestamp delta (ms)
)
_BATCH = st.tuples(
    st.lists(_RECORD, min_size=1, max_size=20),
    st.integers(-1, 2**62),  # producer id
    st.integers(-1, 32767),  # epoch
    st.integers(-1, 2**31 - 1000),  # base sequence
    st.booleans(),  # transactional
)
_SETTINGS = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def _kafka_python_batch(batch: tuple, start_ms: int = 1_700_000_000_000) -> bytes:
    records, producer_id, epoch, sequence, transactional = batch
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        batch_size=1 << 30,
    )
    for i, (value, key, headers, delta) in enumerate(records):
        builder.append(
            i,
            timestamp=start_ms + delta,
            key=None if key is None else key.encode(),
            value=value,
            headers=[(name, text.encode()) for name, text in headers],
        )
    return bytes(builder.build())


@_SETTINGS
@given(st.lists(_BATCH, min_size=1, max_size=3))
def test_produced_batches_decode_as_kafka_python_reads_them(batches: list[tuple]) -> None:
    data = b"".join(_kafka_python_batch(b) for b in batches)
    produced = read_batches(data)
    reference = MemoryRecords(data)
    assert len(produced) == len(batches)
    for batch in produced:
        expected = reference.next_batch()
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
            expected.producer_id,
            expected.producer_epoch,
            expected.base_sequence,
        )
        assert batch.transactional == bool(expected.is_transactional)
        assert [(m.value, m.key, m.properties) for m in batch.messages] == [
            (
                None if r.value is None else bytes(r.value),
                None if r.key is None else bytes(r.key).decode(),
                {name: bytes(v).decode() for name, v in r.headers},
            )
            for r in expected
        ]
    assert reference.next_batch() is None


_KIND = st.sampled_from(["data", "data", "data", "commit", "abort"])
_ENTRY = st.tuples(
    _KIND,
    st.none() | st.integers(1, 2**40),  # the transaction's sequence number
    st.none() | _TEXT,  # key
    st.none() | st.binary(max_size=30) | _TEXT | st.dictionaries(_TEXT, st.integers(), max_size=2),
    st.dictionaries(_TEXT, _TEXT, max_size=2),  # properties
    st.integers(0, 3),  # ms after the previous entry
)


def _entries(specs: list[tuple]) -> list[FetchedEntry]:
    at = datetime(2026, 5, 1, tzinfo=UTC)
    out = []
    for i, (kind, txn, key, value, properties, step) in enumerate(specs):
        at += timedelta(milliseconds=step)
        if kind != "data":
            txn, key, value, properties = txn or 7, None, None, {}
        out.append(
            FetchedEntry(
                Position(3, i),
                kind,
                None if txn is None else f"txn-{txn}",
                key,
                value,
                properties,
                at,
            )
        )
    return out


class _ControlBuilder(DefaultRecordBatchBuilder):  # type: ignore[misc]
    """kafka-python's builder, which writes the control bit when asked (as a broker)."""

    def __init__(self, control: bool, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.control = control

    def _get_attributes(self, include_compression_type: bool = True) -> int:
        attributes: int = super()._get_attributes(include_compression_type)
        return attributes | (self.CONTROL_MASK if self.control else 0)


def _kafka_python_fetch(entries: list[FetchedEntry], first_offset: int) -> bytes:
    """What the listener's fetch path wrote with kafka-python's builder (before aiokafka's)."""
    out = bytearray()
    start = 0
    while start < len(entries):
        end = start + 1
        while (
            end < len(entries)
            and entries[end].kind == entries[start].kind
            and entries[end].txn == entries[start].txn
        ):
            end += 1
        run = entries[start:end]
        control = run[0].kind != "data"
        producer = producer_id_of(run[0].txn)
        builder = _ControlBuilder(
            control,
            magic=2,
            compression_type=0,
            is_transactional=run[0].txn is not None,
            producer_id=producer,
            producer_epoch=0 if producer >= 0 else -1,
            base_sequence=-1,
            batch_size=1 << 62,
        )
        for delta, entry in enumerate(run):
            stamp = timestamp_ms(entry.publish_time)
            if control:
                key = struct.pack(">hh", 0, 1 if entry.kind == "commit" else 0)
                builder.append(delta, stamp, key, struct.pack(">hi", 0, 0), [])
            else:
                builder.append(
                    delta,
                    stamp,
                    None if entry.key is None else entry.key.encode(),
                    value_bytes(entry.value),
                    [(k, v.encode()) for k, v in entry.properties.items()],
                )
        batch = builder.build()
        struct.pack_into(">q", batch, 0, first_offset + start)
        out += batch
        start = end
    return bytes(out)


@_SETTINGS
@given(st.lists(_ENTRY, min_size=1, max_size=30), st.integers(0, 2**40))
def test_fetched_batches_are_the_bytes_kafka_python_writes(specs: list[tuple], first: int) -> None:
    entries = _entries(specs)
    built = build_batches(entries, range(first, first + len(entries)))
    assert built == _kafka_python_fetch(entries, first)
    # and they read back as the entries, control batches flagged
    records = MemoryRecords(built)
    offset = first
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        for record in batch:
            entry = entries[offset - first]
            assert record.offset == offset
            assert bool(batch.is_control_batch) == (entry.kind != "data")
            assert record.timestamp == timestamp_ms(entry.publish_time)
            if entry.kind == "data":
                assert record.value == value_bytes(entry.value)
            offset += 1
    assert offset == first + len(entries)


def test_a_timestamp_is_exact_to_the_millisecond() -> None:
    # 2**53 / 1000 is past float precision for .timestamp() * 1000 plus truncation
    for ms in (0, 1, 999, 1_700_000_000_001, 1_764_201_599_999, 253_402_300_799_999):
        when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
        assert timestamp_ms(when) == ms


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda b: b[:-1], "truncated"),
        (lambda b: b + b"\x00" * 5, "truncated"),  # trailing bytes that are no batch
        (lambda b: b + b"\x00" * 20, "magic"),
        (lambda b: b[:16] + b"\x01" + b[17:], "magic"),
        (lambda b: b[:-1] + bytes([b[-1] ^ 0xFF]), "CRC"),
        (lambda b: b[:8] + struct.pack(">i", 10) + b[12:], "truncated"),  # a length too small
        (lambda b: b[:8] + struct.pack(">i", 1 << 30) + b[12:], "truncated"),  # too large
    ],
)
def test_a_damaged_record_set_is_refused_with_a_reason(
    damage: Callable[[bytes], bytes], why: str
) -> None:
    good = _kafka_python_batch(([(b"v", "k", [("h", "x")], 0)] * 3, 5, 0, 0, False))
    read_batches(good)  # (intact: fine)
    with pytest.raises(RecordsError, match=why):
        read_batches(damage(good))


def test_a_record_whose_lengths_lie_is_refused_not_read_past_its_batch() -> None:
    """A batch with a valid CRC whose record claims more bytes than the batch holds."""
    from crc32c import crc32c

    good = bytearray(_kafka_python_batch(([(b"value", None, [], 0)], -1, -1, -1, False)))
    good[61 + 1 + 1 + 1 + 1 + 1] = 0x7E  # the value's length varint: 63, past the end
    struct.pack_into(">I", good, 17, crc32c(bytes(good[21:])))
    with pytest.raises(RecordsError, match="corrupt"):
        read_batches(bytes(good))
    good[61 + 1 + 1 + 1 + 1] = 0x02  # the key's length: 1 (a key of one byte, then junk)
    struct.pack_into(">I", good, 17, crc32c(bytes(good[21:])))
    with pytest.raises(RecordsError):
        read_batches(bytes(good))
