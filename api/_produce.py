"""Producing: plain, idempotent, pipelined-transactional and multi-topic atomic appends.

Every append is *prepared* into one :class:`~txnstream.ledger.WriteBatch` with no ``await`` in
between (positions are assigned in call order and reach the writer in that order) and
is durable when the batch is; see :mod:`txnstream.ledger._store`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from time import time_ns
from typing import Any

from txnstream.ledger import (
    PACK_ERRORS,
    FencedError,
    InvalidArgumentError,
    OutgoingMessage,
    Position,
    TooLargeError,
    TxnId,
    WriteBatch,
    encode_payload,
    encode_payloads,
    encode_value,
    encode_value_payloads,
    now_ms,
    partition_name,
    value_packer,
)
from txnstream.txn_buffer import TxnRecord, TxnRunAppender, TxnState, scoped_name

from ._core import (
    Core,
    EngineState,
    PrincipalArg,
    ProduceResult,
    check_values,
    owner_name,
)
from ._partitions import partition_for_key
from ._values import fits, pack_value, pack_values

LARGE_BATCH = 2_000
"""Batches of at least this many messages are validated and encoded in a worker thread
(the loop keeps serving others: 100,000 messages take ~0.3 s to encode)."""


def _payloads(messages: Sequence[OutgoingMessage], limit: int) -> list[bytes]:
    """Validate and encode ``messages`` into entry payloads (in a worker thread when
    there are many)."""
    try:
        checked = [_check_message(m, limit) for m in messages]
    except (InvalidArgumentError, TooLargeError) as exc:
        raise _naming_message(exc, messages, limit) from None
    return encode_payloads(checked, now_ms())


def _naming_message(
    exc: InvalidArgumentError | TooLargeError, messages: Sequence[OutgoingMessage], limit: int
) -> InvalidArgumentError | TooLargeError:
    """``exc`` (the first refusal in order), saying which message of several it is about."""
    if len(messages) < 2:
        return exc
    for index, message in enumerate(messages):
        try:
            _check_message(message, limit)
        except (InvalidArgumentError, TooLargeError) as first:
            return type(first)(f"message {index}: {first}")
    return exc


def _value_payloads(values: Sequence[Any], limit: int) -> list[bytes]:
    """:func:`_payloads` of bare values (no key, no properties), with no message object,
    tuple or Python call per value: each is screened and packed, and joined to the
    common head, by C calls."""
    packed = pack_values(values)
    if packed is None:  # a value refused: say the first error in order, too-large ones included
        return _payloads([OutgoingMessage(v) for v in values], limit)
    if max(map(len, packed)) > limit:
        return _payloads([OutgoingMessage(v) for v in values], limit)
    return encode_value_payloads(packed, now_ms())


def _check_message(
    message: OutgoingMessage, limit: int
) -> tuple[str | None, bytes, dict[str, str]]:
    if type(message) is not OutgoingMessage and not isinstance(message, OutgoingMessage):
        raise InvalidArgumentError("messages must be OutgoingMessage instances")
    return encode_message(message.value, message.key, message.properties, limit)


def encode_message(
    value: Any, key: str | None, properties: dict[str, str] | None, limit: int
) -> tuple[str | None, bytes, dict[str, str]]:
    """Validate one message (its value against :mod:`the value model <._values>`) and
    pack its value: ``(key, packed value, properties)``."""
    if key is not None or properties or (properties is not None and type(properties) is not dict):
        key, properties = _checked_head(key, properties)
    packed = pack_value(value)
    if len(packed) > limit:
        raise TooLargeError(f"message value of {len(packed)} bytes exceeds the {limit}-byte limit")
    return key, packed, properties or {}


def encode_stored_message(
    value: Any, key: str | None, properties: dict[str, str], limit: int
) -> tuple[str | None, bytes, dict[str, str]]:
    """:func:`encode_message` of a value read back from the log (a dead letter moved on):
    packed as it is stored, a value stored before the value model held included."""
    key, properties = _checked_head(key, properties)
    packed = encode_value(value)
    if len(packed) > limit:
        raise TooLargeError(f"message value of {len(packed)} bytes exceeds the {limit}-byte limit")
    return key, packed, properties


def _checked_head(
    key: str | None, properties: dict[str, str] | None
) -> tuple[str | None, dict[str, str]]:
    """A message's key and a copy of its properties, checked."""
    if key is not None:
        if not isinstance(key, str):
            raise InvalidArgumentError("a message key must be a string or None")
        _check_text(key)
    if properties:
        if not isinstance(properties, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
        ):
            raise InvalidArgumentError("message properties must be a dict of str to str")
        for name, text in properties.items():
            _check_text(name)
            _check_text(text)
        properties = dict(properties)
    elif properties is None or isinstance(properties, dict):
        properties = {}
    else:
        raise InvalidArgumentError("message properties must be a dict of str to str")
    return key, properties


