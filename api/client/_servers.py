"""Which server a request goes to: several given URLs, the active one among them.

Several ``serve --store postgresql://...`` processes may share one database; one is active,
the others are standbys. A standby answers ``GET /v1/health`` with 503 ``standby`` and
every other route with 307 to the active's advertised URL (or 503 ``unavailable`` while no
active is known). A client given ``"http://a:8080,http://b:8080"`` therefore:

* sends each request to the server that answered last (the first one at the start);
* follows a 307 itself, to a server it was given: it sends the same method, path, query
  and body there (never to a ``Location`` it was not given while it holds a token, since
  the token is for those servers only; without a token it follows any ``Location``);
* on a refused connection or a standby's 503, tries the next URL, going round the list
  with a bounded backoff until ``failover_timeout`` seconds have passed.

Nothing is retried once a request may have reached an active server: an answer is final,
and a connection that failed after it was made raises as before (the request may have
been applied). A standby's answers carry ``txnstream-role: standby``, so a 503 from a
standby (safe to send elsewhere: it applied nothing) is told apart from an active's.

This module is sans-I/O: :class:`Attempt` says where to send next and how long to wait;
the two clients do the sending and the waiting.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from urllib.parse import urljoin, urlsplit

import httpx

from ._errors import TxnStreamHttpError, TxnStreamTransportError

ROLE_HEADER = "txnstream-role"
"""Response header a standby sets on every answer (``standby``)."""

_MAX_REDIRECTS = 5
_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 1.0


def split_urls(url: str | Sequence[str]) -> list[str]:
    """The server URLs of ``url``: a list, or one string with commas between URLs."""
    parts = url.split(",") if isinstance(url, str) else list(url)
    urls = [part.strip().rstrip("/") for part in parts if part.strip()]
    if not urls:
        raise ValueError("no server URL given")
    for one in urls:
        if urlsplit(one).scheme not in ("http", "https") or not urlsplit(one).netloc:
            raise ValueError(f"not an http(s) server URL: {one!r}")
    return urls


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url``, with the scheme's default port made explicit."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


class Servers:
    """The URLs a client was given and the one that answered last."""

    def __init__(self, url: str | Sequence[str], *, failover_timeout: float, token: bool) -> None:
        self.urls = split_urls(url)
        self.failover_timeout = failover_timeout
        self._token = token
        self._current = 0
        self._origins = {origin(u): i for i, u in enumerate(self.urls)}

    @property
    def current(self) -> str:
        """The server requests go to first."""
        return self.urls[self._current]

    def attempt(self) -> Attempt:
        """The state of one request's tries, starting at the current server."""
        return Attempt(self)

    def settle(self, url: str) -> None:
        """``url`` answered: later requests start there (if it is one of ours)."""
        index = self._origins.get(origin(url))
        if index is not None:
            self._current = index


class Attempt:
    """Where one request goes next: :meth:`failed` and :meth:`answered` return the
    seconds to wait before the next try, or raise when the request is over."""

    def __init__(self, servers: Servers) -> None:
        self._servers = servers
        self.url = servers.current
        self._index = servers._current
        self._tried = 0
        self._redirects = 0
        self._followed = 0
        self._backoff = _BACKOFF_FIRST
        self._deadline = time.monotonic() + servers.failover_timeout
        self._foreign: str | None = None

    def _may_move(self) -> bool:
        """False for a client of one server that was never redirected: nothing to fail
        over to, so it gets today's answer at once."""
        return len(self._servers.urls) > 1 or self._redirects > 0

    def _next(self, error: TxnStreamHttpError) -> float:
        """Move to the next given URL; the wait before trying it (or raise ``error``)."""
        servers = self._servers
        if not self._may_move():
            raise error
        self._tried += 1
        self._index = (self._index + 1) % len(servers.urls)
        self.url = servers.urls[self._index]
        delay = 0.0
        if self._tried % len(servers.urls) == 0:  # a whole round failed: back off
            delay, self._backoff = self._backoff, min(self._backoff * 2, _BACKOFF_MAX)
        now = time.monotonic()
        if now >= self._deadline:
            if self._foreign is not None:
                raise TxnStreamHttpError(
                    f"redirected to {self._foreign}, which is not one of the servers given"
                    " (the token is sent to those only); give its URL too",
                    503,
                    "unavailable",
                )
            raise error
        return min(delay, self._deadline - now)  # the last try comes at the deadline

    def failed(self, exc: httpx.TransportError) -> float:
        """No answer came from :attr:`url`: the next server is tried only when no
        connection could be made."""
        from ._calls import unreachable

        error = unreachable(self.url, exc)
        if error.sent:
            raise error from exc  # it may have arrived: never send it twice
        return self._next(error)

    def answered(self, response: httpx.Response) -> float | None:
        """``None`` when ``response`` is the request's answer; else the wait before the
        next try (a redirect to the active, or a standby that cannot serve)."""
        if response.status_code in (307, 308) and "location" in response.headers:
            target = urljoin(str(response.url), response.headers["location"])
            self._redirects += 1
            known = self._servers._origins.get(origin(target))
            if known is not None or not self._servers._token:
                self._followed += 1  # a loop of redirects followed: stop
                if self._followed > _MAX_REDIRECTS:
                    detail = f"too many redirects, the last to {target}"
                    raise TxnStreamTransportError(detail, True)
            if known is not None:
                self._index = known
                self.url = self._servers.urls[known]
                return 0.0
            if not self._servers._token:
                parts = urlsplit(target)
                self.url = f"{parts.scheme}://{parts.netloc}"
                return 0.0
            self._foreign = target
            return self._next(TxnStreamTransportError(f"redirected to {target}", False))
        standby = response.headers.get(ROLE_HEADER) == "standby"
        if response.status_code == 503 and standby and self._may_move():
            detail = f"{self.url} is a standby and knows no active server"
            return self._next(TxnStreamTransportError(detail, False))
        self._servers.settle(self.url)
        return None
