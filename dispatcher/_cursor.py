"""Cursor: a subscription's durable acknowledgement state.

``mark_delete`` is Pulsar's mark-delete position: every entry at or below it is
acknowledged (None: nothing is). ``acked`` holds the positions acknowledged individually
above it; the mark-delete position advances over them as the gaps close.
"""

from __future__ import annotations

from sortedcontainers import SortedSet

from txnstream.ledger import ManagedLedger, Position, pack, unpack


class Cursor:
    """Mark-delete position plus individually acknowledged positions above it."""

    __slots__ = ("acked", "mark_delete")

    def __init__(self, mark_delete: Position | None = None, acked: list[Position] | None = None):
        self.mark_delete = mark_delete
        self.acked: SortedSet = SortedSet(acked or ())

    def is_acked(self, position: Position) -> bool:
        """True if ``position`` is acknowledged."""
        md = self.mark_delete
        return (md is not None and position <= md) or position in self.acked

    def ack(self, position: Position, ledger: ManagedLedger) -> None:
        """Acknowledge one position and advance the mark-delete position if it can."""
        if not self.is_acked(position):
            self.acked.add(position)
            self._advance(ledger)

    def ack_many(self, positions: list[Position], ledger: ManagedLedger) -> None:
        """:meth:`ack` for many positions (ascending), advancing once."""
        md = self.mark_delete
        if md is not None:
            positions = [p for p in positions if p > md]
        if positions:
            self.acked.update(positions)
            self._advance(ledger)

    def ack_cumulative(self, position: Position, ledger: ManagedLedger) -> None:
        """Acknowledge everything at or below ``position``."""
        if self.mark_delete is None or position > self.mark_delete:
            self.mark_delete = position
            acked = self.acked
            if acked and acked[0] <= position:
                del acked[: acked.bisect_right(position)]
            self._advance(ledger)

    def reset(self, mark_delete: Position | None) -> None:
        """Forget individual acks; everything at or below ``mark_delete`` is acknowledged."""
        self.mark_delete = mark_delete
        self.acked.clear()

    def _advance(self, ledger: ManagedLedger) -> None:
        acked = self.acked
        while acked:
            md = self.mark_delete
            following = ledger.first_position() if md is None else ledger.next_position(md)
            if following is None or following != acked[0]:
                return
            self.mark_delete = following
            acked.pop(0)

    def encode(self) -> bytes:
        """Durable form (msgpack)."""
        md = self.mark_delete
        return pack(
            [
                None if md is None else [md.ledger_id, md.entry_id],
                [[p.ledger_id, p.entry_id] for p in self.acked],
            ]
        )

    @classmethod
    def decode(cls, data: bytes) -> Cursor:
        """Inverse of :meth:`encode`."""
        md, acked = unpack(data)
        return cls(
            None if md is None else Position(*md),
            [Position(*p) for p in acked],
        )