def _check_text(text: str) -> None:
    """A lone surrogate cannot be stored: refuse it before anything is prepared."""
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                f"a message key or property is not valid text: {exc}"
            ) from None


MAX_DELIVERY_DELAY_MS = 366 * 86_400_000
"""The furthest in the future a message's delivery time may lie (a year and a day)."""


def delivery_time(deliver_after_ms: int | None, deliver_at: datetime | None) -> int | None:
    """A message's delivery time (ms since the epoch) from ``deliver_after_ms`` or
    ``deliver_at`` (at most one), or None; :class:`InvalidArgumentError` if bad."""
    if deliver_after_ms is not None and deliver_at is not None:
        raise InvalidArgumentError("give deliver_after_ms or deliver_at, not both")
    now = now_ms()
    if deliver_after_ms is not None:
        if (
            isinstance(deliver_after_ms, bool)
            or not isinstance(deliver_after_ms, int)
            or not 0 <= deliver_after_ms <= MAX_DELIVERY_DELAY_MS
        ):
            raise InvalidArgumentError(
                f"deliver_after_ms must be an integer in 0..{MAX_DELIVERY_DELAY_MS}"
            )
        return now + deliver_after_ms if deliver_after_ms else None
    if deliver_at is not None:
        if not isinstance(deliver_at, datetime) or deliver_at.tzinfo is None:
            raise InvalidArgumentError("deliver_at must be a time zone aware datetime")
        at = int(deliver_at.timestamp() * 1000)
        if at > now + MAX_DELIVERY_DELAY_MS:
            raise InvalidArgumentError("deliver_at lies more than a year ahead")
        return at if at > now else None
    return None


def _delivery_times(messages: Sequence[OutgoingMessage]) -> list[tuple[int, int]]:
    """``(index, delivery time)`` of the messages that carry one (checked)."""
    timed = [(i, m.deliver_at_ms) for i, m in enumerate(messages) if m.deliver_at_ms is not None]
    for _, at in timed:
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            raise InvalidArgumentError("deliver_at_ms must be a time in ms since the epoch")
    return timed


