"""The snapshot record format: format 2 is compressed and flat, format 1 is still read."""

from __future__ import annotations

import zlib
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from snapshot_format1 import encode_v1

from txnstream.ledger import IncompatibleSnapshotError, Position, SnapshotError, TxnId, pack, unpack
from txnstream.snapshots import FORMAT_VERSION, SegmentRef, TxnBufferSnapshot
from txnstream.snapshots._model import unseal
from txnstream.txn_buffer import OpenTxn

LEDGER = 50_000


def _at(n: int) -> Position:
    return Position(n // LEDGER, n % LEDGER)


def _snapshot(aborted: int, segments: int) -> TxnBufferSnapshot:
    """What a topic with ``segments`` sealed segments and ``aborted`` unsealed aborted
    transactions (one data entry and its marker each) snapshots."""
    base = 2048 * segments
    refs = [
        SegmentRef(i, 1024, zlib.crc32(str(i).encode()), _at(2048 * i + 2047), _at(2048 * i + 2046))
        for i in range(segments)
    ]
    tail = [
        (5_000_000 + k, *_at(base + 2 * k), *_at(base + 2 * k), *_at(base + 2 * k + 1), *_at(base))
        for k in range(aborted)
    ]
    last = _at(base + 2 * aborted)
    return TxnBufferSnapshot(FORMAT_VERSION, last, last, {}, refs, tail)  # type: ignore[arg-type]


def test_a_large_snapshot_takes_under_half_the_bytes_of_format_1() -> None:
    snapshot = _snapshot(aborted=1_000, segments=1_000)
    data = snapshot.encode()
    assert unpack(data)[0] == 2
    assert len(data) < len(encode_v1(snapshot)) / 2
    assert TxnBufferSnapshot.decode(data) == snapshot


@given(
    st.integers(0, 40),
    st.integers(0, 40),
    st.dictionaries(st.integers(0, 2**40), st.tuples(*[st.integers(0, 2**33)] * 4)),
)
def test_a_snapshot_reads_back_the_same_from_either_format(
    aborted: int, segments: int, ongoing: dict[int, tuple[int, int, int, int]]
) -> None:
    snapshot = replace(
        _snapshot(aborted, segments),
        ongoing={
            TxnId(seq): OpenTxn(Position(a, b), Position(b, a), Position(c, d))
            for seq, (a, b, c, d) in ongoing.items()
        },
    )
    assert TxnBufferSnapshot.decode(snapshot.encode()) == snapshot
    assert TxnBufferSnapshot.decode(encode_v1(snapshot)) == replace(snapshot, format_version=1)


def test_unknown_formats_and_damage_are_refused() -> None:
    payload = pack([1, 2, 3])
    with pytest.raises(IncompatibleSnapshotError, match="format 3 is not 1 or 2"):
        unseal(pack([3, zlib.crc32(payload), payload]))
    compressed = zlib.compress(b"\xc1")  # not msgpack once inflated
    with pytest.raises(SnapshotError, match="damaged snapshot body"):
        unseal(pack([2, zlib.crc32(compressed), compressed]))
    with pytest.raises(SnapshotError, match="checksum"):
        unseal(pack([2, 0, compressed]))
