"""Who a connection is: SASL/PLAIN authentication's outcome and the grants it carries."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from txnstream.api import Principal


class Identity(Protocol):
    """Who authenticated on a connection (the HTTP server's principals fit this)."""

    @property
    def principal(self) -> Principal: ...

    def may(self, actions: Iterable[str], topic: str) -> bool:
        """True if it may do any of ``actions`` on ``topic``."""
        ...

    def sees(self, topic: str) -> bool:
        """True if it has any grant on ``topic``."""
        ...


Authenticate = Callable[[str, str], Identity | None]
"""``(user, password)`` -> the principal (None: refused), for SASL/PLAIN."""


@dataclass(slots=True)
class Session:
    """One connection's authentication: who it is, and whether it failed (then the
    connection closes once that answer is written)."""

    identity: Identity | None = None
    failed: bool = False


SESSION: contextvars.ContextVar[Session] = contextvars.ContextVar("kafka_session")
"""The connection's :class:`Session` (set by the connection's reader; its request tasks
inherit it)."""


def may(action: str, topic: str) -> bool:
    """Whether the connection's principal may ``action`` on ``topic`` (always, without
    authentication)."""
    identity = SESSION.get(Session()).identity
    return identity is None or identity.may((action,), topic)


def principal() -> Principal | None:
    """The connection's principal (None without authentication)."""
    identity = SESSION.get(Session()).identity
    return None if identity is None else identity.principal
