"""The snapshot record format: compressed when that pays, both formats read back."""

from __future__ import annotations

import zlib
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import IncompatibleSnapshotError, Position, SnapshotError, pack, unpack
from snapshots import FORMAT_VERSION, SegmentRef, TxnBufferSnapshot
from snapshots._model import seal, unseal

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


def test_a_large_snapshot_is_stored_compressed_at_under_half_the_bytes() -> None:
    snapshot = _snapshot(aborted=1_000, segments=1_000)
    data = snapshot.encode()
    version, _, stored = unpack(data)
    assert version == 2
    plain = pack([1, 0, zlib.decompress(stored)])
    assert len(data) < len(plain) / 2
    assert TxnBufferSnapshot.decode(data) == snapshot


def test_a_small_snapshot_stays_uncompressed() -> None:
    snapshot = _snapshot(aborted=3, segments=0)
    data = snapshot.encode()
    assert unpack(data)[0] == 1
    assert TxnBufferSnapshot.decode(data) == replace(snapshot, format_version=1)


@given(
    st.recursive(
        st.integers(-(2**63), 2**64 - 1) | st.binary() | st.none(), st.lists, max_leaves=200
    )
)
def test_any_body_reads_back_in_either_format(body: object) -> None:
    assert unseal(seal(body)) == body
    payload = pack(body)
    assert unseal(pack([1, zlib.crc32(payload), payload])) == body


def test_unknown_formats_and_damage_are_refused() -> None:
    payload = pack([1, 2, 3])
    with pytest.raises(IncompatibleSnapshotError, match="format 3"):
        unseal(pack([3, zlib.crc32(payload), payload]))
    compressed = zlib.compress(b"\xc1")  # not msgpack once inflated
    with pytest.raises(SnapshotError, match="damaged snapshot body"):
        unseal(pack([2, zlib.crc32(compressed), compressed]))
    with pytest.raises(SnapshotError, match="checksum"):
        unseal(pack([2, 0, compressed]))
