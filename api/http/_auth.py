"""Authentication and per-topic authorization: the principals file, bearer tokens, and the
one table from a route to the permission it needs.

The principals file (``serve --auth FILE``) is JSON::

    {"principals": [
      {"name": "ops", "token": "sha256:<64 hex>", "admin": true},
      {"name": "billing", "token": "plain-dev-token",
       "grants": [{"topic": "orders", "actions": ["consume"]},
                  {"topic": "billing-*", "actions": ["produce", "consume", "manage"]}]}]}

A token is ``sha256:<hex of the SHA-256 of the secret>`` or, for development, the secret
itself. Only SHA-256 digests are held in memory; a presented token is hashed and compared
against every principal's digest with :func:`hmac.compare_digest` (constant time, no
early exit), so neither the file nor the timing gives a token away.

:class:`AuthMiddleware` (pure ASGI, outside the edge middleware) decides every request
from its method, path and ``Authorization: Bearer`` header alone, before any work and
before the body is read. :data:`RULES` is the one route -> permission table: ``/v1/health``
is open (so are the console's pages, ``/docs``, ``/redoc`` and ``/openapi.json``: no
data in them), ``/metrics`` is for admins, topic routes need an action on the topic named
in the path, and everything else (transactions, the topic list, unknown routes) needs a
known token. Transactions are checked by
owner in the engine (the route passes ``principal=``); ``GET /v1/topics`` lists only
the topics a principal has a grant on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Request

from txnstream.api import ForbiddenError, Principal

from ._access import PRINCIPAL_KEY, Refusals, refuse
from ._edge import ASGIApp, Receive, Scope, Send

log = logging.getLogger("txnstream.auth")

ACTIONS = ("produce", "consume", "manage")
"""``produce``: send (also in transactions); ``consume``: subscribe, receive, ack, nack,
seek, fetch, stats; ``manage``: create and delete the topic and its subscriptions."""

_NAME = re.compile(r"[A-Za-z0-9._@:+-]{1,200}")
_TOPIC_GRANT = re.compile(r"[A-Za-z0-9._-]{0,200}\*?")
_DIGEST = re.compile(r"sha256:([0-9a-fA-F]{64})")
_BEARER = re.compile(r"bearer[ \t]+(\S+)[ \t]*", re.IGNORECASE)


class AuthFileError(ValueError):
    """The principals file cannot be read or is not in the expected format."""


@dataclass(frozen=True, slots=True)
class Grant:
    """Actions on a topic name, or on every name with a prefix (``"billing-*"``)."""

    topic: str
    actions: frozenset[str]

    def matches(self, topic: str) -> bool:
        """True if ``topic`` is this grant's name or starts with its prefix."""
        if self.topic.endswith("*"):
            return topic.startswith(self.topic[:-1])
        return topic == self.topic


@dataclass(frozen=True, slots=True)
class Identity:
    """A principal of the file: its name, whether it is an admin, and its grants."""

    name: str
    admin: bool
    grants: tuple[Grant, ...]

    @property
    def principal(self) -> Principal:
        """The engine's view of it (who owns transactions, scoped names)."""
        return Principal(self.name, self.admin)

    def may(self, actions: Iterable[str], topic: str) -> bool:
        """True if it may do any of ``actions`` on ``topic``."""
        if self.admin:
            return True
        wanted = set(actions)
        return any(g.matches(topic) and wanted & g.actions for g in self.grants)

    def sees(self, topic: str) -> bool:
        """True if it has any grant on ``topic`` (or is an admin)."""
        return self.admin or any(g.matches(topic) for g in self.grants)


