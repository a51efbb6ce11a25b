"""Invariant 5 on real data: snapshot recovery plus tail versus a full replay, per topic.

:func:`replay_check` opens a data directory's store directly (no engine: nothing is
reconciled and nothing times out while comparing), recovers every topic's transaction
buffer both ways and compares the two states, and checks the idempotent producers' rows
against the log. ``txnstream drill replay`` shows the result; the crash drill runs it
after its last server stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from txnstream.ledger import (
    DB_FILE,
    Catalog,
    EntryKind,
    ManagedLedger,
    NotFoundError,
    OffloadStore,
    Position,
    PostgresUrl,
    Store,
    TxnId,
    store_location,
)
from txnstream.snapshots import full_replay, recover
from txnstream.txn_buffer import TxnBuffer

from ._config import EngineConfig

__all__ = ["TopicReplay", "replay_check"]


@dataclass(frozen=True, slots=True)
class _BufferState:
    """What Invariant 5 compares between snapshot recovery and full replay."""

    last_confirmed: Position | None
    stable_position: Position | None
    open_txns: dict[TxnId, tuple[Position, Position | None, Position]]
    """txn -> (first, before_first, last)."""
    aborted: dict[TxnId, tuple[Position, Position]]
    """txn -> (last, marker). ``first`` is left out: retention clamps it legitimately."""

    @classmethod
    def of(cls, buffer: TxnBuffer) -> _BufferState:
        return cls(
            buffer.last_confirmed,
            buffer.max_read_position,
            {t: (o.first, o.before_first, o.last) for t, o in buffer.ongoing_txns.items()},
            {t: (a.last, a.marker) for t, a in buffer.aborted_txns.items()},
        )

    def differences(self, full: _BufferState, limit: int = 20) -> list[str]:
        """Human-readable differences between this (snapshot) state and ``full``."""
        out: list[str] = []
        for what, mine, theirs in (
            ("last confirmed", self.last_confirmed, full.last_confirmed),
            ("stable position", self.stable_position, full.stable_position),
        ):
            if mine != theirs:
                out.append(f"{what}: snapshot {mine}, full replay {theirs}")
        for what, a, b in (
            ("open", self.open_txns, full.open_txns),
            ("aborted", self.aborted, full.aborted),
        ):
            mine_map: dict[TxnId, Any] = dict(a)
            theirs_map: dict[TxnId, Any] = dict(b)
            for txn in sorted(mine_map.keys() | theirs_map.keys()):
                x, y = mine_map.get(txn), theirs_map.get(txn)
                if x == y:
                    continue
                if y is None:
                    out.append(f"{what} {txn}: only after snapshot recovery {_fmt(x)}")
                elif x is None:
                    out.append(f"{what} {txn}: only in full replay {_fmt(y)}")
                else:
                    out.append(f"{what} {txn}: snapshot {_fmt(x)}, full replay {_fmt(y)}")
        if len(out) > limit:
            out = [*out[:limit], f"... and {len(out) - limit} more"]
        return out


def _fmt(value: Any) -> str:
    if isinstance(value, tuple) and not isinstance(value, Position):
        return "(" + ", ".join(str(v) for v in value) + ")"
    return str(value)


@dataclass(slots=True)
class TopicReplay:
    """One topic's result of :func:`replay_check`."""

    topic: str
    from_snapshot: bool
    snapshot_position: Position | None
    snapshot_entries: int
    full_entries: int
    snapshot_seconds: float
    full_seconds: float
    open_txns: int
    aborted_txns: int
    producers: int
    differences: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """True when both recoveries agree (and producer state matches the log)."""
        return not self.differences

    @property
    def speedup(self) -> float:
        """Full replay time over snapshot recovery time."""
        return self.full_seconds / max(self.snapshot_seconds, 1e-9)


