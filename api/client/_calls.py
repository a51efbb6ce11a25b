"""Every endpoint of the HTTP API once: how to build its request and read its answer.

A :class:`Call` is one request (method, path, query, JSON body) plus the function that
turns the answer into the method's result. The sync and async clients send calls built
here and differ only in how they wait; neither knows any path or field. Parameters are
named as the contract's fields (``docs/http-api.md``), ``None`` meaning "leave it out" so that
the server's default applies.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from txnstream.api import Position

from ._errors import TxnStreamHttpError, TxnStreamTransportError

T = TypeVar("T")
Body = dict[str, Any]
PositionLike = Position | str
TimestampLike = datetime | int | str
"""A publish time: an aware datetime, milliseconds since the epoch, or ISO 8601 text."""


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request of the API and how its answer becomes a result."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: dict[str, str] | None = None
    json: Any = None


def answer(response: httpx.Response) -> httpx.Response:
    """``response`` if its status is 2xx; else raise :class:`TxnStreamHttpError`."""
    if response.is_success:
        return response
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "unknown", response.text[:500]
    raise TxnStreamHttpError(message, response.status_code, code)


def unreachable(url: str, exc: httpx.TransportError) -> TxnStreamTransportError:
    """The error for a request to ``url`` that got no answer."""
    sent = not isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
    detail = str(exc) or type(exc).__name__
    return TxnStreamTransportError(f"cannot reach the server at {url}: {detail}", sent)


def _body(response: httpx.Response) -> Body:
    try:
        body: Body = answer(response).json()
    except ValueError:
        status = response.status_code
        raise TxnStreamHttpError(
            f"HTTP {status}: a body that is not JSON", status, "unknown"
        ) from None
    return body


def _created(response: httpx.Response) -> bool:
    return answer(response).status_code == 201


def _listed(field: str) -> Callable[[httpx.Response], list[Any]]:
    def read(response: httpx.Response) -> list[Any]:
        items: list[Any] = _body(response)[field]
        return items

    return read


def _field(field: str) -> Callable[[httpx.Response], dict[str, Any]]:
    def read(response: httpx.Response) -> dict[str, Any]:
        item: dict[str, Any] = _body(response)[field]
        return item

    return read


def _health(response: httpx.Response) -> Body:
    if response.status_code == 503:  # not an error envelope: the unhealthy status itself
        with suppress(ValueError):
            body = response.json()
            if isinstance(body, dict) and "status" in body:
                return body
    return _body(response)


def _seg(name: str) -> str:
    return quote(name, safe="")


def _query(**fields: object) -> dict[str, str]:
    return {name: str(v) for name, v in fields.items() if v is not None}


def _fields(**fields: object) -> Body:
    return {name: v for name, v in fields.items() if v is not None}


def _topic(topic: str) -> str:
    return f"/v1/topics/{_seg(topic)}"


def _sub(topic: str, subscription: str) -> str:
    return f"{_topic(topic)}/subscriptions/{_seg(subscription)}"


def wire_message(
    value: Any, *, key: str | None = None, properties: Mapping[str, str] | None = None
) -> Body:
    """One message as the API takes it: ``bytes`` go as ``value_b64``, the rest as ``value``.

    >>> wire_message(b"hi", key="k")
    {'value_b64': 'aGk=', 'key': 'k', 'properties': {}}
    """
    item: Body = {}
    if isinstance(value, bytes | bytearray | memoryview):
        item["value_b64"] = base64.b64encode(value).decode("ascii")
    else:
        item["value"] = value
    item["key"] = key
    item["properties"] = dict(properties or {})
    return item


def message_value(item: Mapping[str, Any]) -> Any:
    """The value of a received message or fetched entry: ``bytes`` if it came as base64.

    >>> message_value({"value_b64": "aGk="}), message_value({"value": [1]})
    (b'hi', [1])
    """
    if "value_b64" in item:
        return base64.b64decode(item["value_b64"])
    return item.get("value")


# -- health and topics


def health() -> Call[Body]:
    return Call("GET", "/v1/health", _health)


def create_topic(topic: str, partitions: int | None = None) -> Call[bool]:
    body = {} if partitions is None else {"partitions": partitions}
    return Call("PUT", _topic(topic), _created, json=body)


def list_topics() -> Call[list[str]]:
    return Call("GET", "/v1/topics", _listed("topics"))


def delete_topic(topic: str) -> Call[Body]:
    return Call("DELETE", _topic(topic), _body)


def stats(topic: str) -> Call[Body]:
    return Call("GET", f"{_topic(topic)}/stats", _body)


def produce(
    topic: str,
    messages: Sequence[Mapping[str, Any]],
    txn: str | None,
    producer: str | None,
    sequence: int | None,
) -> Call[Body]:
    body = _fields(txn=txn, producer=producer, sequence=sequence)
    return Call(
        "POST", f"{_topic(topic)}/messages", _body, json={"messages": list(messages), **body}
    )


# -- transactions


def begin(timeout_ms: int | None, label: str | None, transactional_id: str | None) -> Call[Body]:
    body = _fields(timeout_ms=timeout_ms, label=label, transactional_id=transactional_id)
    return Call("POST", "/v1/transactions", _body, json=body)


def get_transaction(txn: str) -> Call[Body]:
    return Call("GET", f"/v1/transactions/{_seg(txn)}", _body)


def list_transactions(
    state: str | None, label_prefix: str | None, older_than_ms: int | None = None
) -> Call[list[Body]]:
    params = _query(state=state, label_prefix=label_prefix, older_than_ms=older_than_ms)
    return Call("GET", "/v1/transactions", _listed("transactions"), params=params)


def end_transaction(txn: str, action: str) -> Call[Body]:
    return Call("POST", f"/v1/transactions/{_seg(txn)}/{action}", _body)


def finish(commit: Sequence[str], abort: Sequence[str], idempotence_key: str | None) -> Call[Body]:
    body: Body = {"commit": list(commit), "abort": list(abort)}
    body |= _fields(idempotence_key=idempotence_key)
    return Call("POST", "/v1/transactions/finish", _body, json=body)


# -- subscriptions


def create_subscription(
    topic: str,
    subscription: str,
    type: str | None,
    initial_position: str | None,
    isolation: str | None,
    max_redeliveries: int | None = None,
    dead_letter_topic: str | None = None,
    nack_delay_ms: int | None = None,
) -> Call[bool]:
    body = _fields(
        type=type,
        initial_position=initial_position,
        isolation=isolation,
        max_redeliveries=max_redeliveries,
        dead_letter_topic=dead_letter_topic,
        nack_delay_ms=nack_delay_ms,
    )
    return Call("PUT", _sub(topic, subscription), _created, json=body)


def list_subscriptions(topic: str) -> Call[dict[str, Body]]:
    # No endpoint of its own: the subscriptions come with the topic's stats.
    return Call("GET", f"{_topic(topic)}/stats", _field("subscriptions"))


def delete_subscription(topic: str, subscription: str) -> Call[Body]:
    return Call("DELETE", _sub(topic, subscription), _body)


def receive(
    topic: str, subscription: str, consumer: str | None, max: int | None, wait_ms: int | None
) -> Call[list[Body]]:
    params = _query(consumer=consumer, max=max, wait_ms=wait_ms)
    return Call("GET", f"{_sub(topic, subscription)}/messages", _listed("messages"), params=params)


def ack(
    topic: str,
    subscription: str,
    positions: Sequence[PositionLike],
    cumulative: bool | None,
    txn: str | None,
) -> Call[Body]:
    body = {"positions": [str(p) for p in positions], **_fields(cumulative=cumulative, txn=txn)}
    return Call("POST", f"{_sub(topic, subscription)}/ack", _body, json=body)


def nack(
    topic: str, subscription: str, positions: Sequence[PositionLike], delay_ms: int | None = None
) -> Call[Body]:
    body: Body = {"positions": [str(p) for p in positions]}
    if delay_ms is not None:
        body["delay_ms"] = delay_ms
    return Call("POST", f"{_sub(topic, subscription)}/nack", _body, json=body)


def _timestamp(when: TimestampLike) -> int | str:
    """A publish time as the API takes it: ISO 8601 text or integer milliseconds."""
    return when.isoformat() if isinstance(when, datetime) else when


def seek(
    topic: str, subscription: str, position: PositionLike | None, timestamp: TimestampLike | None
) -> Call[Body]:
    if (position is None) == (timestamp is None):
        raise ValueError("seek takes a position or a timestamp")
    body: Body = (
        {"position": str(position)} if timestamp is None else {"timestamp": _timestamp(timestamp)}
    )
    return Call("POST", f"{_sub(topic, subscription)}/seek", _body, json=body)


def fetch(
    topic: str,
    start: PositionLike | None,
    max: int | None,
    isolation: str | None,
    timestamp: TimestampLike | None = None,
) -> Call[Body]:
    when = None if timestamp is None else _timestamp(timestamp)
    params = _query(**{"from": start}, max=max, isolation=isolation, timestamp=when)
    return Call("GET", f"{_topic(topic)}/fetch", _body, params=params)


def set_retention(topic: str, time_ms: int | None, size_bytes: int | None) -> Call[Body]:
    body = {"time_ms": time_ms, "size_bytes": size_bytes}
    return Call("PUT", f"{_topic(topic)}/retention", _body, json=body)


def set_ttl(topic: str, ttl_ms: int | None) -> Call[Body]:
    return Call("PUT", f"{_topic(topic)}/ttl", _body, json={"ttl_ms": ttl_ms})


def list_ledgers(topic: str) -> Call[list[Body]]:
    return Call("GET", f"{_topic(topic)}/ledgers", _listed("ledgers"))
