"""Who may talk to the server at all: the Host and Origin rules, and refusals' log and count.

:class:`GuardMiddleware` (pure ASGI, the outermost layer) answers before anything else:

* a request with more than one ``Host`` header, or one in the ``user@host`` form, is 400
  ``invalid_request`` (RFC 9112, 3.2), whatever the bind;
* bound to a loopback address, a request whose ``Host`` names anything but the bound
  address, ``localhost`` or an ``--allowed-host`` name is 400 ``invalid_request``: a
  page from another site that re-points its own name at 127.0.0.1 (DNS rebinding)
  still sends its own name as ``Host``;
* a request with an ``Origin`` header that is neither the server's own origin (the
  scheme, host and port the request was sent to, so ``/docs`` keeps working) nor an
  allowed ``--cors-origin`` is 403 ``forbidden``: browsers send ``Origin`` on a
  cross-site ``fetch`` and cannot forge it, while curl and programs send none;
* a request whose ``Sec-Fetch-Site`` is ``cross-site`` or ``same-site`` is 403
  ``forbidden`` unless its ``Origin`` is an allowed ``--cors-origin`` (``/v1/health``
  excepted): browsers send no ``Origin`` on an image, script or link GET from another
  page, but they do send this header, which a page cannot set either. So an
  ``<img src=".../messages?consumer=evil">`` elsewhere attaches no consumer. Clients
  that send neither header (curl, programs, old browsers) are judged by the rules
  above alone.

Every 401/403 (and Host refusal) is logged with the principal or ``anonymous``, the
method and the path, never the token, and counted in ``/metrics`` as
``txnstream_http_refused_requests_total{status, reason}`` (:class:`Refusals`).
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, generate_latest

from ._edge import ASGIApp, Receive, Scope, Send
from ._json import error_body

if TYPE_CHECKING:
    from ._auth import Authenticator

log = logging.getLogger("txnstream.auth")

PRINCIPAL_KEY = "txnstream.principal"
"""The scope key of the authenticated caller's :class:`~txnstream.api.Principal`."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_OTHER_SITES = frozenset({b"cross-site", b"same-site"})
"""``Sec-Fetch-Site`` values of a request a page of another origin made the browser send."""
_ANY_SITE_PATHS = frozenset({"/v1/health"})
"""Routes any page may reach (health says nothing and changes nothing)."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (``127.0.0.0/8``, ``::1``)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@functools.lru_cache(maxsize=256)  # a server sees few Host values; URL parsing is ~4 us
def _origin(scheme: str, netloc: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin, defaults filled in; None if malformed."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or scheme not in _DEFAULT_PORTS:
        return None
    return scheme, host, port if port is not None else _DEFAULT_PORTS[scheme]


def parse_origin(text: str) -> tuple[str, str, int] | None:
    """An ``Origin`` header (``scheme://host[:port]``) as a comparable triple."""
    scheme, sep, rest = text.strip().partition("://")
    if not sep or not rest or "/" in rest:
        return None
    return _origin(scheme.lower(), rest)


@dataclass
class AccessPolicy:
    """How the app admits requests: tokens (``auth``), hosts, cross-site origins.

    ``allowed_hosts`` None turns the Host rule off (a non-loopback bind, or an app made
    without a bound address); ``cors_origins`` are the extra origins allowed to call.
    """

    auth: Authenticator | None = None
    allowed_hosts: frozenset[str] | None = None
    cors_origins: tuple[str, ...] = ()
    refusals: Refusals = field(default_factory=lambda: Refusals())

    @classmethod
    def for_bind(
        cls,
        host: str,
        *,
        auth: Authenticator | None = None,
        allowed_hosts: Iterable[str] = (),
        cors_origins: Iterable[str] = (),
    ) -> AccessPolicy:
        """The policy of a server bound to ``host`` (the Host rule only for loopback)."""
        hosts = None
        if is_loopback(host):
            hosts = {host.strip("[]").lower(), "localhost"}
            if host.lower() == "localhost":
                hosts |= {"127.0.0.1", "::1"}
            hosts |= {h.strip().strip("[]").lower() for h in allowed_hosts if h.strip()}
        return cls(
            auth=auth,
            allowed_hosts=None if hosts is None else frozenset(hosts),
            cors_origins=tuple(o.strip().rstrip("/") for o in cors_origins if o.strip()),
        )


class Refusals:
    """Logs and counts refused requests (401, 403 and the Host rule's 400)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.counter = Counter(
            "txnstream_http_refused_requests",
            "Requests refused by authentication, authorization, or the Host and Origin rules.",
            ["status", "reason"],
            registry=self.registry,
        )

    def record(
        self, status: int, reason: str, principal: str | None, method: str, path: str
    ) -> None:
        """Log one refusal (never the token) and count it."""
        self.counter.labels(str(status), reason).inc()
        log.warning(
            "refused %d %s: principal=%s method=%s path=%s",
            status,
            reason,
            principal or "anonymous",
            method,
            path,
        )

    def render(self) -> bytes:
        """The counter in Prometheus text, for ``/metrics``."""
        return generate_latest(self.registry)


_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden"}


async def refuse(
    send: Send,
    scope: Scope,
    refusals: Refusals,
    status: int,
    reason: str,
    message: str,
    principal: str | None,
    challenge: bytes | None = None,
) -> None:
    """Record the refusal and answer it with a contract error body."""
    refusals.record(status, reason, principal, scope["method"], scope["path"])
    body = error_body(_CODES[status], message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]
    if challenge is not None:
        headers.append((b"www-authenticate", challenge))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardMiddleware:
    """The Host and Origin rules (see the module docstring), before anything else."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy) -> None:
        self.app = app
        self.policy = policy
        self._cors = {o for o in map(parse_origin, policy.cors_origins) if o is not None}
        self._any_origin = "*" in policy.cors_origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host_header = origin_header = fetch_site = None
        hosts = 0
        for name, value in scope["headers"]:
            if name == b"host":
                host_header = value.decode("latin-1")
                hosts += 1
            elif name == b"origin":
                origin_header = value.decode("latin-1")
            elif name == b"sec-fetch-site":
                fetch_site = value.strip().lower()
        if hosts > 1 or (host_header is not None and "@" in host_header):
            # two Hosts (a proxy and the server may each read another one) or a userinfo
            # form (urlsplit would read "evil@127.0.0.1" as 127.0.0.1): RFC 9112 3.2 says 400
            shown = (host_header or "")[:100]
            text = f"Host {shown!r} is malformed or repeated: one Host header, host[:port]"
            await refuse(send, scope, self.policy.refusals, 400, "host", text, None)
            return
        allowed = self.policy.allowed_hosts
        if allowed is None and origin_header is None and fetch_site is None:
            await self.app(scope, receive, send)  # (nothing to check: no URL parsing)
            return
        scheme = str(scope.get("scheme", "http"))
        own = _origin(scheme, host_header) if host_header else None
        if allowed is not None and (own is None or own[1].strip("[]").lower() not in allowed):
            shown = (host_header or "")[:100]
            text = f"Host {shown!r} is not a name of this server (see serve --allowed-host)"
            await refuse(send, scope, self.policy.refusals, 400, "host", text, None)
            return
        if origin_header is not None and not self._origin_allowed(origin_header, own):
            text = (
                f"cross-origin request from {origin_header[:100]!r} refused"
                " (allow an origin with serve --cors-origin)"
            )
            await refuse(send, scope, self.policy.refusals, 403, "origin", text, None)
            return
        if (
            fetch_site in _OTHER_SITES
            and scope["path"] not in _ANY_SITE_PATHS
            and not (origin_header is not None and self._cross_origin_allowed(origin_header))
        ):
            text = (
                f"{fetch_site.decode('latin-1')} request refused (Sec-Fetch-Site); a browser"
                " page may call only from an origin allowed with serve --cors-origin"
            )
            await refuse(send, scope, self.policy.refusals, 403, "fetch_site", text, None)
            return
        await self.app(scope, receive, send)

    def _cross_origin_allowed(self, header: str) -> bool:
        return self._any_origin or parse_origin(header) in self._cors

    def _origin_allowed(self, header: str, own: tuple[str, str, int] | None) -> bool:
        if self._any_origin:
            return True
        origin = parse_origin(header)
        if origin is None:  # "null" (sandboxed pages, file://) or garbage
            return False
        return origin == own or origin in self._cors
