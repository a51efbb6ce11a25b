r"""Authentication and per-topic authorization: the principals file, bearer tokens, and the
one table from a route to the permission it needs.

The principals file (``serve --auth FILE``) is JSON::

    {"principals": [
      {"name": "ops", "token": "sha256:<64 hex>", "admin": true},
      {"name": "billing", "token": "plain-dev-token",
       "grants": [{"topic": "orders", "actions": ["consume"], "subscriptions": ["billing-*"]},
                  {"topic": "billing-*", "actions": ["produce", "consume", "manage"]}]}]}

A grant's ``actions`` are :data:`~txnstream.api.PERMISSIONS`; its ``subscriptions`` (names
or prefixes ending in ``*``; all of the topic's when absent) are those its actions cover.
What they mean is the engine's (:mod:`txnstream.api._grants`): this module only reads the
file into :class:`~txnstream.api.Principal`\ s and asks them.

A token is ``sha256:<hex of the SHA-256 of the secret>`` or, for development, the secret
itself. Only SHA-256 digests are held in memory; a presented token is hashed and compared
against every principal's digest with :func:`hmac.compare_digest` (constant time, no
early exit), so neither the file nor the timing gives a token away.

:class:`AuthMiddleware` (pure ASGI, outside the edge middleware) decides every request
from its method, path and ``Authorization: Bearer`` header alone, before any work and
before the body is read. :data:`RULES` says which engine operation each route is:
``/v1/health`` is open (so are the console's pages, ``/docs``, ``/redoc`` and
``/openapi.json``: no data in them), ``/metrics`` is for admins, a topic route is an
operation on the topic (and subscription) named in the path, which the principal must
:meth:`may_do <txnstream.api.Principal.may_do>`, and everything else (transactions, the
topic list, unknown routes) needs a known token. Transactions are checked by owner in the
engine, and reading uncommitted data by the engine too (the routes pass ``principal=``);
``GET /v1/topics`` lists only the topics a principal has a grant on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastapi import Request

from txnstream.api import OPERATIONS, PERMISSIONS, ForbiddenError, Grant, Principal

from ._access import PRINCIPAL_KEY, Refusals, refuse
from ._edge import ASGIApp, Receive, Scope, Send

log = logging.getLogger("txnstream.auth")

_NAME = re.compile(r"[A-Za-z0-9._@:+-]{1,200}")
_PATTERN = re.compile(r"[A-Za-z0-9._-]{0,200}\*?")
_DIGEST = re.compile(r"sha256:([0-9a-fA-F]{64})")
_BEARER = re.compile(r"bearer[ \t]+(\S+)[ \t]*", re.IGNORECASE)


class AuthFileError(ValueError):
    """The principals file cannot be read or is not in the expected format."""


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
    _strict_keys(raw, {"topic", "actions", "subscriptions"}, where)
    topic, actions = raw.get("topic"), raw.get("actions")
    if not isinstance(topic, str) or not topic or not _PATTERN.fullmatch(topic):
        raise _fail(where, f"topic must be a topic name or a prefix ending in '*', not {topic!r}")
    known = ", ".join(PERMISSIONS)
    if not isinstance(actions, list) or not actions:
        raise _fail(where, f"actions must be a non-empty list of {known}")
    for action in actions:
        if action not in PERMISSIONS:
            raise _fail(where, f"unknown action {action!r}; actions are {known}")
    subscriptions = raw.get("subscriptions")
    if subscriptions is None:  # the file format before subscription rights: all of them
        return Grant(topic, frozenset(actions))
    if (
        not isinstance(subscriptions, list)
        or not subscriptions
        or not all(isinstance(p, str) and p and _PATTERN.fullmatch(p) for p in subscriptions)
    ):
        raise _fail(
            where,
            "subscriptions must be a non-empty list of subscription names or prefixes"
            f" ending in '*', not {subscriptions!r}",
        )
    return Grant(topic, frozenset(actions), tuple(subscriptions))


def _principal(raw: Any, where: str) -> tuple[bytes, Principal]:
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
    return digest, Principal(name, admin, grants)


def parse_principals(document: Any, source: str = "auth file") -> list[tuple[bytes, Principal]]:
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


def read_principals(path: Path) -> list[tuple[bytes, Principal]]:
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

    def __init__(
        self, entries: Sequence[tuple[bytes, Principal]], path: Path | None = None
    ) -> None:
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

    def identify(self, token: str) -> Principal | None:
        """The principal whose token this is, or None (constant time in the token)."""
        digest = token_digest(token)
        found: Principal | None = None
        for known, identity in self._entries:  # no early exit: the time says nothing
            if hmac.compare_digest(digest, known):
                found = identity
        return found


# -- the route table -------------------------------------------------------------------

OPEN = "open"
AUTHENTICATED = "authenticated"
ADMIN = "admin"

_TOPIC = r"/v1/topics/(?P<topic>[^/]+)"
_SUB = _TOPIC + r"/subscriptions/(?P<sub>[^/]+)"

RULES: list[tuple[str, re.Pattern[str], str]] = [
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
        ("PUT", _TOPIC, "create_topic"),
        ("DELETE", _TOPIC, "delete_topic"),
        ("GET", _TOPIC + "/stats", "stats"),
        ("POST", _TOPIC + "/messages", "produce"),
        ("GET", _TOPIC + "/fetch", "fetch"),
        ("GET", _TOPIC + "/ledgers", "ledgers"),
        ("PUT", _TOPIC + "/offload", "set_offload"),
        ("POST", _TOPIC + "/offload/run", "run_offload"),
        ("PUT", _TOPIC + "/retention", "set_retention"),
        ("PUT", _TOPIC + "/ttl", "set_ttl"),
        ("PUT", _SUB, "create_subscription"),
        ("DELETE", _SUB, "delete_subscription"),
        ("GET", _SUB + "/messages", "receive"),
        ("POST", _SUB + "/ack", "ack"),
        ("POST", _SUB + "/nack", "nack"),
        ("POST", _SUB + "/seek", "seek"),
    )
]
"""``(method, path, need)``: ``need`` is :data:`OPEN`, :data:`ADMIN` or the engine
operation (:data:`~txnstream.api._grants.OPERATIONS`) the route is, on the path's topic and
subscription: what that needs is the engine's rule, not this table's. A request no rule
names needs a known token (:data:`AUTHENTICATED`): transactions (the engine checks their
owner), the topic list (filtered by grants). A test checks that every route of the app with
a topic in its path has a rule here."""


def need_of(method: str, path: str) -> tuple[str, str | None, str | None]:
    """What a request needs, and the topic and subscription it names (:data:`RULES`)."""
    method = "GET" if method == "HEAD" else method
    for rule_method, pattern, need in RULES:
        if rule_method == method and (match := pattern.fullmatch(path)):
            names = match.groupdict()
            return need, names.get("topic"), names.get("sub")
    return AUTHENTICATED, None, None


def bearer_token(scope: Scope) -> str | None:
    """The token of an ``Authorization: Bearer`` header, if any."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            match = _BEARER.fullmatch(value.decode("latin-1"))
            return match.group(1) if match else None
    return None


