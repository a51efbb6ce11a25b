"""Connection bounds for ``serve``: a cap on open connections that refuses only the new
ones, and a deadline for connections that never send a request.

uvicorn's own ``limit_concurrency`` answers 503 to *every* request while the count of
open connections is over the limit, so a crowd of idle sockets (which uvicorn never
times out before their first request) locks out the clients already being served.
Here the check happens when a connection is accepted: past the bound it gets a 503
``unavailable`` and is closed at once, and the connections already open carry on. A
connection that sends nothing within the keep-alive time is closed, as an idle
keep-alive connection is.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from api.http import error_body

log = logging.getLogger("txnstream.serve")

_BODY = error_body("unavailable", "the server has too many open connections; retry shortly")
BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\nretry-after: 1\r\ncontent-length: "
    + str(len(_BODY)).encode("ascii")
    + b"\r\n\r\n"
    + _BODY
)


def bounded_protocol(max_connections: int) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with at most ``max_connections`` open at once."""
    refusals = [float("-inf"), 0]  # when the last warning was logged, refusals since

    class BoundedH11Protocol(H11Protocol):
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

    return BoundedH11Protocol


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
