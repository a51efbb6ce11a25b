"""A standby server's answers (PostgreSQL store, several servers, one active).

While the engine is a standby (``EngineState.STANDBY``), ``GET /v1/health`` answers 503
``{"status": "standby", "active": URL}`` (``null`` when the active is not known), ``GET
/metrics`` this server's own metrics (``txnstream_active`` 0), and every other route a
307 to the same path and query on the active's advertised URL, as the store's lease row
says (never the request's ``Host``), or 503 ``unavailable`` when no active is known.
Every answer a standby gives carries ``txnstream-role: standby``: clients given several
URLs take it as "try the next one", which is safe because a standby applied nothing. A
call that was in flight when an active stepped down fails with a plain 503
``unavailable``, without the header: it may have been applied (a flush whose outcome
was in doubt when the lease moved), so it must not be sent elsewhere blindly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from txnstream.api import EngineState

from ._edge import send_error
from ._wire import HealthResponse, encode

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from txnstream.api import Engine

ROLE_HEADER = (b"txnstream-role", b"standby")
_OWN_PATHS = frozenset({"/metrics"})
"""Routes a standby answers itself (besides health): its own metrics."""


class StandbyMiddleware:
    """Answer for a standby engine as the module docstring says; pass through otherwise."""

    def __init__(self, app: ASGIApp, engine: Engine) -> None:
        self.app = app
        self.engine = engine

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        engine = self.engine
        if scope["type"] != "http" or engine.state is not EngineState.STANDBY:
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        active = engine.active_url
        if path in _OWN_PATHS:
            await self.app(scope, receive, _marking(send))
        elif path == "/v1/health":
            body = encode(HealthResponse(status="standby", active=active))
            await _send(send, 503, body, [(b"content-type", b"application/json")])
        elif active is None:
            await send_error(
                _marking(send),
                503,
                "unavailable",
                "this server is a standby; no active is known",
            )
        else:
            target = active.rstrip("/").encode() + scope.get("raw_path", path.encode())
            if scope.get("query_string"):
                target += b"?" + scope["query_string"]
            await _send(send, 307, b"", [(b"location", target)])


def _marking(send: Send) -> Send:
    """``send`` adding the standby header to the response."""

    async def marked(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), ROLE_HEADER]}
        await send(message)

    return marked


async def _send(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode()), ROLE_HEADER]
    if status == 503:
        headers.append((b"retry-after", b"1"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
