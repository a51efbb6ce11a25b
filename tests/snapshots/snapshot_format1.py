"""What format 1 wrote (before session 12's format 2), to test that it is still read."""

from __future__ import annotations

import zlib
from typing import Any

from txnstream.ledger import Position, pack
from txnstream.snapshots import TxnBufferSnapshot
from txnstream.txn_buffer import AbortedRow


def seal_v1(body: object) -> bytes:
    """A format 1 record: the msgpack body as is."""
    payload = pack(body)
    return pack([1, zlib.crc32(payload), payload])


def _pos(position: Position | None) -> list[int] | None:
    return None if position is None else [position.ledger_id, position.entry_id]


def row_v1(row: AbortedRow) -> list[Any]:
    """An aborted transaction in format 1's nested layout."""
    seq, fl, fe, ll, le, ml, me, sl, se = row
    return [seq, [fl, fe], [ll, le], [ml, me], None if sl is None else [sl, se]]


def segment_v1(rows: list[AbortedRow]) -> bytes:
    """A sealed segment in format 1."""
    return seal_v1([row_v1(row) for row in rows])


def encode_v1(snapshot: TxnBufferSnapshot) -> bytes:
    """:meth:`TxnBufferSnapshot.encode` as format 1 wrote it."""
    return seal_v1(
        [
            _pos(snapshot.position),
            _pos(snapshot.max_read_position),
            [
                [t.seq, _pos(o.first), _pos(o.before_first), _pos(o.last)]
                for t, o in snapshot.ongoing.items()
            ],
            [
                [s.segment_id, s.count, s.crc, _pos(s.last_marker), _pos(s.max_last)]
                for s in snapshot.segments
            ],
            [row_v1(row) for row in snapshot.tail],
        ]
    )
