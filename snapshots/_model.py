"""Snapshot format: a transaction buffer's state at a position, versioned and checksummed.

Resume rule: a snapshot taken at ``position`` (the buffer's last confirmed entry then)
holds the exact buffer state after applying every entry up to and including
``position``; recovery restores it and replays the entries strictly *after* it.

Large aborted sets are split: aborted transactions (in ABORT-marker order, an append-only
sequence) are sealed into immutable segments of :data:`SEGMENT_SIZE`; a snapshot stores
only the index of sealed segments plus the unsealed tail, so a periodic snapshot writes
O(segment size + segments) bytes however many aborted transactions are retained.

Format versions, per record (both are read; 2 is written):

1. the msgpack body as is; an aborted transaction is ``[seq, [l, e] first, [l, e] last,
   [l, e] marker, [l, e] or nil stable]``, a segment reference ``[id, count, crc,
   [l, e] last marker, [l, e] max last]``;
2. the body compressed with zlib at level 1, which more than halves a large snapshot or
   segment (positions, counters and sequence numbers repeat their high bytes) for ~0.4 ms
   per 50 KB; an aborted transaction is its nine integers flat (the buffer's
   :data:`~txn_buffer.AbortedRow`, packed as is), a segment reference ``[id, count, crc,
   l, e, l, e]``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from txnstream.ledger import IncompatibleSnapshotError, Position, SnapshotError, TxnId, pack, unpack
from txnstream.txn_buffer import AbortedRow, OpenTxn

FORMAT_VERSION = 2
SEGMENT_SIZE = 1024
_LEVEL = 1  # zlib's fastest: level 6 saves ~3% more at five times the time


def _pos(position: Position | None) -> list[int] | None:
    return None if position is None else [position.ledger_id, position.entry_id]


def _unpos(value: list[int] | None) -> Position | None:
    return None if value is None else Position(value[0], value[1])


def _req(value: list[int] | None) -> Position:
    if value is None:
        raise SnapshotError("a required position is missing")
    return Position(value[0], value[1])


def decode_aborted_many(items: list[list[Any]], version: int) -> list[AbortedRow]:
    """A segment's or tail's aborted transactions, in format ``version``, as the plain
    rows the buffer retains (the buffer checks they are integers in marker order)."""
    try:
        if version == 1:
            out = [
                (seq, *first, *last, *marker, *(_NO_POSITION if stable is None else stable))
                for seq, first, last, marker, stable in items
            ]
        else:
            out = list(map(tuple, items))
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"malformed aborted transaction: {exc}") from exc
    if out and set(map(len, out)) != {9}:
        raise SnapshotError("malformed aborted transaction in a segment")
    return out


_NO_POSITION = (None, None)


def seal(body: Any) -> bytes:
    """Compress a msgpack-able body laid out in format 2, and wrap it with the version
    and a CRC32 of what is stored."""
    payload = zlib.compress(pack(body), _LEVEL)
    return pack([FORMAT_VERSION, zlib.crc32(payload), payload])


def unseal(data: bytes) -> tuple[int, Any]:
    """(format version, body) of a sealed record, its checksum checked; raises
    :class:`SnapshotError` on any damage."""
    try:
        version, crc, payload = unpack(data)
    except Exception as exc:
        raise SnapshotError(f"damaged snapshot record: {exc}") from exc
    if version not in (1, 2):
        raise IncompatibleSnapshotError(f"snapshot format {version!r} is not 1 or 2")
    if not isinstance(payload, bytes) or zlib.crc32(payload) != crc:
        raise SnapshotError("snapshot checksum mismatch")
    try:
        return version, unpack(zlib.decompress(payload) if version == 2 else payload)
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
                    (s.segment_id, s.count, s.crc, *s.last_marker, *s.max_last)
                    for s in self.segments
                ],
                self.tail,
            ]
        )

    @classmethod
    def decode(cls, data: bytes) -> TxnBufferSnapshot:
        """Inverse of :meth:`encode`; raises :class:`SnapshotError` if damaged."""
        version, body = unseal(data)
        try:
            position, max_read, ongoing, segments, tail = body
            open_txns: dict[TxnId, OpenTxn] = {}
            for seq, first, before, last in ongoing:
                open_txns[TxnId(seq)] = OpenTxn(_req(first), _unpos(before), _req(last))
            if version == 1:
                refs = [
                    SegmentRef(segment_id, count, crc, _req(last_marker), _req(max_last))
                    for segment_id, count, crc, last_marker, max_last in segments
                ]
            else:
                refs = [
                    SegmentRef(segment_id, count, crc, Position(ml, me), Position(xl, xe))
                    for segment_id, count, crc, ml, me, xl, xe in segments
                ]
            return cls(
                version,
                _unpos(position),
                _unpos(max_read),
                open_txns,
                refs,
                decode_aborted_many(tail, version),
            )
        except (TypeError, ValueError, IndexError) as exc:
            raise SnapshotError(f"malformed snapshot: {exc}") from exc
