"""A coordinator on a real store with two real topics, as the engine wires them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from txnstream.ledger import (
    ManagedLedger,
    Position,
    Store,
    WriteBatch,
    encode_value,
    now_ms,
)
from txnstream.txn_buffer import Coordinator, Topic, TxnBuffer, TxnRecord

TOPICS = ("a", "b")
LONG = 60.0  # a timeout no test reaches


class Harness:
    """A store, two topics and a coordinator on one data file; reopenable."""

    def __init__(
        self,
        path: Path,
        ended_retention: float = 3600.0,
        synchronous: str = "FULL",
        **limits: int,
    ) -> None:
        self.path = path
        self.limits = limits  # ended_in_memory, outcomes_kept
        self.ended_retention = ended_retention
        self.synchronous = synchronous
        self.ended: list[tuple[str, bool]] = []

    async def open(self) -> Coordinator:
        self.store = store = await Store.open(
            self.path, synchronous=self.synchronous, max_pending_entries=1000
        )
        self.topics: dict[str, Topic] = {}
        fresh = not await store.read("SELECT 1 FROM ledgers")
        batch = WriteBatch()
        for topic_id, name in enumerate(TOPICS):
            if fresh:
                ledger = ManagedLedger.create(
                    store, batch, topic_id, max_entries=1000, max_bytes=1 << 20
                )
            else:
                ledger = await ManagedLedger.open(
                    store, topic_id, max_entries=1000, max_bytes=1 << 20
                )
            self.topics[name] = Topic(name, topic_id, ledger, TxnBuffer(), {}, now_ms())
        await store.write(batch)
        self.coordinator = Coordinator(
            store,
            self.topics.get,
            default_timeout=LONG,
            max_timeout=2 * LONG,
            ended_retention=self.ended_retention,
            **self.limits,
        )
        self.coordinator.on_ended = lambda r, committed: self.ended.append(
            (str(r.txn_id), committed)
        )
        await self.coordinator.load()
        return self.coordinator

    async def reopen(self) -> Coordinator:
        """Close the store (what is queued gets written) and open everything again."""
        await self.store.close()
        return await self.open()

    async def close_cleanly(self) -> None:
        """What a clean engine close writes: the rows of open transactions without one."""
        batch = WriteBatch()
        self.coordinator.persist_open(batch)
        await self.store.write(batch)

    async def send(self, txn: TxnRecord, topic: str, value: Any = 0) -> Position:
        """A transactional append, as the engine makes it."""
        record = self.coordinator.check_open(txn.txn_id)
        batch = WriteBatch()
        self.coordinator.register_topic(batch, record, topic)
        (position,) = self.topics[topic].prepare_data(
            batch, [(None, encode_value(value), {})], record.txn_id
        )
        await self.store.write(batch)
        return position

    async def log(self, topic: str) -> list[tuple[str, int | None]]:
        """The topic's entries as ``(kind, txn seq)``."""
        await self.store.flush()
        entries = await self.topics[topic].ledger.read(Position(0, 0), Position(99, 0), 10_000)
        return [(e.kind.label, None if e.txn_id is None else e.txn_id.seq) for e in entries]

    async def rows(self) -> dict[int, tuple[str, int]]:
        """Durable ``txns`` rows: seq -> (state, fenced)."""
        await self.store.flush()
        rows = await self.store.read("SELECT seq, state, fenced FROM txns")
        return {seq: (state, fenced) for seq, state, fenced in rows}

    async def everything(self) -> tuple[Any, ...]:
        """A fingerprint of the coordinator's and the log's state."""
        coordinator = self.coordinator
        return (
            [(r.txn_id, r.state, r.fenced, list(r.topics)) for r in coordinator.records()],
            coordinator.low_watermark(),
            await self.rows(),
            [await self.log(t) for t in TOPICS],
        )