class Producing:
    """The engine's producing side (a part of :class:`~txnstream.api.Engine`): plain,
    idempotent and transactional appends, to plain and partitioned topics."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._config = core.config
        self._metrics = core.metrics

    async def produce(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage],
        *,
        txn: TxnId | str | None = None,
        producer: str | None = None,
        sequence: int | None = None,
        principal: PrincipalArg = None,
    ) -> ProduceResult:
        """Append ``messages`` atomically; durable when this returns.

        With ``producer`` and ``sequence`` (the first message's sequence number), a
        batch at or below the producer's last stored sequence is a duplicate: nothing is
        appended and the original positions are returned if known. With ``txn`` the
        messages belong to that open transaction. With a ``principal``, ``txn`` must be
        its own (:class:`ForbiddenError`) and ``producer`` is scoped to it.
        """
        return await self._produce(topic, messages, False, txn, producer, sequence, principal)

    async def produce_start(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage],
        *,
        txn: TxnId | str | None = None,
        producer: str | None = None,
        sequence: int | None = None,
        principal: PrincipalArg = None,
    ) -> tuple[ProduceResult, asyncio.Future[None] | None]:
        """:meth:`produce` in two steps, for a front door that pipelines a connection's
        requests: returns once the messages have their positions (taken in call order),
        with a future done once they are durable (None for a duplicate: nothing was
        written). Await the future before acknowledging; its error is the flush's.

        With ``txn`` the messages are pipelined as :meth:`Transaction.send`'s (the future
        is None): they ride the transaction's commit, which makes them durable before it
        decides (or the next flush, or the store's linger), instead of a flush of their own.
        """
        return await self._produce_start(
            topic, messages, False, txn, producer, sequence, principal, wait=txn is None
        )

    async def produce_values(
        self,
        topic: str,
        values: Sequence[Any],
        *,
        txn: TxnId | str | None = None,
        producer: str | None = None,
        sequence: int | None = None,
        principal: PrincipalArg = None,
    ) -> ProduceResult:
        """:meth:`produce` of bare values (no key, no properties): the same atomic,
        durable batch with the same rules, without a message object per value."""
        return await self._produce(topic, values, True, txn, producer, sequence, principal)

    async def _produce(
        self,
        topic: str,
        items: Sequence[Any],
        values: bool,
        txn: TxnId | str | None,
        producer: str | None,
        sequence: int | None,
        principal: PrincipalArg,
    ) -> ProduceResult:
        result, done = await self._produce_start(
            topic, items, values, txn, producer, sequence, principal
        )
        if done is not None:
            await done
        return result

    async def _produce_start(
        self,
        topic: str,
        items: Sequence[Any],
        values: bool,
        txn: TxnId | str | None,
        producer: str | None,
        sequence: int | None,
        principal: PrincipalArg,
        *,
        wait: bool = True,
    ) -> tuple[ProduceResult, asyncio.Future[None] | None]:
        if topic not in self._core.rt.partitioned or self._core.state is not EngineState.OPEN:
            self._core.topic(topic)
        if (producer is None) != (sequence is None):
            raise InvalidArgumentError("producer and sequence go together")
        if producer is not None and (not isinstance(producer, str) or not 0 < len(producer) <= 200):
            raise InvalidArgumentError("producer must be a non-empty string of at most 200 chars")
        if sequence is not None and (
            isinstance(sequence, bool) or not isinstance(sequence, int) or sequence < 0
        ):
            raise InvalidArgumentError("sequence must be a non-negative integer")
        if principal is not None:
            if txn is not None:
                await self._core.check_owner(txn, principal)
            if producer is not None:
                producer = scoped_name(owner_name(principal), producer)
        if topic in self._core.rt.partitioned:
            if producer is not None:
                raise InvalidArgumentError(
                    "an idempotent producer's sequence numbers are per partition: produce"
                    f" to one of {topic!r}'s partitions ({topic}-partition-<i>)"
                )
            positions, done, names = await self._append_partitioned(
                topic, items, txn, wait=wait, values=values
            )
            return ProduceResult(positions, False, names), done
        result = await self._append(topic, items, txn, producer, sequence, wait=wait, values=values)
        if isinstance(result, ProduceResult):
            return result, None
        positions, done = result
        return ProduceResult(positions, False), done  # (a future exactly when wait)

    async def send_in_txn(
        self, topic: str, messages: Sequence[OutgoingMessage], txn: TxnId
    ) -> list[Position]:
        """Append ``messages`` in open transaction ``txn`` (pipelined: its commit makes
        them durable)."""
        if topic in self._core.rt.partitioned:
            return (await self._append_partitioned(topic, messages, txn, wait=False))[0]
        result = await self._append(topic, messages, txn, None, None, wait=False)
        assert not isinstance(result, ProduceResult)  # no producer: never a duplicate
        return result[0]

    def send_one_in_txn(
        self,
        topic: str,
        value: Any,
        key: str | None,
        properties: dict[str, str] | None,
        txn: TxnId,
    ) -> Position | None:
        """One message in open transaction ``txn`` (pipelined): ``Transaction.send``'s
        path, with no per-send batch, future, callback or coroutine of its own.

        None (nothing done) when the store holds writes back (backpressure, or a failed
        store): await :meth:`~txnstream.ledger.Store.wait_writable`, then call again.
        """
        encoded = encode_message(value, key, properties, self._config.max_message_bytes)
        rt = self._core.rt
        store = rt.store
        store.check_space()
        if store.over_limit or store.failure is not None:
            return None
        # The position is assigned and queued in this one step.
        topic_ = rt.topics.get(topic) if self._core.state is EngineState.OPEN else None
        if topic_ is None:
            if topic in rt.partitioned and self._core.state is EngineState.OPEN:
                encoded_key = encoded[0]  # to the partition its (checked) key picks
                topic = partition_name(topic, self._route(topic, [encoded_key])[0])
            topic_ = self._core.topic(topic)  # (else raises the right error)
        coordinator = rt.coordinator
        try:
            record = coordinator.check_open(txn)
        except FencedError:
            self._metrics.fenced_requests.inc()
            raise
        store.check_writable()
        batch = store.batch
        if topic not in record.topics or not record.persisted:
            coordinator.register_topic(batch, record, topic)
        position = topic_.prepare_one(batch, encoded, record.txn_id, coordinator.checked_at)
        store.pipelined()
        self._metrics.count_in(topic, 1)
        return position

    async def wait_writable(self) -> None:
        """Wait while the store holds writes back (see :meth:`send_one_in_txn`)."""
        await self._core.rt.store.wait_writable()

    def fast_txn_send(self, topic: str, txn: TxnId) -> FastTxnSend | None:
        """A :class:`FastTxnSend` for ``txn``'s next value-only sends to ``topic``, right
        after a :meth:`send_one_in_txn` of it (None if that send did not leave one)."""
        rt = self._core.rt
        topic_ = rt.topics.get(topic)
        record = rt.coordinator.get(txn)
        if topic_ is None or self._core.state is not EngineState.OPEN or topic not in record.topics:
            return None
        batch = rt.store.batch
        appender = topic_.run_appender(batch, record.txn_id)
        return None if appender is None else FastTxnSend(self._core, topic, record, batch, appender)

    def _route(self, topic: str, keys: Sequence[str | None]) -> list[int]:
        """The partition of partitioned ``topic`` each message goes to: by its key with
        Kafka's partitioner, round-robin without one."""
        count = self._core.rt.partitioned[topic].partitions
        turn = self._core.rt.next_partition.get(topic, 0)
        out = []
        for key in keys:
            if key is None:
                out.append(turn % count)
                turn += 1
            else:
                out.append(partition_for_key(key, count))
        self._core.rt.next_partition[topic] = turn % count
        return out

    async def _append_partitioned(
        self,
        topic_name: str,
        messages: Sequence[OutgoingMessage] | Sequence[Any],
        txn: TxnId | str | None,
        *,
        wait: bool,
        values: bool = False,
    ) -> tuple[list[Position], asyncio.Future[None] | None, list[str]]:
        """:meth:`_append` to a partitioned topic: each message to the partition
        :meth:`_route` picks, all in one batch (atomic across partitions); returns the
        positions, the batch's future and each position's partition topic."""
        payloads = await self._encoded(topic_name, messages, values)
        keys = [None] * len(messages) if values else [m.key for m in messages]
        store = self._core.rt.store
        # Nothing below awaits: positions are assigned and submitted in one step.
        if topic_name not in self._core.rt.partitioned:
            self._core.topic(topic_name)  # deleted meanwhile: raises the right error
        parts = self._route(topic_name, keys)
        groups: dict[int, list[int]] = {}
        for index, part in enumerate(parts):
            groups.setdefault(part, []).append(index)
        topics = {i: self._core.topic(partition_name(topic_name, i)) for i in groups}
        record = None if txn is None else self._core.check_txn(txn)
        store.check_writable()
        batch = store.batch
        positions: list[Position] = [Position(0, 0)] * len(payloads)
        for part, members in groups.items():
            topic = topics[part]
            txn_id = None
            if record is not None:
                self._core.rt.coordinator.register_topic(batch, record, topic.name)
                txn_id = record.txn_id
            got = topic.prepare_payloads(batch, [payloads[i] for i in members], txn_id)
            for index, position in zip(members, got, strict=True):
                positions[index] = position
            self._metrics.count_in(topic.name, len(members))
        done = store.submit(batch, wait=wait)
        return positions, done, [topics[part].name for part in parts]

    async def _encoded(
        self, topic_name: str, messages: Sequence[OutgoingMessage] | Sequence[Any], values: bool
    ) -> list[bytes]:
        """Validate and encode ``messages`` (bare values if ``values``) into payloads,
        then wait while the store holds writes back."""
        if values:
            check_values(messages)
        if isinstance(messages, OutgoingMessage | str | bytes) or not messages:
            raise InvalidArgumentError("messages must be a non-empty list")
        limit = self._config.max_message_bytes
        encode = _value_payloads if values else _payloads
        if len(messages) >= LARGE_BATCH:
            if topic_name not in self._core.rt.partitioned:
                self._core.topic(topic_name)  # an unknown topic fails before the work
            payloads = await asyncio.to_thread(encode, messages, limit)
        else:
            payloads = encode(messages, limit)
        store = self._core.rt.store
        store.check_space()
        if store.over_limit or store.failure is not None:
            await store.wait_writable()
        return payloads

    async def _append(
        self,
        topic_name: str,
        messages: Sequence[OutgoingMessage] | Sequence[Any],
        txn: TxnId | str | None,
        producer: str | None,
        sequence: int | None,
        *,
        wait: bool,
        values: bool = False,
    ) -> ProduceResult | tuple[list[Position], asyncio.Future[None] | None]:
        """Validate and encode ``messages`` (bare values if ``values``), then prepare
        and submit them in one step; a duplicate batch is a :class:`ProduceResult`."""
        payloads = await self._encoded(topic_name, messages, values)
        store = self._core.rt.store
        timed = [] if values else _delivery_times(messages)
        # Nothing below awaits: positions are assigned and submitted in one step.
        topic = self._core.topic(topic_name)
        if producer is not None and sequence is not None:
            duplicate = topic.duplicate_of(producer, sequence)
            if duplicate is not None:
                return ProduceResult(duplicate, True)
        record = None if txn is None else self._core.check_txn(txn)
        store.check_writable()
        batch = store.batch  # validated above: everything below goes into the next flush
        txn_id = None
        if record is not None:
            self._core.rt.coordinator.register_topic(batch, record, topic_name)
            txn_id = record.txn_id
        positions = topic.prepare_payloads(batch, payloads, txn_id)
        if timed:
            self._core.rt.subscriptions.delay_delivery(
                batch, topic, [(positions[i], at) for i, at in timed]
            )
        if producer is not None and sequence is not None:
            topic.record_producer(batch, producer, sequence, positions)
        done = store.submit(batch, wait=wait)
        self._metrics.count_in(topic_name, len(positions))
        return positions, done

    async def send(
        self,
        topic: str,
        value: Any,
        *,
        key: str | None = None,
        properties: dict[str, str] | None = None,
        deliver_after_ms: int | None = None,
        deliver_at: datetime | None = None,
    ) -> Position:
        """Append one message; returns its position once it is durable.

        With ``deliver_after_ms`` or ``deliver_at`` (a time zone aware datetime; Pulsar's
        ``deliverAfter``/``deliverAt``), shared and key_shared subscriptions deliver it
        no earlier than that (exclusive and failover ones deliver in order, at once).
        """
        at = delivery_time(deliver_after_ms, deliver_at)
        result = await self.produce(topic, [OutgoingMessage(value, key, properties or {}, at)])
        return result.positions[0]

    async def send_many(
        self, topic: str, values: Sequence[Any], *, key: str | None = None
    ) -> list[Position]:
        """Append several messages as one atomic, durable batch."""
        if key is None:
            return (await self.produce_values(topic, values)).positions
        messages = [OutgoingMessage(v, key) for v in check_values(values)]
        return (await self.produce(topic, messages)).positions

    async def send_batch(
        self, items: Sequence[tuple[str, Any] | tuple[str, OutgoingMessage]]
    ) -> list[Position]:
        """Append to several topics atomically, without a transaction; durable on return.

        ``items`` are ``(topic, value)`` or ``(topic, OutgoingMessage)`` pairs; the
        positions come back in the same order. Every topic must exist
        (:class:`TopicNotFoundError` otherwise) and nothing is stored unless all is.
        """
        if isinstance(items, str | bytes | dict) or not isinstance(items, Sequence) or not items:
            raise InvalidArgumentError("items must be a non-empty list of (topic, value) pairs")
        groups: dict[str, list[tuple[int, OutgoingMessage]]] = {}
        ordered: list[OutgoingMessage] = []  # the messages in item order, for errors
        for index, item in enumerate(items):
            if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str):
                raise InvalidArgumentError(f"item {index} is not a (topic, value) pair")
            name, value = item
            message = value if isinstance(value, OutgoingMessage) else OutgoingMessage(value)
            ordered.append(message)
            if name in self._core.rt.partitioned:  # to the partition its key picks
                key = message.key if isinstance(message.key, str) else None
                name = partition_name(name, self._route(name, [key])[0])
            groups.setdefault(name, []).append((index, message))
        for name in groups:
            self._core.topic(name)  # every topic exists before anything is encoded
        limit = self._config.max_message_bytes
        try:
            encoded = {
                t: [_check_message(m, limit) for _, m in group] for t, group in groups.items()
            }
        except (InvalidArgumentError, TooLargeError) as exc:
            raise _naming_message(exc, ordered, limit) from None
        for group in groups.values():
            _delivery_times([m for _, m in group])
        store = self._core.rt.store
        store.check_space()
        if store.over_limit or store.failure is not None:
            await store.wait_writable()
        # Nothing below awaits: one batch, so all topics' entries are durable together.
        batch = WriteBatch()
        positions: list[Position | None] = [None] * len(items)
        for topic_name, group in groups.items():
            topic = self._core.topic(topic_name)
            for (index, message), position in zip(
                group, topic.prepare_data(batch, encoded[topic_name], None), strict=True
            ):
                positions[index] = position
                if message.deliver_at_ms is not None:
                    self._core.rt.subscriptions.delay_delivery(
                        batch, topic, [(position, message.deliver_at_ms)]
                    )
            self._metrics.count_in(topic_name, len(group))
        await store.write(batch)
        return [p for p in positions if p is not None]


