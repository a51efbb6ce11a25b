"""Who a connection is: SASL/PLAIN authentication's outcome and the grants it carries."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from dataclasses import dataclass

from txnstream.api import Principal

Authenticate = Callable[[str, str], Principal | None]
"""``(user, password)`` -> the principal (None: refused), for SASL/PLAIN."""


@dataclass(slots=True)
class Session:
    """One connection's authentication: who it is, and whether it failed (then the
    connection closes once that answer is written)."""

    identity: Principal | None = None
    failed: bool = False


SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar("kafka_session")
"""The connection's :class:`Session` (set by the connection's reader; its request tasks
inherit it)."""


def may(action: str, topic: str, subscription: str | None = None) -> bool:
    """Whether the connection's principal may ``action`` on ``topic`` (and on the
    subscription a consumer group is, if named); always, without authentication. The
    grants are the engine's, the same as over HTTP."""
    identity = SESSION.get(Session()).identity
    return identity is None or identity.may(action, topic, subscription)


def principal() -> Principal | None:
    """The connection's principal (None without authentication)."""
    return SESSION.get(Session()).identity
