"""Handles the embedded API hands out: a :class:`Transaction` and a consumer's
:class:`SubscriptionHandle`. Both are thin: every call goes through the engine's parts
that made them (transactions, producing, consuming).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from txnstream.dispatcher import Message
from txnstream.ledger import ClosedError, InvalidArgumentError, OutgoingMessage, Position, TxnId
from txnstream.txn_buffer import TxnInfo

if TYPE_CHECKING:
    from ._partitions import PartitionedConsuming
    from ._produce import FastTxnSend, Producing
    from ._txns import Transactions


class Transaction:
    """A handle on one transaction: send, ack, commit, abort."""

    def __init__(
        self,
        txns: Transactions,
        producing: Producing,
        consuming: PartitionedConsuming,
        txn_id: TxnId,
    ) -> None:
        self._txns = txns
        self._producing = producing
        self._consuming = consuming
        self.txn_id = txn_id
        self.id = str(txn_id)
        self._fast_send: FastTxnSend | None = None

    def __repr__(self) -> str:
        return f"<Transaction {self.id}>"

    async def send(
        self,
        topic: str,
        value: Any,
        *,
        key: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> Position:
        """Append one message to ``topic`` in this transaction (pipelined).

        Durable at the latest when :meth:`commit` returns.
        """
        fast = self._fast_send
        if fast is not None and key is None and properties is None and fast.topic == topic:
            position = fast.send(value)
            if position is not None:
                return position
        producing = self._producing
        position = producing.send_one_in_txn(topic, value, key, properties, self.txn_id)
        while position is None:  # held back: the only await of a send
            await producing.wait_writable()
            position = producing.send_one_in_txn(topic, value, key, properties, self.txn_id)
        if key is None and properties is None:
            # the next value-only sends to this topic take the fast path while it holds
            self._fast_send = producing.fast_txn_send(topic, self.txn_id)
        return position

    async def send_many(
        self, topic: str, values: Sequence[Any], *, key: str | None = None
    ) -> list[Position]:
        """Append several messages to ``topic`` in this transaction (pipelined)."""
        if isinstance(values, str | bytes | dict) or not isinstance(values, Sequence):
            raise InvalidArgumentError("values must be a list")
        return await self.send_messages(topic, [OutgoingMessage(v, key) for v in values])

    async def send_messages(
        self, topic: str, messages: Sequence[OutgoingMessage]
    ) -> list[Position]:
        """Append prepared messages (with keys and properties) in this transaction."""
        return await self._producing.send_in_txn(topic, messages, self.txn_id)

    async def ack(
        self,
        topic: str,
        subscription: str,
        positions: Sequence[Position | str] | Position | str,
        *,
        cumulative: bool = False,
    ) -> int:
        """Acknowledge on ``subscription`` when this transaction commits."""
        return await self._consuming.ack(
            topic, subscription, positions, cumulative=cumulative, txn=self.txn_id
        )

    async def commit(self) -> None:
        """Commit: every send and ack of this transaction takes effect atomically."""
        self._fast_send = None
        await self._txns.decide(self.txn_id, commit=True)

    async def abort(self) -> None:
        """Abort: nothing of this transaction is ever delivered."""
        self._fast_send = None
        await self._txns.decide(self.txn_id, commit=False)

    async def info(self) -> TxnInfo:
        """The transaction's current state."""
        return await self._txns.get_transaction(self.txn_id)


class TransactionScope:
    """``async with engine.transaction() as txn``: commit on exit, abort on exception."""

    def __init__(
        self,
        txns: Transactions,
        timeout: float | None,
        transactional_id: str | None,
        label: str | None,
    ) -> None:
        self._txns = txns
        self._args = (timeout, transactional_id, label)
        self._txn: Transaction | None = None

    async def __aenter__(self) -> Transaction:
        timeout, transactional_id, label = self._args
        self._txn = await self._txns.begin(
            timeout=timeout, transactional_id=transactional_id, label=label
        )
        return self._txn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._txn is None:
            return
        if exc_type is None:
            await self._txn.commit()
            return
        if self._txns.is_open(self._txn.txn_id):
            await self._txn.abort()


class SubscriptionHandle:
    """One consumer attached to a subscription (the embedded ``subscribe`` result).

    Also an async iterator: ``async for msg in sub`` receives forever.
    """

    def __init__(
        self, consuming: PartitionedConsuming, topic: str, name: str, consumer: str
    ) -> None:
        self._consuming = consuming
        self.topic = topic
        self.name = name
        self.consumer = consumer
        self._closed = False
        self._buffer: list[Message] = []

    async def receive(self, max: int = 100, timeout: float = 0.0) -> list[Message]:
        """Up to ``max`` messages, as soon as one is deliverable; ``[]`` after ``timeout``."""
        if self._closed:
            raise ClosedError("this consumer was closed")
        return await self._consuming.receive(
            self.topic, self.name, consumer=self.consumer, max=max, timeout=timeout, expires=False
        )

    async def ack(
        self, positions: Sequence[Position | str] | Position | str, *, cumulative: bool = False
    ) -> int:
        """Acknowledge positions (or everything at or below one, with ``cumulative``)."""
        return await self._consuming.ack(self.topic, self.name, positions, cumulative=cumulative)

    async def nack(
        self, positions: Sequence[Position | str] | Position | str, *, delay_ms: int | None = None
    ) -> None:
        """Ask for redelivery of delivered, unacknowledged positions (after ``delay_ms``,
        default the subscription's ``nack_delay_ms``; shared and key_shared only)."""
        await self._consuming.nack(self.topic, self.name, positions, delay_ms=delay_ms)

    async def seek(self, position: Position | str | datetime) -> Position | str:
        """Move the cursor (``"earliest"``, ``"latest"``, a position, or a time zone aware
        datetime: the first message published at or after it); returns where it went."""
        return await self._consuming.seek(self.topic, self.name, position)

    async def close(self) -> None:
        """Detach this consumer; its unacknowledged messages go to others."""
        if self._closed:
            return
        self._closed = True
        self._consuming.detach(self.topic, self.name, self.consumer)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            self._buffer = await self.receive(max=100, timeout=3600.0)
        return self._buffer.pop(0)
