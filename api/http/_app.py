"""The app factory: ``create_app(engine)`` serves the HTTP API (``docs/http-api.md``) over an
open Engine, with its docs and the web console.

The app never opens or closes the engine: tests hand it an open one (httpx's
``ASGITransport`` sends no lifespan) and ``txnstream serve`` opens it in its lifespan.
The engine and the :class:`Drain` live on ``app.state``; each resource is an
``APIRouter`` of its own module, whose routes the app serves in the order of the
OpenAPI document. ``/docs`` (Swagger UI) and ``/redoc`` are served with assets from the
``fastapi-offline`` package, so they work without internet access.

Middleware, outermost first: the edge (request id, metrics, access log, last-resort
500), the Host/Origin guard, CORS (only with ``cors_origins``), authentication (only
with ``auth``), the body limit, then the direct routes (``_direct.py``: the routes that need no
parameter solving, served without the router). FastAPI's own layers (exception
telemetry, its body limit, the exception handlers) sit inside the direct routes, so only the
requests it steps aside for pass them; its outer 500 page is left out, the edge being
the last-resort 500 (see :func:`_middleware_outermost`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi_offline import FastAPIOffline
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.types import ASGIApp

from txnstream.api import Engine

from . import (
    _admin,
    _fetch,
    _messages,
    _offload,
    _subscriptions,
    _topics,
    _transactions,
    _ui,
)
from ._access import AccessPolicy, GuardMiddleware
from ._auth import AuthMiddleware
from ._direct import DirectRoutes
from ._edge import BodyLimitMiddleware, Drain, EdgeMiddleware
from ._errors import install_error_handlers
from ._limits import DEFAULT_INFLIGHT_BODY_BYTES
from ._standby import StandbyMiddleware
from ._telemetry import HttpMetrics
from ._wire import openapi_components

_ROUTERS = (_admin, _topics, _messages, _transactions, _subscriptions, _fetch, _offload, _ui)


def _middleware_outermost(app: FastAPI) -> None:
    """Build ``app``'s stack with the app's middleware outermost.

    FastAPI puts three layers of its own around the app's middleware: the 500 page,
    exception telemetry (ours is off) and its body limit (unset: ours reads bodies). Each
    is a coroutine per request, and the 500 page one more per response message; they did
    nothing for the direct routes's requests (the edge answers every error first) yet cost ~3%
    of a produce over HTTP. Here they go inside the direct routes, and the 500 page is left
    out while no handler or debug page is configured for it: the edge is the last-resort
    500 (JSON, logged, with the request id), as it already was for every route.
    """
    build_default = app.build_middleware_stack

    def build() -> ASGIApp:
        if app.debug or any(key in (500, Exception) for key in app.exception_handlers):
            return build_default()
        middleware, app.user_middleware = app.user_middleware, []
        try:
            stack = build_default()  # FastAPI's own layers and the router
        finally:
            app.user_middleware = middleware
        if isinstance(stack, ServerErrorMiddleware):
            stack = stack.app
        for cls, args, kwargs in reversed(middleware):
            stack = cls(stack, *args, **kwargs)
        return stack

    app.build_middleware_stack = build  # type: ignore[method-assign]


def create_app(
    engine: Engine,
    *,
    drain: Drain | None = None,
    access: AccessPolicy | None = None,
    max_inflight_body_bytes: int = DEFAULT_INFLIGHT_BODY_BYTES,
) -> FastAPI:
    """The FastAPI app serving the HTTP API over ``engine``, which must already be open.

    ``drain`` lets the server owner end pending long polls at shutdown; ``access`` sets
    tokens, the Host rule and allowed cross-site origins (default: no tokens, no Host
    rule, no cross-site origin); ``max_inflight_body_bytes`` bounds the request bodies
    of all requests in progress together (503 before reading past it).
    """
    app = FastAPIOffline(
        title="txnstream",
        version="1",
        summary="Pulsar-style transactional topics over HTTP.",
        redirect_slashes=False,
        # Our telemetry is the Prometheus metrics and the access log; FastAPI's
        # OpenTelemetry bridge looks the global providers up on every request (~4% of a
        # one-message produce) to find them unconfigured.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
        # The routers' routes, flat: FastAPI 0.16x's `include_router` keeps each router
        # as a lazily matched branch that every request walks twice (~25 us a request).
        routes=[route for module in _ROUTERS for route in module.router.routes],
    )
    app.state.engine = engine
    app.state.drain = drain if drain is not None else Drain()
    install_error_handlers(app)
    app.add_middleware(DirectRoutes, router=app.router, handlers=app.exception_handlers)
    app.add_middleware(
        BodyLimitMiddleware,
        max_request_bytes=engine.config.max_request_bytes,
        max_inflight_bytes=max_inflight_body_bytes,
    )
    _install_access(app, access or AccessPolicy())
    app.add_middleware(StandbyMiddleware, engine=engine)
    # Outermost (added last): ids, counts and logs what the inner middlewares answer too.
    app.state.http_metrics = http_metrics = HttpMetrics()
    app.add_middleware(EdgeMiddleware, metrics=http_metrics, routes=app.routes)
    _middleware_outermost(app)
    _install_openapi(app)
    return app


def _install_access(app: FastAPI, access: AccessPolicy) -> None:
    """Add the access middleware outside the body limit (each ``add_middleware`` wraps the
    last)."""
    app.state.access = access
    if access.auth is not None:
        app.add_middleware(AuthMiddleware, authenticator=access.auth, refusals=access.refusals)
    if access.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=["*"] if "*" in access.cors_origins else list(access.cors_origins),
            allow_methods=["GET", "PUT", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
            expose_headers=["X-Request-Id"],
        )
    app.add_middleware(GuardMiddleware, policy=access)


DESCRIPTION = """The txnstream HTTP API, version 1: transactional topics with read-committed
delivery. The contract, with its precise rules, is `docs/http-api.md` in the txnstream
repository; every body below has an example.

