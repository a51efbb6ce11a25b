"""Connection bounds for ``serve``: a cap on open connections that refuses only the new
ones, and a deadline for connections that never send a request.

uvicorn's own ``limit_concurrency`` answers 503 to *every* request while the count of
open connections is over the limit, so a crowd of idle sockets (which uvicorn never
times out before their first request) locks out the clients already being served.
Here the check happens when a connection is accepted: past the bound it gets a 503
``unavailable`` and is closed at once, and the connections already open carry on. A
connection that sends nothing within the keep-alive time is closed, as an idle
keep-alive connection is.

Slow clients: a request's head must arrive whole within ``--header-timeout`` of its
first byte and hold at most :data:`MAX_HEADER_BYTES`, and its body must then arrive at
:data:`MIN_BODY_RATE` on average after the same grace (its deadline is ``header_timeout
+ received / MIN_BODY_RATE`` seconds after the head, Apache ``mod_reqtimeout``'s rule);
else the connection gets a 408 (431) and is closed. uvicorn (httptools) waits for the
rest of a head or body for ever and keeps every header it is sent, so a crowd sending
half a request each held its connection slots (and memory) without end; uvicorn's h11
protocol bounds a head's size only, and neither has a deadline. The clocks hook
httptools' parser callbacks (a dependency; with h11 they never start) and cost a few
attribute writes a request: one timer per server looks at every connection
:data:`_SWEEPS_PER_TIMEOUT` times per timeout (so a cut comes up to a quarter of it, at
most 1 s, late), where a timer per request cost ~5 us and an ``asyncio.timeout`` ~20 us.

On SIGTERM uvicorn closes an idle connection at once: a request already on its way
over it would meet a closed connection. Here an idle connection stays open for
:data:`SHUTDOWN_GRACE` seconds more and answers whatever arrives with 503
``unavailable`` (``connection: close``); requests in progress finish as usual.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from txnstream.api.http import error_body

log = logging.getLogger("txnstream.serve")

SHUTDOWN_GRACE = 1.0
"""Seconds an idle connection keeps answering 503 after shutdown began."""

_SHUTDOWN_BODY = error_body("unavailable", "the server is shutting down; retry elsewhere or later")


async def _shutting_down(scope: Any, receive: Any, send: Any) -> None:
    """The ASGI app of a connection after shutdown began: 503, then close."""
    if scope["type"] != "http":
        return
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(_SHUTDOWN_BODY)).encode("ascii")),
        (b"connection", b"close"),
        (b"retry-after", b"1"),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": _SHUTDOWN_BODY})


MAX_HEADER_BYTES = 64 * 1024
"""The most a request's head (request line and headers) may hold."""
MIN_BODY_RATE = 64 * 1024
"""Bytes a second a body must arrive at on average, after ``--header-timeout``."""
_SWEEPS_PER_TIMEOUT = 4


def _closing_response(status: bytes, code: str, message: str) -> bytes:
    body = error_body(code, message)
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"connection: close\r\nretry-after: 1\r\ncontent-length: "
        + str(len(body)).encode("ascii")
        + b"\r\n\r\n"
        + body
    )


BUSY_RESPONSE = _closing_response(
    b"503 Service Unavailable",
    "unavailable",
    "the server has too many open connections; retry shortly",
)
SLOW_HEAD_RESPONSE = _closing_response(
    b"408 Request Timeout",
    "invalid_request",
    "the request's headers did not arrive in time (serve --header-timeout)",
)
SLOW_BODY_RESPONSE = _closing_response(
    b"408 Request Timeout",
    "invalid_request",
    f"the request body arrived too slowly: at least {MIN_BODY_RATE} bytes/s on average"
    " after serve --header-timeout",
)
LARGE_HEAD_RESPONSE = _closing_response(
    b"431 Request Header Fields Too Large",
    "invalid_request",
    f"the request's headers exceed {MAX_HEADER_BYTES} bytes",
)


