"""The server's edge: ASGI types, the edge middlewares and the shutdown drain.

``EdgeMiddleware`` (outermost, pure ASGI, cheap) gives each request an id, counts and
logs it and turns anything unexpected into a logged 500 ``internal``;
``BodyLimitMiddleware`` (inside the access checks) enforces the request body limit
before any parsing (413 ``too_large``) and the bound on the bodies of all requests in
progress (503).
``Drain`` ends pending long polls early when the server shuts down, so a SIGTERM is not
held up by 30-second polls.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any

from starlette.routing import BaseRoute

from ._json import error_body
from ._limits import DEFAULT_INFLIGHT_BODY_BYTES
from ._telemetry import HttpMetrics, access_log, log_access, route_label

log = logging.getLogger("txnstream.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REQUEST_ID_KEY = "txnstream.request_id"
BODY_KEY = "txnstream.body"
"""The request body the edge read (routes that read bodies raw take it from here)."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DRAIN_SLACK = 64 * 1024 * 1024
"""How much of an oversize body is read and dropped so the client sees the 413."""


class Drain:
    """Tells long-poll receives that the server is shutting down, so they end early.

    ``start()`` may be called from a signal handler or another thread.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future[None] | None = None
        self._started = False

    @property
    def started(self) -> bool:
        """True once shutdown has begun."""
        return self._started

    def future(self) -> asyncio.Future[None]:
        """A future of the running loop, done once draining starts."""
        if self._future is None:
            self._loop = asyncio.get_running_loop()
            self._future = self._loop.create_future()
            if self._started:
                self._future.set_result(None)
        return self._future

    def start(self) -> None:
        """Begin draining: pending and later long polls answer at once."""
        self._started = True
        loop, future = self._loop, self._future
        if loop is not None and future is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_set_done, future)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class EdgeMiddleware:
    """The outermost middleware: request id, metrics and access log, last-resort 500.

    Every answer passes here, the inner middlewares' refusals included: each gets an
    ``X-Request-Id``, is counted by route template and logged, and anything unexpected
    becomes a logged 500 ``internal``. One ``send`` wrapper for all of it (each layer's
    own wrapper cost a coroutine per message).
    """

    def __init__(self, app: ASGIApp, metrics: HttpMetrics, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self._prefix = os.urandom(3).hex()
        self._counter = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"{self._prefix}-{next(self._counter)}"
        scope[REQUEST_ID_KEY] = request_id
        started = time.perf_counter()
        status = 0
        header = (b"x-request-id", request_id.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", ()), header]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("request %s %s failed id=%s", scope["method"], scope["path"], request_id)
            if status:
                raise
            await send_error(
                send_with_id, 500, "internal", f"internal error (request {request_id})"
            )
        finally:
            seconds = time.perf_counter() - started
            route = route_label(scope, self.routes)
            self.metrics.observe(scope["method"], route, status or 500, seconds)
            if access_log.isEnabledFor(logging.INFO):
                log_access(scope, route, status, seconds, request_id)
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "request id=%s method=%s path=%s status=%d duration_ms=%.2f",
                    request_id,
                    scope["method"],
                    scope["path"],
                    status,
                    seconds * 1000,
                )


class BodyLimitMiddleware:
    """Reads a request body whole, within the limit (413 ``too_large`` before any
    parsing) and within the bound on the bodies of all requests in progress (503
    ``unavailable`` before reading), for the routes to take from the scope; inside the
    access checks, so an unauthenticated body is never read.

    Each body counts against ``max_inflight_bytes`` at its declared length (a chunked
    one at ``max_request_bytes``) from its headers to its answer. How slowly a body may
    arrive is the connection's business (``serve --header-timeout``): a body cut off
    for it ends here as a disconnect, and the app is not called."""

    def __init__(
        self,
        app: ASGIApp,
        max_request_bytes: int,
        max_inflight_bytes: int = DEFAULT_INFLIGHT_BODY_BYTES,
    ) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes
        self.max_inflight_bytes = max_inflight_bytes
        self.inflight = 0
        """Bytes reserved by the bodies of the requests in progress."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        # what the body may hold in memory: its declared length, or the limit when it is
        # chunked (a body declared oversize is read and dropped, never held)
        limit = self.max_request_bytes
        reserved = limit if declared is None else declared if declared <= limit else 0
        if reserved and self.inflight + reserved > self.max_inflight_bytes:
            await send_error(
                send,
                503,
                "unavailable",
                "the server is reading too many request bodies; retry shortly"
                " (serve --max-inflight-body-bytes)",
                closing=True,
            )
            return
        self.inflight += reserved
        try:
            body = await self._read_body(declared, receive)
            if body is _GONE:  # nobody to answer: counted as the 408 it mostly is
                await send_error(send, 408, "invalid_request", "the body did not arrive whole")
                return
            if body is None:
                await send_error(send, 413, "too_large", self._too_large_text())
                return
            receive = _replay(body, receive)
            scope[BODY_KEY] = body
            if body and not any(name == b"content-type" for name, _ in scope["headers"]):
                scope["headers"] = [*scope["headers"], (b"content-type", b"application/json")]
            await self.app(scope, receive, send)
        finally:
            self.inflight -= reserved

    def _too_large_text(self) -> str:
        return f"request body exceeds the limit of {self.max_request_bytes} bytes"

    async def _read_body(self, declared: int | None, receive: Receive) -> bytes | None:
        """The whole body, None (after draining what is reasonable) when it is too big,
        or :data:`_GONE` when the connection ended before it did (the client went away,
        or the server cut off a body arriving too slowly, ``serve --header-timeout``)."""
        limit = self.max_request_bytes
        too_large = declared is not None and declared > limit
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return _GONE
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                too_large = True
            if too_large:
                chunks.clear()
                if size > limit + _DRAIN_SLACK:
                    return None
            else:
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return None if too_large else b"".join(chunks)


_GONE = b"gone"
"""What :meth:`BodyLimitMiddleware._read_body` returns for a body that never came whole."""


def _content_length(scope: Scope) -> int | None:
    """The body's declared length: its ``Content-Length``, 0 with neither that nor a
    ``Transfer-Encoding`` (RFC 9112 6.3), None when unknown (chunked)."""
    length: int | None = 0
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return max(0, int(value))
            except ValueError:
                return None
        if name == b"transfer-encoding":
            length = None
    return length


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def send_error(
    send: Send, status: int, code: str, message: str, *, closing: bool = False
) -> None:
    """Answer with a contract error body straight over ASGI (no app involved);
    ``closing``: and close the connection (a body left unread on it)."""
    body = error_body(code, message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]
    if closing:
        headers.append((b"connection", b"close"))
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