class FastTxnSend:
    """``Transaction.send``'s fast path: a transaction's further value-only sends to one
    topic while nothing around them changed since a full :meth:`Producing.send_one_in_txn`
    (the same open batch, the topic's last run still this transaction's, the transaction
    still open and in time, no backpressure, space or store failure).

    Only the value is packed and checked per send, by the loop thread's packer, and joined
    to the payload head of the current millisecond (made once per millisecond): a send
    that sat in the full path's ten calls now makes few. :meth:`send` returns None
    whenever anything is off (nothing done), and the caller takes the full path, which
    raises or waits as it should (a value that cannot be packed included).
    """

    __slots__ = (
        "_appender",
        "_batch",
        "_coordinator",
        "_core",
        "_head",
        "_head_ms",
        "_limit",
        "_metrics",
        "_pack",
        "_record",
        "_store",
        "topic",
    )

    def __init__(
        self,
        core: Core,
        topic: str,
        record: TxnRecord,
        batch: WriteBatch,
        appender: TxnRunAppender,
    ) -> None:
        self._core = core
        self.topic = topic
        """The topic this fast path sends to."""
        self._record = record
        self._batch = batch
        self._appender = appender
        runtime = core.rt  # this term's (a later one's store does not take this batch)
        self._store = runtime.store
        self._coordinator = runtime.coordinator
        self._metrics = core.metrics
        self._limit = core.config.max_message_bytes
        self._pack = value_packer()  # made on the loop's thread, where every send runs
        self._head_ms = -1
        self._head = b""

    def send(self, value: Any) -> Position | None:
        """Append ``value`` (pipelined, as the full path); None if the fast path no longer holds."""
        record = self._record
        store = self._store
        if (
            self._core.state is not EngineState.OPEN
            or record.state is not TxnState.OPEN
            or record.fenced
            or not store.takes_pipelined(self._batch)
        ):
            return None
        now = time_ns() // 1_000_000  # now_ms(), without its call
        if now >= record.deadline_ms:
            return None  # (the full path raises and wakes the timeout task)
        if not fits(value):
            return None  # the full path raises InvalidArgumentError, nothing done yet
        try:
            packed = self._pack(value)
        except PACK_ERRORS:
            return None  # (an int out of range, a lone surrogate: as above)
        if len(packed) > self._limit:
            return None
        if now != self._head_ms:
            self._head = encode_payload(None, b"", {}, now)
            self._head_ms = now
        position = self._appender.append(self._head + packed)
        if position is None:
            return None
        self._coordinator.checked_at = now
        store.pipelined()
        self._metrics.count_in(self.topic, 1)
        return position