def _base_protocol() -> type[Any]:
    """uvicorn's fastest HTTP/1.1 protocol here: httptools' if installed, else h11's."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    return HttpToolsProtocol


LINGER_SECONDS = 2.0
"""How long a connection closed mid-request keeps reading (and dropping) what the client
still sends, so that the answer reaches it before the close."""


class _LingeringTransport:
    """A connection's transport as uvicorn sees it, but a close while the client is
    still sending its request lingers (see ``_linger`` in :func:`bounded_protocol`)."""

    def __init__(self, inner: Any, protocol: Any) -> None:
        self._inner = inner
        self._protocol = protocol
        self._closing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def is_closing(self) -> bool:
        return self._closing or bool(self._inner.is_closing())

    def close(self) -> None:
        self._closing = True
        if self._protocol._mid_request() and not self._inner.is_closing():
            self._protocol._linger()
        else:
            self._inner.close()


def bounded_protocol(
    max_connections: int | None, header_timeout: float = 10.0
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with at most ``max_connections`` open at once (None: no
    bound), a deadline before the first request, ``header_timeout`` seconds for each
    request's head, and a 503 grace period on shutdown."""
    refusals = [float("-inf"), 0]  # when the last warning was logged, refusals since
    base = _base_protocol()

    sweep: list[asyncio.TimerHandle | None] = [None]  # the one timer of the server
    period = min(1.0, header_timeout / _SWEEPS_PER_TIMEOUT)

    def sweep_all(loop: asyncio.AbstractEventLoop, connections: set[Any]) -> None:
        now = loop.time()
        for connection in list(connections):
            if isinstance(connection, BoundedProtocol):  # (not an upgraded websocket)
                connection._cut_if_slow(now)
        sweep[0] = loop.call_later(period, sweep_all, loop, connections) if connections else None

    class BoundedProtocol(base):  # type: ignore[misc, valid-type]
        _head_since: float | None = None  # when the head being read began
        _head_bytes = 0
        _body_since: float | None = None  # when the body being read began
        _body_bytes = 0

        # httptools' parser callbacks: a head runs from a message's first byte to the end
        # of its headers, its body from there to the message's end
        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_since, self._head_bytes = self.loop.time(), 0

        def on_headers_complete(self) -> None:
            self._head_since = None
            self._body_since, self._body_bytes = self.loop.time(), 0
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._body_bytes += len(body)
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._body_since = None
            super().on_message_complete()

        def data_received(self, data: bytes) -> None:
            if self._lingering:
                return  # what the client still sends after its answer: dropped unread
            super().data_received(data)
            if self._head_since is not None:  # still in a head after this data
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEADER_BYTES:
                    self._close_with(LARGE_HEAD_RESPONSE)

        def _cut_if_slow(self, now: float) -> None:
            """Close the connection if its head or body is behind its deadline."""
            if self._lingering or self._lost:
                return
            if self._head_since is not None and now - self._head_since >= header_timeout:
                self._close_with(SLOW_HEAD_RESPONSE)
            elif self._body_since is not None and self.flow.read_paused:
                # the server is not reading (its app is behind, or this request waits
                # behind a pipelined one): that time is not the client's
                self._body_since += period
            elif (
                self._body_since is not None
                and now > self._body_since + header_timeout + self._body_bytes / MIN_BODY_RATE
            ):
                cycle = self.cycle
                answered = cycle is not None and cycle.response_started
                if cycle is not None:  # its app gets a disconnect, its answer goes nowhere
                    cycle.disconnected = True
                    cycle.message_event.set()
                self._close_with(None if answered else SLOW_BODY_RESPONSE)

        def _close_with(self, response: bytes | None) -> None:
            self._head_since = self._body_since = None
            if not self.transport.is_closing():
                if response is not None:
                    self._raw_transport.write(response)
                self._linger()

        # Closing a socket with unread data in it sends an RST, and a client still
        # sending (a body refused before it was read, a head cut off) may then lose the
        # answer before reading it. So such a connection closes as nginx's
        # lingering_close does: answer, end the sending side, read and drop what still
        # arrives, close at the client's end or after LINGER_SECONDS.
        _lingering = False
        _lost = False
        _linger_timer: asyncio.TimerHandle | None = None

        def _mid_request(self) -> bool:
            return self._head_since is not None or self._body_since is not None

        def _linger(self) -> None:
            if self._lingering or self._lost:
                return
            self._lingering = True
            raw = self._raw_transport
            if raw.can_write_eof():
                raw.write_eof()
            raw.resume_reading()
            self._linger_timer = self.loop.call_later(LINGER_SECONDS, raw.close)

        def connection_lost(self, exc: Exception | None) -> None:
            self._lost = True
            if self._linger_timer is not None:
                self._linger_timer.cancel()
            super().connection_lost(exc)

        def connection_made(self, transport: Any) -> None:
            self._raw_transport = transport
            super().connection_made(_LingeringTransport(transport, self))
            if sweep[0] is None:
                sweep[0] = self.loop.call_later(period, sweep_all, self.loop, self.connections)
            if max_connections is not None and len(self.connections) > max_connections:
                now = self.loop.time()
                if now - refusals[0] >= 1.0:  # one line a second, with the count since
                    log.warning(
                        "refused %d connection(s): %d open (--limit-concurrency)",
                        refusals[1] + 1,
                        max_connections,
                    )
                    refusals[:] = [now, 0]
                else:
                    refusals[1] += 1
                transport.write(BUSY_RESPONSE)
                transport.close()
                return
            # uvicorn starts the keep-alive clock only after a response: start it now, so
            # a connection that never sends a request does not stay open for ever
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

        def shutdown(self) -> None:
            if self.cycle is None or self.cycle.response_complete:
                self.app = _shutting_down  # what arrives from now on gets a 503
                self.loop.call_later(SHUTDOWN_GRACE, self._end_grace)
            else:
                super().shutdown()  # closes after the response in progress

        def _end_grace(self) -> None:
            if not self.transport.is_closing():
                super().shutdown()

    return BoundedProtocol


def raise_file_limit() -> int:
    """Raise this process's open-file limit to its hard limit; the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft
