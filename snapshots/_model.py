"""Snapshot format: a transaction buffer's state at a position, versioned and checksummed.

Resume rule: a snapshot taken at ``position`` (the buffer's last confirmed entry then)
holds the exact buffer state after applying every entry up to and including
``position``; recovery restores it and replays the entries strictly *after* it.

Large aborted sets are split: aborted transactions (in ABORT-marker order, an append-only
sequence) are sealed into immutable segments of :data:`SEGMENT_SIZE`; a snapshot stores
only the index of sealed segments plus the unsealed tail, so a periodic snapshot writes
O(segment size + segments) bytes however many aborted transactions are retained.

Format versions, per record: 1 stores the msgpack body as is; 2 stores it compressed
with zlib at level 1, which more than halves a large snapshot or segment (positions,
counters and sequence numbers repeat their high bytes) for ~0.4 ms per 50 KB. A body
under :data:`_COMPRESS_FROM` bytes, or one that does not shrink, is still written as 1.
Both are read.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from ledger import IncompatibleSnapshotError, Position, SnapshotError, TxnId, pack, unpack
from txn_buffer import AbortedRow, OpenTxn

FORMAT_VERSION = 2
SEGMENT_SIZE = 1024
_READABLE = (1, 2)
_LEVEL = 1  # zlib's fastest: level 6 saves ~3% more at five times the time
_COMPRESS_FROM = 512  # bytes of body: below, zlib's header outweighs what it saves


def _pos(position: Position | None) -> list[int] | None:
    return None if position is None else [position.ledger_id, position.entry_id]


def _unpos(value: list[int] | None) -> Position | None:
    return None if value is None else Position(value[0], value[1])


def _req(value: list[int] | None) -> Position:
    if value is None:
        raise SnapshotError("a required position is missing")
    return Position(value[0], value[1])


def encode_aborted(aborted: AbortedRow) -> list[Any]:
    """One aborted transaction as a compact list."""
    seq, fl, fe, ll, le, ml, me, sl, se = aborted
    return [seq, [fl, fe], [ll, le], [ml, me], None if sl is None else [sl, se]]


def decode_aborted_many(items: list[list[Any]]) -> list[AbortedRow]:
    """Inverse of :func:`encode_aborted` for a whole segment, in one comprehension, as
    the plain rows the buffer retains."""
    try:
        out = [
            (seq, *first, *last, *marker, *(_NO_POSITION if stable is None else stable))
            for seq, first, last, marker, stable in items
        ]
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"malformed aborted transaction: {exc}") from exc
    if out and set(map(len, out)) != {9}:
        raise SnapshotError("malformed aborted transaction in a segment")
    return out


_NO_POSITION = (None, None)


def seal(body: Any) -> bytes:
    """Wrap a msgpack-able body with its format version and a CRC32 of what is stored:
    compressed (format 2) when that makes it smaller."""
    payload, version = pack(body), 1
    if len(payload) >= _COMPRESS_FROM:
        compressed = zlib.compress(payload, _LEVEL)
        if len(compressed) < len(payload):
            payload, version = compressed, FORMAT_VERSION
    return pack([version, zlib.crc32(payload), payload])


def unseal(data: bytes) -> Any:
    """Check version and checksum; raises :class:`SnapshotError` on any damage."""
    return _unseal(data)[1]


def _unseal(data: bytes) -> tuple[int, Any]:
    """(format version, body) of a sealed record."""
    try:
        version, crc, payload = unpack(data)
    except Exception as exc:
        raise SnapshotError(f"damaged snapshot record: {exc}") from exc
    if version not in _READABLE:
        raise IncompatibleSnapshotError(
            f"snapshot format {version!r} is not one of {', '.join(map(str, _READABLE))}"
        )
    if not isinstance(payload, bytes) or zlib.crc32(payload) != crc:
        raise SnapshotError("snapshot checksum mismatch")
    try:
        return version, unpack(zlib.decompress(payload) if version >= 2 else payload)
    except Exception as exc:
        raise SnapshotError(f"damaged snapshot body: {exc}") from exc


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """A sealed segment of aborted transactions, as named by a snapshot's index."""

    segment_id: int
    count: int
    crc: int
    last_marker: Position
    max_last: Position
    """The newest data position in the segment: once retention passes it, drop it."""


@dataclass(frozen=True, slots=True)
class TxnBufferSnapshot:
    """A transaction buffer's state after applying every entry up to ``position``."""

    format_version: int
    position: Position | None
    max_read_position: Position | None
    ongoing: dict[TxnId, OpenTxn]
    segments: list[SegmentRef]
    tail: list[AbortedRow]

    def encode(self) -> bytes:
        """Durable form, with version and checksum."""
        return seal(
            [
                _pos(self.position),
                _pos(self.max_read_position),
                [
                    [t.seq, _pos(o.first), _pos(o.before_first), _pos(o.last)]
                    for t, o in self.ongoing.items()
                ],
                [
                    [s.segment_id, s.count, s.crc, _pos(s.last_marker), _pos(s.max_last)]
                    for s in self.segments
                ],
                [encode_aborted(a) for a in self.tail],
            ]
        )

    @classmethod
    def decode(cls, data: bytes) -> TxnBufferSnapshot:
        """Inverse of :meth:`encode`; raises :class:`SnapshotError` if damaged."""
        version, body = _unseal(data)
        try:
            position, max_read, ongoing, segments, tail = body
            open_txns: dict[TxnId, OpenTxn] = {}
            for seq, first, before, last in ongoing:
                open_txns[TxnId(seq)] = OpenTxn(_req(first), _unpos(before), _req(last))
            refs = [
                SegmentRef(segment_id, count, crc, _req(last_marker), _req(max_last))
                for segment_id, count, crc, last_marker, max_last in segments
            ]
            return cls(
                version,
                _unpos(position),
                _unpos(max_read),
                open_txns,
                refs,
                decode_aborted_many(tail),
            )
        except (TypeError, ValueError, IndexError) as exc:
            raise SnapshotError(f"malformed snapshot: {exc}") from exc