async def _producer_differences(
    ledger: ManagedLedger, last_confirmed: Position | None
) -> tuple[int, list[str]]:
    """Check idempotent-producer state against the log; returns (producers, problems).

    Producer sequences are not part of a snapshot: they live in their own table, written
    in the same SQLite transaction as the batch they describe, and both recovery paths
    load those rows. What can go wrong is a row that disagrees with the log, so each
    recorded batch must be data entries of the retained log at or below last confirmed.
    """
    rows = await Catalog(ledger.store).producers(ledger.topic_id)
    first = ledger.first_position()
    problems: list[str] = []
    for row in rows:
        producer, last_seq, first_seq, positions = (
            row.producer,
            row.last_seq,
            row.first_seq,
            row.positions,
        )
        if len(positions) != last_seq - first_seq + 1:
            problems.append(
                f"producer {producer}: sequences {first_seq}..{last_seq} but"
                f" {len(positions)} position(s)"
            )
        if positions and (last_confirmed is None or max(positions) > last_confirmed):
            problems.append(f"producer {producer}: batch beyond last confirmed {last_confirmed}")
        retained = [p for p in positions if first is not None and p >= first]
        found = {e.position: e for e in await ledger.read_positions(retained)}
        for position in retained:
            entry = found.get(position)
            if entry is None or entry.kind is not EntryKind.DATA:
                problems.append(f"producer {producer}: no data entry at {position}")
    return len(rows), problems


async def _replay_topic(
    store: Store, topic_id: int, name: str, config: EngineConfig, step: Callable[[str], None]
) -> TopicReplay:
    ledger = await ManagedLedger.open(
        store,
        topic_id,
        max_entries=config.ledger_max_entries,
        max_bytes=config.ledger_max_bytes,
        remote=OffloadStore(),  # offloaded ledgers are read by their own URLs
    )
    step(f"{name}: snapshot recovery")
    started = time.perf_counter()
    restored, info, _ = await recover(ledger)
    snapshot_seconds = time.perf_counter() - started
    step(f"{name}: full replay")
    started = time.perf_counter()
    replayed, count = await full_replay(ledger)
    full_seconds = time.perf_counter() - started
    mine, full = _BufferState.of(restored), _BufferState.of(replayed)
    producers, problems = await _producer_differences(ledger, full.last_confirmed)
    return TopicReplay(
        name,
        info.from_snapshot,
        info.position,
        info.entries_replayed,
        count,
        snapshot_seconds,
        full_seconds,
        len(full.open_txns),
        len(full.aborted),
        producers,
        mine.differences(full) + problems,
    )


async def replay_check(
    data: Path | str,
    *,
    on_topics: Callable[[int], None] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> list[TopicReplay]:
    """Compare snapshot recovery with a full replay for every topic of ``data``: a data
    directory or a ``postgresql://`` store URL.

    Run it on a store no server is using: like any open, it starts a new ledger per
    topic (and on PostgreSQL it takes the store's lease meanwhile). For a progress
    display, ``on_topics`` is told how many topics there are and ``on_step`` what is
    being done. Raises :class:`NotFoundError` if a directory holds no txnstream database.
    Costs two replays of every retained log.
    """
    config = EngineConfig()
    location = store_location(data)
    store: Store
    if isinstance(location, PostgresUrl):
        from txnstream.ledger import PgStore  # (imports psycopg: only when used)

        store = await PgStore.open(location.url, max_pending_entries=config.max_pending_entries)
    else:
        db = location / DB_FILE
        if not db.is_file():
            raise NotFoundError(f"no txnstream database at {db}")
        store = await Store.open(db, max_pending_entries=config.max_pending_entries)
    try:
        rows = sorted(await Catalog(store).topics(), key=lambda row: row.name)
        if on_topics is not None:
            on_topics(len(rows))
        step = on_step or (lambda _: None)
        return [await _replay_topic(store, r.topic_id, r.name, config, step) for r in rows]
    finally:
        await store.close()