class AuthMiddleware:
    """401/403 before any work: who is asking (the token) and may they (:data:`RULES`).

    Puts the caller's :class:`~txnstream.api.Principal` in the scope for the routes
    (:func:`principal_of`).
    """

    def __init__(self, app: ASGIApp, authenticator: Authenticator, refusals: Refusals) -> None:
        self.app = app
        self.authenticator = authenticator
        self.refusals = refusals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        need, topic, sub = need_of(scope["method"], scope["path"])
        if need == OPEN:
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        principal = None if token is None else self.authenticator.identify(token)
        if principal is None:
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
        if need == ADMIN and not principal.admin:
            text = f"principal {principal.name!r} is not an admin"
            await refuse(send, scope, self.refusals, 403, "not_admin", text, principal.name)
            return
        if need in OPERATIONS and not principal.may_do(need, topic or "", sub):
            on = f"topic {topic!r}" if sub is None else f"subscription {sub!r} of topic {topic!r}"
            text = (
                f"principal {principal.name!r} may not {need.replace('_', ' ')} on {on}"
                f" (it needs {' or '.join(OPERATIONS[need])} there)"
            )
            await refuse(send, scope, self.refusals, 403, "no_grant", text, principal.name)
            return
        scope[PRINCIPAL_KEY] = principal
        await self.app(scope, receive, send)


def principal_of(request: Request) -> Principal | None:
    """The authenticated caller, as the engine's ``principal=`` (None without ``--auth``:
    unrestricted)."""
    principal: Principal | None = request.scope.get(PRINCIPAL_KEY)
    return principal


def require_topics(request: Request, operation: str, topics: Iterable[str]) -> None:
    """For a route whose topics are in its body (``POST /v1/batches``): raise
    :class:`~txnstream.api.ForbiddenError` unless the caller may do ``operation`` on
    every one of them."""
    principal = principal_of(request)
    if principal is None:
        return
    for topic in topics:
        if not principal.may_do(operation, topic):
            refused = ForbiddenError(
                f"principal {principal.name!r} may not {operation} topic {topic!r}"
            )
            refused.reason = "no_grant"  # type: ignore[attr-defined]  # for the refusal count
            raise refused
