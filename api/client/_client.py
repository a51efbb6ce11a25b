"""The blocking :class:`Client` and the asyncio :class:`AsyncClient` of the HTTP API.

Both send the calls of ``_calls`` and differ only in how they wait. Results are the
answers' JSON bodies as ``docs/http-api.md`` describes them, unwrapped when the body is
one list (topics, transactions, messages); ``create_topic`` and ``create_subscription`` say whether
they created. A non-2xx answer raises :class:`~txnstream.api.TxnStreamHttpError` (``status``,
``code``, ``message``); no answer at all raises :class:`~txnstream.api.TxnStreamTransportError`
(code ``unavailable``).

A client may be given several servers (``"http://a:8080,http://b:8080"`` or a list): it
follows the active one among them (:mod:`txnstream.api.client._servers`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Self, TypeVar

import httpx

from . import _calls as calls
from ._calls import Body, Call, PositionLike, TimestampLike, answer
from ._servers import Servers
from ._transports import AsyncTransportTlsOnDemand, TransportTlsOnDemand

__all__ = ["DEFAULT_FAILOVER_TIMEOUT", "DEFAULT_TIMEOUT", "AsyncClient", "Client"]

T = TypeVar("T")

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=5.0)
"""60 s per request (a long poll waits at most 30 s), 5 s to connect."""

DEFAULT_FAILOVER_TIMEOUT = 15.0
"""Seconds a request goes on looking for the active server among several (a standby
takes over within its lease timeout, 5 s by default, plus its recovery)."""


class _Settings:
    """The constructor both clients share; each opens its own kind of httpx client."""

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        token: str | None = None,
        trust_env: bool = True,
        failover_timeout: float = DEFAULT_FAILOVER_TIMEOUT,
    ) -> None:
        self._servers = Servers(url, failover_timeout=failover_timeout, token=token is not None)
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        # No base URL: every request names its server, one the client was given.
        self._open(timeout=timeout, headers=headers, trust_env=trust_env)

    @property
    def url(self) -> str:
        """The server requests go to first: the one that answered last."""
        return self._servers.current

    @property
    def urls(self) -> list[str]:
        """Every server this client was given."""
        return list(self._servers.urls)

    def _open(self, **options: Any) -> None:
        raise NotImplementedError


class Client(_Settings):
    """Blocking client of one txnstream server at ``url``; use it as a context manager.

    ``token`` is sent as ``Authorization: Bearer``; ``trust_env=False`` ignores proxy
    settings of the environment (as httpx's own option does).
    """

    def _open(self, **options: Any) -> None:
        self._http = httpx.Client(
            transport=TransportTlsOnDemand(trust_env=options["trust_env"]), **options
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections; the client cannot be used again."""
        self._http.close()

    def _send(self, call: Call[T]) -> T:
        attempt = self._servers.attempt()
        delay: float | None
        while True:
            try:
                response = self._http.request(
                    call.method, attempt.url + call.path, params=call.params, json=call.json
                )
            except httpx.TransportError as exc:
                delay = attempt.failed(exc)
            else:
                delay = attempt.answered(response)
                if delay is None:
                    return call.read(response)
            if delay:
                time.sleep(delay)

    def request(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, json: Any = None
    ) -> httpx.Response:
        """Any request (e.g. ``GET /metrics``): its 2xx response, else the errors above."""
        return self._send(Call(method, path, answer, dict(params or {}), json))

    def health(self) -> Body:
        """``GET /v1/health``: the body, also when 503 (``status`` is then not ``ok``)."""
        return self._send(calls.health())

    def create_topic(self, topic: str, *, partitions: int | None = None) -> bool:
        """Create ``topic`` (with ``partitions``, a partitioned topic); True if created,
        False if it existed."""
        return self._send(calls.create_topic(topic, partitions))

    def list_topics(self) -> list[str]:
        """The names of every topic."""
        return self._send(calls.list_topics())

    def delete_topic(self, topic: str) -> Body:
        """Delete ``topic`` with its data, subscriptions and snapshots."""
        return self._send(calls.delete_topic(topic))

    def stats(self, topic: str) -> Body:
        """The stats body of ``topic`` (positions, counts, subscriptions)."""
        return self._send(calls.stats(topic))

    def produce(
        self,
        topic: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        txn: str | None = None,
        producer: str | None = None,
        sequence: int | None = None,
    ) -> Body:
        """Append ``messages`` (:func:`wire_message`) atomically: ``positions``, ``duplicate``."""
        return self._send(calls.produce(topic, messages, txn, producer, sequence))

    def begin(
        self,
        *,
        timeout_ms: int | None = None,
        label: str | None = None,
        transactional_id: str | None = None,
    ) -> Body:
        """Begin a transaction; its body (``txn``, ``state``, ``timeout_ms``)."""
        return self._send(calls.begin(timeout_ms, label, transactional_id))

    def get_transaction(self, txn: str) -> Body:
        """Transaction ``txn``: state, label, topics."""
        return self._send(calls.get_transaction(txn))

    def list_transactions(
        self,
        *,
        state: str | None = None,
        label_prefix: str | None = None,
        older_than_ms: int | None = None,
    ) -> list[Body]:
        """Transactions, filtered by state, label prefix and age (begun at least
        ``older_than_ms`` ago)."""
        return self._send(calls.list_transactions(state, label_prefix, older_than_ms))

    def commit(self, txn: str) -> Body:
        """Commit ``txn``; answers once its markers are durable."""
        return self._send(calls.end_transaction(txn, "commit"))

    def abort(self, txn: str) -> Body:
        """Abort ``txn``."""
        return self._send(calls.end_transaction(txn, "abort"))

    def finish(
        self,
        *,
        commit: Sequence[str] = (),
        abort: Sequence[str] = (),
        idempotence_key: str | None = None,
    ) -> Body:
        """Commit and abort several transactions in one atomic step."""
        return self._send(calls.finish(commit, abort, idempotence_key))

    def create_subscription(
        self,
        topic: str,
        subscription: str,
        *,
        type: str | None = None,
        initial_position: str | None = None,
        isolation: str | None = None,
        max_redeliveries: int | None = None,
        dead_letter_topic: str | None = None,
        nack_delay_ms: int | None = None,
    ) -> bool:
        """Create the subscription; True if created, False if it existed alike (the
        consumer policy fields, if given, replace an existing one's policy)."""
        return self._send(
            calls.create_subscription(
                topic,
                subscription,
                type,
                initial_position,
                isolation,
                max_redeliveries,
                dead_letter_topic,
                nack_delay_ms,
            )
        )

    def list_subscriptions(self, topic: str) -> dict[str, Body]:
        """The subscriptions of ``topic`` by name: type, isolation, backlog, mark_delete,
        consumers (from its stats)."""
        return self._send(calls.list_subscriptions(topic))

    def delete_subscription(self, topic: str, subscription: str) -> Body:
        """Delete the subscription and its cursor."""
        return self._send(calls.delete_subscription(topic, subscription))

    def receive(
        self,
        topic: str,
        subscription: str,
        *,
        consumer: str | None = None,
        max: int | None = None,
        wait_ms: int | None = None,
    ) -> list[Body]:
        """Up to ``max`` messages, waiting up to ``wait_ms`` for the first."""
        return self._send(calls.receive(topic, subscription, consumer, max, wait_ms))

    def ack(
        self,
        topic: str,
        subscription: str,
        positions: Sequence[PositionLike],
        *,
        cumulative: bool | None = None,
        txn: str | None = None,
    ) -> Body:
        """Acknowledge ``positions`` (with ``txn``: when it commits)."""
        return self._send(calls.ack(topic, subscription, positions, cumulative, txn))

    def nack(
        self,
        topic: str,
        subscription: str,
        positions: Sequence[PositionLike],
        *,
        delay_ms: int | None = None,
    ) -> Body:
        """Redeliver ``positions`` (after ``delay_ms``: shared and key_shared only)."""
        return self._send(calls.nack(topic, subscription, positions, delay_ms))

    def seek(
        self,
        topic: str,
        subscription: str,
        position: PositionLike | None = None,
        *,
        timestamp: TimestampLike | None = None,
    ) -> Body:
        """Move the cursor to ``position`` (or ``earliest``/``latest``), or to the first
        message published at or after ``timestamp``; the answer names where it went."""
        return self._send(calls.seek(topic, subscription, position, timestamp))

    def fetch(
        self,
        topic: str,
        start: PositionLike | None = None,
        *,
        max: int | None = None,
        isolation: str | None = None,
        timestamp: TimestampLike | None = None,
    ) -> Body:
        """Raw entries from ``start`` (the query's ``from``), or from the first entry
        published at or after ``timestamp``, with the aborted list."""
        return self._send(calls.fetch(topic, start, max, isolation, timestamp))

    def set_retention(
        self, topic: str, *, time_ms: int | None = None, size_bytes: int | None = None
    ) -> Body:
        """Set what retention deletes from ``topic`` (None: no limit of that kind)."""
        return self._send(calls.set_retention(topic, time_ms, size_bytes))

    def set_ttl(self, topic: str, ttl_ms: int | None) -> Body:
        """Set ``topic``'s message TTL (None: messages never expire)."""
        return self._send(calls.set_ttl(topic, ttl_ms))

    def list_ledgers(self, topic: str) -> list[Body]:
        """The topic's ledgers, oldest first (``ledger``, ``entries``, ``bytes``, ...)."""
        return self._send(calls.list_ledgers(topic))


class AsyncClient(_Settings):
    """The asyncio twin of :class:`Client`: the same methods, awaited."""

    def _open(self, **options: Any) -> None:
        self._http = httpx.AsyncClient(
            transport=AsyncTransportTlsOnDemand(trust_env=options["trust_env"]), **options
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections; the client cannot be used again."""
        await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:  # Client._send, awaiting
        attempt = self._servers.attempt()
        delay: float | None
        while True:
            try:
                response = await self._http.request(
                    call.method, attempt.url + call.path, params=call.params, json=call.json
                )
            except httpx.TransportError as exc:
                delay = attempt.failed(exc)
            else:
                delay = attempt.answered(response)
                if delay is None:
                    return call.read(response)
            if delay:
                # here, not at the top: the blocking Client (the command line) starts
                # without asyncio (~40 ms); in a coroutine it is loaded already
                import asyncio

                await asyncio.sleep(delay)

    async def request(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, json: Any = None
    ) -> httpx.Response:
        """Any request (e.g. ``GET /metrics``): its 2xx response, else the errors above."""
        return await self._send(Call(method, path, answer, dict(params or {}), json))

    async def health(self) -> Body:
        """``GET /v1/health``: the body, also when 503 (``status`` is then not ``ok``)."""
        return await self._send(calls.health())

    async def create_topic(self, topic: str, *, partitions: int | None = None) -> bool:
        """Create ``topic`` (with ``partitions``, a partitioned topic); True if created,
        False if it existed."""
        return await self._send(calls.create_topic(topic, partitions))

    async def list_topics(self) -> list[str]:
        """The names of every topic."""
        return await self._send(calls.list_topics())

    async def delete_topic(self, topic: str) -> Body:
        """Delete ``topic`` with its data, subscriptions and snapshots."""
        return await self._send(calls.delete_topic(topic))

    async def stats(self, topic: str) -> Body:
        """The stats body of ``topic`` (positions, counts, subscriptions)."""
        return await self._send(calls.stats(topic))

    async def produce(
        self,
        topic: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        txn: str | None = None,
        producer: str | None = None,
        sequence: int | None = None,
    ) -> Body:
        """Append ``messages`` (:func:`wire_message`) atomically: ``positions``, ``duplicate``."""
        return await self._send(calls.produce(topic, messages, txn, producer, sequence))

    async def begin(
        self,
        *,
        timeout_ms: int | None = None,
        label: str | None = None,
        transactional_id: str | None = None,
    ) -> Body:
        """Begin a transaction; its body (``txn``, ``state``, ``timeout_ms``)."""
        return await self._send(calls.begin(timeout_ms, label, transactional_id))

    async def get_transaction(self, txn: str) -> Body:
        """Transaction ``txn``: state, label, topics."""
        return await self._send(calls.get_transaction(txn))

    async def list_transactions(
        self,
        *,
        state: str | None = None,
        label_prefix: str | None = None,
        older_than_ms: int | None = None,
    ) -> list[Body]:
        """Transactions, filtered by state, label prefix and age (begun at least
        ``older_than_ms`` ago)."""
        return await self._send(calls.list_transactions(state, label_prefix, older_than_ms))

    async def commit(self, txn: str) -> Body:
        """Commit ``txn``; answers once its markers are durable."""
        return await self._send(calls.end_transaction(txn, "commit"))

    async def abort(self, txn: str) -> Body:
        """Abort ``txn``."""
        return await self._send(calls.end_transaction(txn, "abort"))

    async def finish(
        self,
        *,
        commit: Sequence[str] = (),
        abort: Sequence[str] = (),
        idempotence_key: str | None = None,
    ) -> Body:
        """Commit and abort several transactions in one atomic step."""
        return await self._send(calls.finish(commit, abort, idempotence_key))

    async def create_subscription(
        self,
        topic: str,
        subscription: str,
        *,
        type: str | None = None,
        initial_position: str | None = None,
        isolation: str | None = None,
        max_redeliveries: int | None = None,
        dead_letter_topic: str | None = None,
        nack_delay_ms: int | None = None,
    ) -> bool:
        """Create the subscription; True if created, False if it existed alike (the
        consumer policy fields, if given, replace an existing one's policy)."""
        return await self._send(
            calls.create_subscription(
                topic,
                subscription,
                type,
                initial_position,
                isolation,
                max_redeliveries,
                dead_letter_topic,
                nack_delay_ms,
            )
        )

    async def list_subscriptions(self, topic: str) -> dict[str, Body]:
        """The subscriptions of ``topic`` by name: type, isolation, backlog, mark_delete,
        consumers (from its stats)."""
        return await self._send(calls.list_subscriptions(topic))

    async def delete_subscription(self, topic: str, subscription: str) -> Body:
        """Delete the subscription and its cursor."""
        return await self._send(calls.delete_subscription(topic, subscription))

    async def receive(
        self,
        topic: str,
        subscription: str,
        *,
        consumer: str | None = None,
        max: int | None = None,
        wait_ms: int | None = None,
    ) -> list[Body]:
        """Up to ``max`` messages, waiting up to ``wait_ms`` for the first."""
        return await self._send(calls.receive(topic, subscription, consumer, max, wait_ms))

    async def ack(
        self,
        topic: str,
        subscription: str,
        positions: Sequence[PositionLike],
        *,
        cumulative: bool | None = None,
        txn: str | None = None,
    ) -> Body:
        """Acknowledge ``positions`` (with ``txn``: when it commits)."""
        return await self._send(calls.ack(topic, subscription, positions, cumulative, txn))

    async def nack(
        self,
        topic: str,
        subscription: str,
        positions: Sequence[PositionLike],
        *,
        delay_ms: int | None = None,
    ) -> Body:
        """Redeliver ``positions`` (after ``delay_ms``: shared and key_shared only)."""
        return await self._send(calls.nack(topic, subscription, positions, delay_ms))

    async def seek(
        self,
        topic: str,
        subscription: str,
        position: PositionLike | None = None,
        *,
        timestamp: TimestampLike | None = None,
    ) -> Body:
        """Move the cursor to ``position`` (or ``earliest``/``latest``), or to the first
        message published at or after ``timestamp``; the answer names where it went."""
        return await self._send(calls.seek(topic, subscription, position, timestamp))

    async def fetch(
        self,
        topic: str,
        start: PositionLike | None = None,
        *,
        max: int | None = None,
        isolation: str | None = None,
        timestamp: TimestampLike | None = None,
    ) -> Body:
        """Raw entries from ``start`` (the query's ``from``), or from the first entry
        published at or after ``timestamp``, with the aborted list."""
        return await self._send(calls.fetch(topic, start, max, isolation, timestamp))

    async def set_retention(
        self, topic: str, *, time_ms: int | None = None, size_bytes: int | None = None
    ) -> Body:
        """Set what retention deletes from ``topic`` (None: no limit of that kind)."""
        return await self._send(calls.set_retention(topic, time_ms, size_bytes))

    async def set_ttl(self, topic: str, ttl_ms: int | None) -> Body:
        """Set ``topic``'s message TTL (None: messages never expire)."""
        return await self._send(calls.set_ttl(topic, ttl_ms))

    async def list_ledgers(self, topic: str) -> list[Body]:
        """The topic's ledgers, oldest first (``ledger``, ``entries``, ``bytes``, ...)."""
        return await self._send(calls.list_ledgers(topic))