def token_digest(token: str) -> bytes:
    """The SHA-256 of a token, as the file's ``sha256:`` form holds it."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def _fail(where: str, problem: str) -> AuthFileError:
    return AuthFileError(f"{where}: {problem}")


def _strict_keys(item: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(item) - allowed
    if unknown:
        raise _fail(where, f"unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}")


def _grant(raw: Any, where: str) -> Grant:
    if not isinstance(raw, dict):
        raise _fail(where, 'a grant is an object {"topic": ..., "actions": [...]}')
    _strict_keys(raw, {"topic", "actions"}, where)
    topic, actions = raw.get("topic"), raw.get("actions")
    if not isinstance(topic, str) or not topic or not _TOPIC_GRANT.fullmatch(topic):
        raise _fail(where, f"topic must be a topic name or a prefix ending in '*', not {topic!r}")
    if not isinstance(actions, list) or not actions:
        raise _fail(where, f"actions must be a non-empty list of {', '.join(ACTIONS)}")
    for action in actions:
        if action not in ACTIONS:
            raise _fail(where, f"unknown action {action!r}; actions are {', '.join(ACTIONS)}")
    return Grant(topic, frozenset(actions))


def _principal(raw: Any, where: str) -> tuple[bytes, Identity]:
    if not isinstance(raw, dict):
        raise _fail(where, "a principal is an object with name, token, admin and grants")
    _strict_keys(raw, {"name", "token", "admin", "grants"}, where)
    name, token = raw.get("name"), raw.get("token")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _fail(where, f"name must be 1-200 characters of [A-Za-z0-9._@:+-], not {name!r}")
    where = f"{where} ({name})"
    if not isinstance(token, str) or not token.strip():
        raise _fail(where, "token must be a non-empty string ('sha256:<64 hex>' or plain)")
    if token.startswith("sha256:"):
        match = _DIGEST.fullmatch(token)
        if match is None:
            raise _fail(where, "a 'sha256:' token must be followed by exactly 64 hex digits")
        digest = bytes.fromhex(match.group(1))
    else:
        digest = token_digest(token)
    admin = raw.get("admin", False)
    if not isinstance(admin, bool):
        raise _fail(where, "admin must be true or false")
    grants_raw = raw.get("grants", [])
    if not isinstance(grants_raw, list):
        raise _fail(where, "grants must be a list")
    grants = tuple(_grant(g, f"{where} grant {i}") for i, g in enumerate(grants_raw))
    return digest, Identity(name, admin, grants)


def parse_principals(document: Any, source: str = "auth file") -> list[tuple[bytes, Identity]]:
    """The ``(token digest, identity)`` pairs of a principals document (parsed JSON)."""
    if not isinstance(document, dict) or not isinstance(document.get("principals"), list):
        raise _fail(source, 'expected an object {"principals": [...]}')
    _strict_keys(document, {"principals"}, source)
    entries = [
        _principal(raw, f"{source}: principal {i}") for i, raw in enumerate(document["principals"])
    ]
    names: set[str] = set()
    digests: set[bytes] = set()
    for digest, identity in entries:
        if identity.name in names:
            raise _fail(source, f"principal name {identity.name!r} appears twice")
        if digest in digests:
            raise _fail(source, f"principal {identity.name!r} has the same token as another")
        names.add(identity.name)
        digests.add(digest)
    return entries


def read_principals(path: Path) -> list[tuple[bytes, Identity]]:
    """Read and check the principals file at ``path`` (blocking: a small file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise AuthFileError(f"cannot read the auth file {path}: {exc.strerror or exc}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise AuthFileError(f"the auth file {path} is not valid JSON: {exc}") from None
    return parse_principals(document, str(path))


class Authenticator:
    """The principals of a file, held as token digests; :meth:`reload` re-reads it.

    A reload swaps the whole table in one assignment, so a request sees either the old
    principals or the new ones; a file that fails to load keeps the old ones.
    """

    def __init__(self, entries: Sequence[tuple[bytes, Identity]], path: Path | None = None) -> None:
        self.path = path
        self._entries = tuple(entries)
        self._reload_lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path) -> Authenticator:
        """Load ``path``; raises :class:`AuthFileError` with a message naming the problem."""
        return cls(read_principals(path), path)

    @property
    def names(self) -> list[str]:
        """The principals' names."""
        return [identity.name for _, identity in self._entries]

    def reload(self) -> bool:
        """Re-read the file (blocking); True if the new principals are in effect."""
        if self.path is None:
            return False
        with self._reload_lock:
            try:
                entries = read_principals(self.path)
            except AuthFileError as exc:
                log.error("auth file not reloaded, keeping the previous principals: %s", exc)
                return False
            self._entries = tuple(entries)
        log.warning("auth file %s reloaded: %d principal(s)", self.path, len(entries))
        return True

    def identify(self, token: str) -> Identity | None:
        """The principal whose token this is, or None (constant time in the token)."""
        digest = token_digest(token)
        found: Identity | None = None
        for known, identity in self._entries:  # no early exit: the time says nothing
            if hmac.compare_digest(digest, known):
                found = identity
        return found


# -- the route table -------------------------------------------------------------------

OPEN = "open"
AUTHENTICATED = "authenticated"
ADMIN = "admin"

_TOPIC = r"/v1/topics/(?P<topic>[^/]+)"
_SUB = _TOPIC + r"/subscriptions/[^/]+"

RULES: list[tuple[str, re.Pattern[str], str | tuple[str, ...]]] = [
    (method, re.compile(path), need)
    for method, path, need in (
        ("GET", r"/v1/health", OPEN),
        ("GET", r"/metrics", ADMIN),
        # The console's pages and assets carry no data (a browser cannot attach a token
        # to a page load); the fragments they fetch with the page's token do: admin.
        ("GET", r"/ui/?|/ui/transactions|/ui/topics/[^/]+|/ui/static/[^/]+", OPEN),
        ("GET", r"/ui/fragments/.*", ADMIN),
        # The API's description and its docs pages hold no data either; the docs ask for
        # the token (Swagger UI's Authorize) and send it with the requests they try.
        ("GET", r"/|/openapi\.json|/docs|/docs/oauth2-redirect|/redoc", OPEN),
        ("GET", r"/static-offline-docs/.+", OPEN),
        # its topics are in the body: the route checks each with require_topics()
        ("POST", r"/v1/batches", AUTHENTICATED),
        ("PUT", _TOPIC, ("manage",)),
        ("DELETE", _TOPIC, ("manage",)),
        ("GET", _TOPIC + "/stats", ("consume",)),
        ("POST", _TOPIC + "/messages", ("produce",)),
        ("GET", _TOPIC + "/fetch", ("consume",)),
        ("GET", _TOPIC + "/ledgers", ("consume",)),
        ("PUT", _TOPIC + "/offload", ("manage",)),
        ("POST", _TOPIC + "/offload/run", ("manage",)),
        ("PUT", _TOPIC + "/retention", ("manage",)),
        ("PUT", _SUB, ("consume", "manage")),  # subscribing creates it
        ("DELETE", _SUB, ("manage",)),
        ("GET", _SUB + "/messages", ("consume",)),
        ("POST", _SUB + "/ack", ("consume",)),
        ("POST", _SUB + "/nack", ("consume",)),
        ("POST", _SUB + "/seek", ("consume",)),
    )
]
"""``(method, path, need)``: ``need`` is :data:`OPEN`, :data:`ADMIN` or the actions of
which one is needed on the path's topic. A request no rule names needs a known token
(:data:`AUTHENTICATED`): transactions (the engine checks their owner), the topic list
(filtered by grants). A test checks that every route of the
app with a topic in its path has a rule here."""


def need_of(method: str, path: str) -> tuple[str | tuple[str, ...], str | None]:
    """What a request needs and the topic it names (from :data:`RULES`)."""
    method = "GET" if method == "HEAD" else method
    for rule_method, pattern, need in RULES:
        if rule_method == method and (match := pattern.fullmatch(path)):
            return need, match.groupdict().get("topic")
    return AUTHENTICATED, None


def bearer_token(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if any."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            match = _BEARER.fullmatch(value.decode("latin-1"))
            return match.group(1) if match else None
    return None


class AuthMiddleware:
    """401/403 before any work: who is asking (the token) and may they (:data:`RULES`).

    Puts the caller's :class:`Identity` in the scope for the routes (:func:`identity_of`).
    """

    def __init__(self, app: ASGIApp, authenticator: Authenticator, refusals: Refusals) -> None:
        self.app = app
        self.authenticator = authenticator
        self.refusals = refusals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        need, topic = need_of(scope["method"], scope["path"])
        if need == OPEN:
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        identity = None if token is None else self.authenticator.identify(token)
        if identity is None:
            reason = "no_token" if token is None else "unknown_token"
            challenge = b'Bearer realm="txnstream"'
            if token is not None:
                challenge += b', error="invalid_token"'
            text = (
                "authentication required: send 'Authorization: Bearer <token>'"
                if token is None
                else "unknown token"
            )
            await refuse(send, scope, self.refusals, 401, reason, text, None, challenge)
            return
        if need == ADMIN and not identity.admin:
            text = f"principal {identity.name!r} is not an admin"
            await refuse(send, scope, self.refusals, 403, "not_admin", text, identity.name)
            return
        if isinstance(need, tuple) and not identity.may(need, topic or ""):
            text = f"principal {identity.name!r} may not {' or '.join(need)} topic {topic!r}"
            await refuse(send, scope, self.refusals, 403, "no_grant", text, identity.name)
            return
        scope[PRINCIPAL_KEY] = identity
        await self.app(scope, receive, send)


def identity_of(request: Request) -> Identity | None:
    """The authenticated caller (None when the server runs without ``--auth``)."""
    identity: Identity | None = request.scope.get(PRINCIPAL_KEY)
    return identity


def principal_of(request: Request) -> Principal | None:
    """The caller as the engine's ``principal=`` (None: unrestricted, no ``--auth``)."""
    identity = identity_of(request)
    return None if identity is None else identity.principal


def require_topics(request: Request, action: str, topics: Iterable[str]) -> None:
    """For a route whose topics are in its body (``POST /v1/batches``): raise
    :class:`~txnstream.api.ForbiddenError` unless the caller may ``action`` every one of them."""
    identity = identity_of(request)
    if identity is None:
        return
    for topic in topics:
        if not identity.may((action,), topic):
            refused = ForbiddenError(
                f"principal {identity.name!r} may not {action} topic {topic!r}"
            )
            refused.reason = "no_grant"  # type: ignore[attr-defined]  # for the refusal count
            raise refused