Positions are strings `"L:E"` (ledger id, entry id). Errors are
`{"error": {"code", "message"}}` with a 4xx/5xx status. The web console is at
[`/ui`](/ui), Prometheus metrics at [`/metrics`](/metrics).

A server run with `--auth` wants `Authorization: Bearer <token>` on every request but
`GET /v1/health`: 401 `unauthorized` without a known token, 403 `forbidden` without the
permission (a grant on the topic, the transaction's owner, admin for `/metrics`).

**Limits and input rules**, each applied before anything is stored:
- a produce or batch request holds at most 10,000 messages (`serve
  --max-messages-per-request`) and a body at most 32 MiB: 413 `too_large`;
- `receive` and `fetch` answer at most `max_bytes` of messages (default 8 MiB, at most
  64 MiB), and always at least one;
- non-finite numbers (`NaN`, `Infinity`, `1e400`) and lone surrogates (`"\\udc00"`)
  anywhere in a body: 400 `invalid_request`;
- topic and subscription names `.` and `..` are invalid; a seek past the end of the log
  behaves as `latest`;
- while the disk is nearly full, writes get 507 `insufficient_storage` and reads go on;
  `GET /v1/health` is 200 `ok` only while writes are accepted, else 503 with `degraded`,
  `recovering` or `failed` and a `reason`;
- past `serve --limit-concurrency` open connections a new connection gets 503
  `unavailable` and is closed; after SIGTERM, requests get 503 `unavailable` while those
  in progress finish.
"""


def _install_openapi(app: FastAPI) -> None:
    """Generate ``/openapi.json`` without FastAPI's 422 responses (we answer 400), with
    the bodies' schemas from their one declaration (``_wire``: FastAPI sees none of them,
    the routes read and write raw JSON) and an example on every request and response
    body."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description=DESCRIPTION,
                routes=app.routes,
            )
            for path_item in schema.get("paths", {}).values():
                for operation in path_item.values():
                    operation.get("responses", {}).pop("422", None)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            components.pop("HTTPValidationError", None)
            components.pop("ValidationError", None)
            components.update(openapi_components())
            if app.state.access.auth is not None:
                _document_bearer(schema)
            _add_body_examples(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _document_bearer(schema: dict[str, Any]) -> None:
    """Say in the OpenAPI document that every operation but health takes a bearer token."""
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes["bearer"] = {"type": "http", "scheme": "bearer"}
    for path, path_item in schema.get("paths", {}).items():
        if path == "/v1/health":
            continue
        for operation in path_item.values():
            operation["security"] = [{"bearer": []}]


def _add_body_examples(schema: dict[str, Any]) -> None:
    """Give every request and response body the first example of its model.

    The models carry ``examples`` in their JSON schema; Swagger UI shows a body's
    ``example`` most reliably when it sits on the media type, also for optional bodies
    (``anyOf`` the model and null).
    """
    components = schema.get("components", {}).get("schemas", {})

    def first_example(node: dict[str, Any]) -> Any:
        ref = node.get("$ref")
        if isinstance(ref, str):
            node = components.get(ref.rsplit("/", 1)[-1], {})
        examples = node.get("examples")
        if isinstance(examples, list) and examples:
            return examples[0]
        for option in node.get("anyOf", ()):
            found = first_example(option)
            if found is not None:
                return found
        return None

    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            bodies = [operation.get("requestBody", {}), *operation.get("responses", {}).values()]
            for body in bodies:
                for media in body.get("content", {}).values():
                    if "example" in media or "examples" in media:
                        continue
                    example = first_example(media.get("schema", {}))
                    if example is not None:
                        media["example"] = example
