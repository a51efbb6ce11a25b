"""Consumer policies the engine carries out: dead-letter moves and message TTL.

A subscription whose redelivery limit a message passes (see
:class:`~txnstream.dispatcher.ConsumerPolicy`) keeps the position aside; the dead-letter
task moves it to the subscription's dead-letter topic, the append and the ack in one
store transaction. A topic with a message TTL has its expired messages acknowledged for
every subscription by a pass every ``EngineConfig.ttl_check_interval`` seconds (Pulsar's
message TTL: the mark-delete position moves past them).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from txnstream.dispatcher import Subscription, position_at
from txnstream.ledger import (
    AckConflictError,
    EngineError,
    InvalidArgumentError,
    Position,
    WriteBatch,
    now_ms,
)

from ._admin import TopicAdmin
from ._core import Core
from ._produce import encode_stored_message

log = logging.getLogger("txnstream.engine")

MAX_TTL_MS = 10 * 365 * 24 * 3600 * 1000
"""The longest message TTL accepted (ten years)."""
_DEAD_LETTER_CHUNK = 500  # positions moved per store transaction
_PROPERTY_ROOM = 4096  # what the origin properties may add to a message at the limit


class ConsumerPolicies:
    """Dead-letter moves and message TTL (a part of :class:`~txnstream.api.Engine`); a
    missing dead-letter topic is made through the topic administration."""

    def __init__(self, core: Core, admin: TopicAdmin) -> None:
        self._core = core
        self._config = core.config
        self._metrics = core.metrics
        self._admin = admin
        # set when a subscription has messages to move to its dead-letter topic
        self._dead_letter_event = asyncio.Event()

    # -- message TTL ---------------------------------------------------------------

    async def set_ttl(self, topic: str, ttl_ms: int | None) -> None:
        """Set ``topic``'s message TTL in milliseconds (None: messages never expire).

        Unacknowledged messages older than the TTL are acknowledged for every
        subscription by the next pass (:meth:`apply_ttl`)."""
        if ttl_ms is not None and (
            isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 1 <= ttl_ms <= MAX_TTL_MS
        ):
            raise InvalidArgumentError(f"ttl_ms must be an integer in 1..{MAX_TTL_MS} or null")
        owner = self._core.topic(topic)
        rt = self._core.rt
        batch = WriteBatch()
        batch.put_ttl(owner.topic_id, ttl_ms)
        await rt.store.write(batch)
        if ttl_ms is None:
            rt.ttl.pop(topic, None)
        else:
            rt.ttl[topic] = ttl_ms

    def ttl(self, topic: str) -> int | None:
        """``topic``'s message TTL in milliseconds, or None."""
        self._core.topic(topic)
        return self._core.rt.ttl.get(topic)

    async def apply_ttl(self, topic: str) -> int:
        """Acknowledge ``topic``'s messages older than its TTL for every subscription
        now; returns how many subscriptions moved. A subscription with a transactional
        ack pending below the cut is left for a later pass."""
        owner = self._core.topic(topic)
        ttl = self._core.rt.ttl.get(topic)
        if ttl is None:
            return 0
        cutoff = datetime.fromtimestamp((now_ms() - ttl) / 1000, UTC)
        first_live = await position_at(owner, cutoff)
        upto = (
            owner.buffer.last_confirmed if first_live is None else owner.ledger.previous(first_live)
        )
        if upto is None or owner.deleted:
            return 0
        batch = WriteBatch()
        moved = 0
        for sub in self._core.rt.subscriptions.of_topic(topic):
            limit = sub.read_limit
            if limit is None:
                continue
            target = min(upto, limit)  # never past what the subscription may read
            md = sub.cursor.mark_delete
            if md is not None and md >= target:
                continue
            try:
                sub.check_ack([target], True, None)
            except AckConflictError:
                continue
            sub.apply_ack([target], True)
            sub.prepare_cursor_write(batch)
            moved += 1
        if batch:
            await self._core.rt.store.write(batch)
            log.info(
                "topic %s: message TTL acknowledged up to %s for %d subscription(s)",
                topic,
                upto,
                moved,
            )
        return moved

    async def ttl_loop(self) -> None:
        """Apply every topic's message TTL every ``ttl_check_interval`` seconds."""
        while True:
            await asyncio.sleep(self._config.ttl_check_interval)
            if self._core.rt.subscriptions.has_delivery_times:  # forget the times that passed
                batch = WriteBatch()
                self._core.rt.subscriptions.prune_delivery_times(batch, now_ms())
                try:
                    if batch:
                        await self._core.rt.store.write(batch)
                except EngineError as exc:  # disk full, ...: pruned again next pass
                    log.warning("pruning delivery times failed: %s", exc)
            for name in list(self._core.rt.ttl):
                try:
                    await self.apply_ttl(name)
                except EngineError as exc:  # deleted meanwhile, disk full, ...: next pass
                    log.warning("topic %s: message TTL pass failed: %s", name, exc)

    # -- dead-letter topics --------------------------------------------------------

    def dead_letter_ready(self) -> None:
        """A subscription has messages to move (the dead-letter task moves them)."""
        self._dead_letter_event.set()

    async def dead_letter_loop(self) -> None:
        """Move messages past their subscription's redelivery limit, as they appear."""
        while True:
            await self._dead_letter_event.wait()
            self._dead_letter_event.clear()
            for sub in self._core.rt.subscriptions.dead_lettering():
                try:
                    while sub.dead_letters and not sub.deleted:
                        await self._move_dead_letters(sub)
                except EngineError as exc:  # disk full, ...: tried again on the next one
                    log.warning(
                        "subscription %s/%s: dead-letter move failed: %s",
                        sub.topic.name,
                        sub.name,
                        exc,
                    )
                    self._dead_letter_event.set()
                    await asyncio.sleep(1.0)

    async def _move_dead_letters(self, sub: Subscription) -> None:
        """Append up to a chunk of ``sub``'s dead letters to its dead-letter topic and
        acknowledge them, in one store transaction."""
        topic = sub.topic
        target = sub.policy.dead_letter_topic_of(topic.name, sub.name)
        if target not in self._core.rt.topics:
            await self._admin.create_topic(target)
        positions: list[Position] = list(sub.dead_letters.islice(0, _DEAD_LETTER_CHUNK))
        entries = await topic.ledger.read_positions(positions)
        dead = self._core.rt.topics.get(target)
        if sub.deleted or topic.deleted or dead is None:
            return
        # Nothing below awaits until the write: what was acked meanwhile is left out.
        found = {entry.position for entry in entries}
        for position in positions:
            if position not in found:  # trimmed by retention: nothing left to move
                sub.dead_letters.discard(position)
        live = [
            e
            for e in entries
            if e.position in sub.dead_letters and not sub.cursor.is_acked(e.position)
        ]
        if not live:
            sub.dead_letters.difference_update(found)
            return
        limit = self._config.max_message_bytes + _PROPERTY_ROOM
        encoded = [
            encode_stored_message(
                entry.value,
                entry.key,
                {
                    **entry.properties,
                    "origin_topic": topic.name,
                    "origin_subscription": sub.name,
                    "origin_position": str(entry.position),
                    "redelivery_count": str(sub.redelivery_count(entry.position)),
                },
                limit,
            )
            for entry in live
        ]
        self._core.rt.store.check_space()
        sub.dead_letters.difference_update(found)
        batch = WriteBatch()
        dead.prepare_data(batch, encoded, None)
        sub.apply_ack([e.position for e in live], False)
        sub.prepare_cursor_write(batch)
        await self._core.rt.store.write(batch)
        self._metrics.count_in(target, len(live))
        log.info(
            "subscription %s/%s: moved %d message(s) to dead-letter topic %s",
            topic.name,
            sub.name,
            len(live),
            target,
        )
