"""The direct routes: routes that take only their path and the request, dispatched without the
router.

Between the edge and an endpoint, Starlette and FastAPI spent more than half of a
one-message produce (served here instead: 2,400 -> 5,200 requests/s on one core) on
matching the route list, the exception middleware, FastAPI's exit stack, request handler
and operation telemetry, and the pydantic validation of the path parameters; a
transaction over HTTP (begin, produce, commit) paid it three times. Produce, batch,
begin, commit and most other routes take nothing FastAPI must solve for them (no query,
body or header parameter, no dependency: they read their bodies raw), so this innermost
middleware serves them itself: it finds the route the router would pick (the first
whose method and path match, in the app's order), checks each path parameter with the
route's own pattern, calls the same endpoint and answers errors with the app's own
exception handlers.

It only ever steps aside: a request whose route it would not serve (another kind of
route, a parameter the pattern refuses, no match at all) goes on to the app unchanged,
which answers it as before, 404 and 405 included.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route, Router

from ._edge import ASGIApp, Receive, Scope, Send

ExceptionHandler = Callable[[Request, Exception], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class _Entry:
    """One route in the app's order: served here (``route`` set) or left to the app."""

    regex: re.Pattern[str] | None
    """The route's path regex; None: a route matched by ``other.matches(scope)``."""
    route: APIRoute | None
    other: BaseRoute | None
    checks: tuple[tuple[str, re.Pattern[str] | None], ...] = ()
    """Each path parameter with the pattern its value must match entirely (None: any)."""


class DirectRoutes:
    """Serves the routes that need nothing solved before their endpoint (see module)."""

    def __init__(
        self, app: ASGIApp, router: Router, handlers: Mapping[Any, Callable[..., Any]]
    ) -> None:
        self.app = app
        self._router = router
        self._handlers = handlers
        self._by_method: dict[str, list[_Entry]] = {}
        routes = router.routes
        methods = {m for r in routes if isinstance(r, Route) for m in r.methods or ()}
        for route in routes:
            for method in methods:
                entry = _entry(route, method)
                if entry is not None:
                    self._by_method.setdefault(method, []).append(entry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            found = self._find(scope["method"], scope["path"])
            if found is not None:
                await self._serve(*found, scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _find(self, method: str, path: str) -> tuple[APIRoute, dict[str, str]] | None:
        """The route the router would pick and its parameters, if it serves it directly."""
        for entry in self._by_method.get(method, ()):
            if entry.regex is None:
                assert entry.other is not None
                match, _ = entry.other.matches({"type": "http", "method": method, "path": path})
                if match is Match.NONE:
                    continue
                return None  # the router's choice, but not one served directly
            found = entry.regex.match(path)
            if found is None:
                continue
            if entry.route is None:
                return None
            params = found.groupdict()
            for name, pattern in entry.checks:
                if pattern is not None and pattern.fullmatch(params[name]) is None:
                    return None  # FastAPI words the 400 for a refused parameter
            return entry.route, params
        return None

    async def _serve(
        self, route: APIRoute, params: dict[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        # as the router sets them: metrics label requests by route, url_for needs a router
        scope.setdefault("router", self._router)
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        scope["path_params"] = params
        request = Request(scope, receive)
        try:
            response = await route.endpoint(**params, request=request)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise  # the edge logs it and answers 500, as for any route
            response = await handler(request, exc)
        await response(scope, receive, send)

    def _handler(self, exc: Exception) -> ExceptionHandler | None:
        """The app's handler for ``exc`` (nearest class first, as Starlette looks it up)."""
        for cls in type(exc).__mro__:
            if cls is Exception:
                break  # (Starlette leaves that one to its outermost middleware too)
            handler = self._handlers.get(cls)
            if handler is not None:
                return handler
        return None


def _entry(route: BaseRoute, method: str) -> _Entry | None:
    """``route``'s entry in the list of ``method`` (None: it never answers ``method``)."""
    if not isinstance(route, Route):
        return _Entry(None, None, route)  # a mount, say: asked as the router would ask it
    if route.methods is not None and method not in route.methods:
        return None
    if isinstance(route, APIRoute):
        checks = _served(route)
        if checks is not None:
            return _Entry(route.path_regex, route, None, checks)
    return _Entry(route.path_regex, None, route)


def _answers_a_response(route: APIRoute) -> bool:
    """Whether the endpoint is declared to return a Response (no model to serialize)."""
    try:
        answer = typing.get_type_hints(route.endpoint).get("return")
    except (NameError, TypeError):  # annotations it cannot resolve: let the app serve it
        return False
    return isinstance(answer, type) and issubclass(answer, Response)


def _served(route: APIRoute) -> tuple[tuple[str, re.Pattern[str] | None], ...] | None:
    """The parameter checks of a route it may serve directly; None if it may not: it takes
    something FastAPI must solve, a non-string parameter, or a constraint other than a
    pattern (the app then validates it as usual)."""
    dependant = route.dependant
    if (
        dependant.query_params
        or dependant.header_params
        or dependant.cookie_params
        or dependant.body_params
        or dependant.dependencies
        or dependant.request_param_name != "request"
        or dependant.websocket_param_name
        or dependant.http_connection_param_name
        or dependant.response_param_name
        or dependant.background_tasks_param_name
        or dependant.security_scopes_param_name
        or route.dependencies
        or not _answers_a_response(route)
    ):
        return None
    checks: list[tuple[str, re.Pattern[str] | None]] = []
    for param in dependant.path_params:
        info = param.field_info
        if info.annotation is not str or route.param_convertors[param.name].regex != "[^/]+":
            return None
        pattern: re.Pattern[str] | None = None
        for constraint in info.metadata:
            text = getattr(constraint, "pattern", None)
            if not isinstance(text, str) or pattern is not None or len(vars(constraint)) != 1:
                return None
            # Python's ``$`` also matches before a final newline, pydantic's does not:
            # ``fullmatch`` asks for the whole value, never less than pydantic does.
            pattern = re.compile(text)
        checks.append((param.name, pattern))
    return tuple(checks)
