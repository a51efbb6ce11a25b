"""Connection bounds for ``serve``: a cap on open connections that refuses only the new
ones, and a deadline for connections that never send a request.

uvicorn's own ``limit_concurrency`` answers 503 to *every* request while the count of
open connections is over the limit, so a crowd of idle sockets (which uvicorn never
times out before their first request) locks out the clients already being served.
Here the check happens when a connection is accepted: past the bound it gets a 503
``unavailable`` and is closed at once, and the connections already open carry on. A
connection that sends nothing within the keep-alive time is closed, as an idle
keep-alive connection is.

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


_BODY = error_body("unavailable", "the server has too many open connections; retry shortly")
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\nretry-after: 1\r\ncontent-length: "
    + str(len(_BODY)).encode("ascii")
    + b"\r\n\r\n"
    + _BODY
)


def _base_protocol() -> type[Any]:
    """uvicorn's fastest HTTP/1.1 protocol here: httptools' if installed, else h11's."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    return HttpToolsProtocol


def bounded_protocol(max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with at most ``max_connections`` open at once, a
    deadline before the first request, and a 503 grace period on shutdown."""
    refusals = [float("-inf"), 0]  # when the last warning was logged, refusals since
    base = _base_protocol()

    class BoundedProtocol(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
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
