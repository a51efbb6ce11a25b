"""The HTTP server: ``create_app(engine)`` serves ``shared/HTTP_API.md`` over an open Engine.

Design notes
- The app never opens or closes the engine: tests hand it an open one (httpx's
  ``ASGITransport`` sends no lifespan) and ``txnstream serve`` opens it in its lifespan
  (``api/_cli.py``).
- Errors: every engine error is mapped to a status and a contract code by ``ERROR_TABLE``
  (walking the exception's MRO, so subclasses inherit their parent's row). Request
  validation errors become 400 ``invalid_request`` instead of FastAPI's 422; the 422
  entries are removed from ``/openapi.json`` accordingly.
- ``_EdgeMiddleware`` (pure ASGI, cheap) gives each request an id, enforces the request
  body limit before any parsing (413 ``too_large``), logs one line per request at debug,
  and turns anything unexpected into a logged 500 ``internal``.
- Routes build JSON bodies directly instead of running them through response models:
  the models document the responses, the schemathesis test checks that they agree.
- Long-poll receives wait on the engine's notification (``engine.receive(timeout=...)``)
  and end early, with no messages, when the server starts draining for shutdown
  (``Drain``), so a SIGTERM is not held up by 30-second polls.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import Body, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from api import (
    ClosedError,
    ConflictError,
    Engine,
    EngineError,
    EngineFailedError,
    FencedError,
    InvalidArgumentError,
    NotFoundError,
    OutgoingMessage,
    TooLargeError,
    TopicNotFoundError,
    TxnNotOpenError,
)
from ledger import Position

from ._metrics import TopicStatsCollector, render_metrics
from ._schemas import (
    FETCH_FROM_PATTERN,
    NAME_PATTERN,
    AckRequest,
    AckResponse,
    BeginRequest,
    ErrorResponse,
    FetchResponse,
    FinishRequest,
    FinishResponse,
    HealthResponse,
    Isolation,
    MessageIn,
    NackRequest,
    NackResponse,
    ProduceRequest,
    ProduceResponse,
    ReceiveResponse,
    SeekRequest,
    SeekResponse,
    StatsResponse,
    SubscriptionDeletedResponse,
    SubscriptionRequest,
    SubscriptionResponse,
    TopicDeletedResponse,
    TopicListResponse,
    TopicRequest,
    TopicResponse,
    TxnListResponse,
    TxnResponse,
    TxnState,
    check_json_value,
)

__all__ = ["ERROR_TABLE", "Drain", "create_app"]

log = logging.getLogger("txnstream.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ERROR_TABLE: dict[type[BaseException], tuple[int, str]] = {
    NotFoundError: (404, "not_found"),
    TxnNotOpenError: (409, "txn_not_open"),
    FencedError: (409, "fenced"),
    ConflictError: (409, "conflict"),
    TooLargeError: (413, "too_large"),
    InvalidArgumentError: (400, "invalid_request"),
    ClosedError: (503, "unavailable"),
    EngineFailedError: (503, "unavailable"),
    RequestValidationError: (400, "invalid_request"),
}
"""The one map from an exception class to ``(status, code)``; looked up along the MRO."""

_STATUS_CODES = {404: "not_found", 409: "conflict", 413: "too_large", 503: "unavailable"}
"""Contract codes for HTTP errors raised by the framework itself (unknown route, ...)."""

_REQUEST_ID_KEY = "txnstream.request_id"
_NONFINITE_KEY = "txnstream.maybe_nonfinite"
"""Set when the raw body mentions NaN/Infinity, which json.loads accepts but JSON has not."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DRAIN_SLACK = 64 * 1024 * 1024
"""How much of an oversize body is read and dropped so the client sees the 413."""


def lookup_error(exc: BaseException) -> tuple[int, str] | None:
    """The ``(status, code)`` row of ``exc``'s nearest class in :data:`ERROR_TABLE`."""
    for cls in type(exc).__mro__:
        row = ERROR_TABLE.get(cls)
        if row is not None:
            return row
    return None


# ------------------------------------------------------------------------------ JSON


def _json_bytes(content: Any) -> bytes:
    try:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        # Values stored through the embedded API may hold bytes, non-string keys or
        # non-finite floats; never fail a response for that.
        text = json.dumps(_sanitize(content), ensure_ascii=False, separators=(",", ":"))
    return text.encode("utf-8")


def _sanitize(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _sanitize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_sanitize(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _ok(content: Any, status: int = 200) -> Response:
    return Response(_json_bytes(content), status_code=status, media_type="application/json")


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"code": code, "message": message}}
    return Response(_json_bytes(body), status, headers=headers, media_type="application/json")


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _pos(position: Position | None) -> str | None:
    return None if position is None else str(position)


def _put_value(out: dict[str, Any], value: Any) -> None:
    if isinstance(value, bytes | bytearray | memoryview):
        out["value_b64"] = base64.b64encode(bytes(value)).decode("ascii")
    else:
        out["value"] = value


def _message_json(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"position": str(msg.position)}
    _put_value(out, msg.value)
    out["key"] = msg.key
    out["properties"] = msg.properties
    out["txn"] = None if msg.txn is None else str(msg.txn)
    out["publish_time"] = _iso(msg.publish_time)
    out["redelivery_count"] = msg.redelivery_count
    return out


def _entry_json(entry: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "position": str(entry.position),
        "kind": _name(entry.kind),
        "txn": None if entry.txn is None else str(entry.txn),
        "key": entry.key,
    }
    _put_value(out, entry.value)
    out["properties"] = entry.properties or {}
    out["publish_time"] = _iso(entry.publish_time)
    return out


def _name(value: Any) -> str:
    """A lowercase enum name (``EntryKind.COMMIT`` -> ``commit``) or the string itself."""
    if isinstance(value, str):
        return value
    label = getattr(value, "label", None)
    if isinstance(label, str):
        return label
    name = getattr(value, "value", None)
    return name if isinstance(name, str) else str(getattr(value, "name", value)).lower()


def _txn_json(info: Any) -> dict[str, Any]:
    return {
        "txn": str(info.txn),
        "state": _name(info.state),
        "label": info.label,
        "topics": list(info.topics),
        "fenced": bool(info.fenced),
        "timeout_ms": info.timeout_ms,
    }


def _outgoing(message: MessageIn, max_message_bytes: int) -> OutgoingMessage:
    if "value_b64" in message.model_fields_set:
        text = message.value_b64
        decoded_size = len(text) // 4 * 3 - text[-2:].count("=")
        if decoded_size > max_message_bytes:
            raise TooLargeError(
                f"message value of {decoded_size} bytes exceeds the limit of "
                f"{max_message_bytes} bytes"
            )
        try:
            value: Any = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise InvalidArgumentError(f"value_b64 is not valid base64: {exc}") from None
    else:
        value = message.value
    return OutgoingMessage(value, message.key, message.properties or {})


# ------------------------------------------------------------------------- middleware


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


class _EdgeMiddleware:
    """Request id, body size limit, per-request debug log, last-resort 500."""

    def __init__(self, app: ASGIApp, max_request_bytes: int) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes
        self._prefix = os.urandom(3).hex()
        self._counter = itertools.count(1)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = f"{self._prefix}-{next(self._counter)}"
        scope[_REQUEST_ID_KEY] = request_id
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
            if scope["method"] in _BODY_METHODS:
                body = await self._read_body(scope, receive)
                if body is None:
                    await _send_error(send_with_id, 413, "too_large", self._too_large_text())
                    return
                receive = _replay(body, receive)
                if b"NaN" in body or b"Infinity" in body:
                    scope[_NONFINITE_KEY] = True
                if body and not any(name == b"content-type" for name, _ in scope["headers"]):
                    scope["headers"] = [*scope["headers"], (b"content-type", b"application/json")]
            await self.app(scope, receive, send_with_id)
        except Exception:
            log.exception("request %s %s failed id=%s", scope["method"], scope["path"], request_id)
            if status:
                raise
            await _send_error(
                send_with_id, 500, "internal", f"internal error (request {request_id})"
            )
        finally:
            if log.isEnabledFor(logging.DEBUG):
                log.debug(
                    "request id=%s method=%s path=%s status=%d duration_ms=%.2f",
                    request_id,
                    scope["method"],
                    scope["path"],
                    status,
                    (time.perf_counter() - started) * 1000,
                )

    def _too_large_text(self) -> str:
        return f"request body exceeds the limit of {self.max_request_bytes} bytes"

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes | None:
        """The whole body, or None (after draining what is reasonable) when it is too big."""
        limit = self.max_request_bytes
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
        too_large = declared is not None and declared > limit
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                # Client went away; hand the app an empty body, it will fail to answer.
                return b""
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


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


async def _send_error(send: Send, status: int, code: str, message: str) -> None:
    body = _json_bytes({"error": {"code": code, "message": message}})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# ----------------------------------------------------------------------------- errors


def _request_id(request: Request) -> str:
    return str(request.scope.get(_REQUEST_ID_KEY, "-"))


async def _engine_error_handler(request: Request, exc: Exception) -> Response:
    row = lookup_error(exc)
    if row is None:
        log.error(
            "unmapped engine error id=%s %s %s",
            _request_id(request),
            request.method,
            request.url.path,
            exc_info=exc,
        )
        return _error(500, "internal", f"internal error (request {_request_id(request)})")
    status, code = row
    level = logging.WARNING if status >= 500 else logging.INFO
    log.log(level, "request id=%s failed: %s %s: %s", _request_id(request), status, code, exc)
    return _error(status, code, str(exc) or type(exc).__name__)


_NAME_RULE = "1-200 characters of [A-Za-z0-9._-], not starting with '__'"


def _describe_one(err: Any) -> str:
    loc = [str(part) for part in err.get("loc", ())]
    kind = err.get("type")
    if kind == "json_invalid":
        ctx = err.get("ctx") or {}
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        return f"malformed JSON body{where}: {ctx.get('error', 'cannot parse')}"
    if kind == "string_pattern_mismatch":
        field = loc[-1] if loc else "value"
        if loc[:1] == ["path"]:
            return f"invalid {field} name {err.get('input')!r}: {_NAME_RULE}"
        if field == "value_b64":
            return f"{'.'.join(loc)}: not valid base64 (standard alphabet, padded)"
        return f"{'.'.join(loc)}: invalid value {err.get('input')!r}"
    where = ".".join(loc)
    msg = str(err.get("msg", "invalid"))
    return f"{where}: {msg}" if where else msg


def _describe_validation(exc: RequestValidationError) -> str:
    return "; ".join(_describe_one(err) for err in exc.errors()[:5]) or "invalid request"


async def _validation_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    message = _describe_validation(exc)
    content_type = request.headers.get("content-type", "")
    if "json" not in content_type and any(
        tuple(err.get("loc", ())) == ("body",) for err in exc.errors()
    ):
        message = f"the body must be JSON sent as application/json, not {content_type!r}"
    log.info("request id=%s invalid: %s", _request_id(request), message)
    return _error(400, "invalid_request", message)


async def _http_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    code = _STATUS_CODES.get(status, "invalid_request" if status < 500 else "internal")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if status == 404 and message == "Not Found":
        message = f"no such route: {request.method} {request.url.path}"
    log.info("request id=%s failed: %s %s", _request_id(request), status, message)
    return _error(status, code, message, headers=dict(exc.headers or {}))


def _responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    text = {
        400: "Malformed request (`invalid_request`).",
        404: "Unknown topic, subscription or transaction (`not_found`).",
        409: "`txn_not_open`, `fenced` or `conflict`.",
        413: "Message value or request body too large (`too_large`).",
        503: "The engine is closed or failed (`unavailable`).",
    }
    return {
        status: {"model": ErrorResponse, "description": text[status]}
        for status in (400, *statuses, 503)
    }


# ------------------------------------------------------------------------------- app

TopicName = Annotated[
    str, Path(pattern=NAME_PATTERN, description="1-200 of [A-Za-z0-9._-], not starting '__'.")
]
SubName = Annotated[
    str, Path(pattern=NAME_PATTERN, description="1-200 of [A-Za-z0-9._-], not starting '__'.")
]
TxnParam = Annotated[str, Path(description="A transaction id as returned by begin.")]


def create_app(engine: Engine, *, drain: Drain | None = None) -> FastAPI:
    """The FastAPI app serving HTTP_API.md over ``engine``, which must already be open.

    ``drain`` lets the server owner end pending long polls at shutdown.
    """
    drain = drain if drain is not None else Drain()
    max_message_bytes = engine.config.max_message_bytes
    stats_collector = TopicStatsCollector()

    app = FastAPI(
        title="txnstream",
        version="1",
        summary="Pulsar-style transactional topics over HTTP.",
        redirect_slashes=False,
    )
    app.state.engine = engine
    app.state.drain = drain
    app.add_exception_handler(EngineError, _engine_error_handler)
    app.add_exception_handler(RequestValidationError, _validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, _http_error_handler)
    app.add_middleware(_EdgeMiddleware, max_request_bytes=engine.config.max_request_bytes)

    # -- health and admin

    @app.get("/v1/health", response_model=HealthResponse, tags=["admin"])
    async def health() -> Response:
        """Liveness: 200 while the server runs."""
        return _ok({"status": "ok"})

    @app.get(
        "/metrics",
        tags=["admin"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    async def metrics() -> Response:
        """Prometheus text exposition: engine counters plus per-topic gauges."""
        snapshots: list[dict[str, Any]] = []
        for topic in await engine.list_topics():
            try:
                snapshots.append(await engine.stats(topic))
            except TopicNotFoundError:
                continue
        stats_collector.update(snapshots, time.time())
        body, content_type = render_metrics(engine.metrics.registry, stats_collector)
        return Response(body, media_type=content_type)

    @app.put(
        "/v1/topics/{topic}",
        response_model=TopicResponse,
        status_code=201,
        responses={200: {"model": TopicResponse, "description": "It existed."}, **_responses()},
        tags=["topics"],
    )
    async def create_topic(
        topic: TopicName, body: Annotated[TopicRequest | None, Body()] = None
    ) -> Response:
        """Create a topic: 201 when created, 200 when it existed."""
        created = await engine.create_topic(topic)
        return _ok({"topic": topic}, 201 if created else 200)

    @app.get(
        "/v1/topics", response_model=TopicListResponse, responses=_responses(), tags=["topics"]
    )
    async def list_topics() -> Response:
        """All topic names."""
        return _ok({"topics": list(await engine.list_topics())})

    @app.delete(
        "/v1/topics/{topic}",
        response_model=TopicDeletedResponse,
        responses=_responses(404),
        tags=["topics"],
    )
    async def delete_topic(topic: TopicName) -> Response:
        """Delete a topic with its data, subscriptions and snapshots."""
        await engine.delete_topic(topic)
        return _ok({"topic": topic, "deleted": True})

    @app.get(
        "/v1/topics/{topic}/stats",
        response_model=StatsResponse,
        responses=_responses(404),
        tags=["topics"],
    )
    async def topic_stats(topic: TopicName) -> Response:
        """Positions, transaction counts, sizes and subscriptions of a topic."""
        return _ok(await engine.stats(topic))

    # -- producing

    @app.post(
        "/v1/topics/{topic}/messages",
        response_model=ProduceResponse,
        responses=_responses(404, 409, 413),
        tags=["messages"],
    )
    async def produce(topic: TopicName, body: ProduceRequest, request: Request) -> Response:
        """Append a batch atomically (optionally in a transaction); durable on return."""
        if request.scope.get(_NONFINITE_KEY):
            for index, message in enumerate(body.messages):
                try:
                    check_json_value(message.value)
                except ValueError as exc:
                    raise InvalidArgumentError(f"messages.{index}.value: {exc}") from None
        messages = [_outgoing(m, max_message_bytes) for m in body.messages]
        result = await engine.produce(
            topic, messages, txn=body.txn, producer=body.producer, sequence=body.sequence
        )
        return _ok({"positions": [str(p) for p in result.positions], "duplicate": result.duplicate})

    # -- transactions

    @app.post(
        "/v1/transactions",
        response_model=TxnResponse,
        status_code=201,
        responses=_responses(),
        tags=["transactions"],
    )
    async def begin(body: Annotated[BeginRequest | None, Body()] = None) -> Response:
        """Begin a transaction; a reused ``transactional_id`` fences the previous one."""
        req = body or BeginRequest()
        timeout = None if req.timeout_ms is None else req.timeout_ms / 1000
        txn = await engine.begin(
            timeout=timeout, transactional_id=req.transactional_id, label=req.label
        )
        timeout_ms = req.timeout_ms
        if timeout_ms is None:
            timeout_ms = round(engine.config.default_txn_timeout * 1000)
        return _ok(
            {
                "txn": str(txn.id),
                "state": "open",
                "label": req.label,
                "topics": [],
                "fenced": False,
                "timeout_ms": timeout_ms,
            },
            201,
        )

    @app.get(
        "/v1/transactions",
        response_model=TxnListResponse,
        responses=_responses(),
        tags=["transactions"],
    )
    async def list_transactions(
        state: Annotated[TxnState | None, Query()] = None,
        label_prefix: Annotated[str | None, Query(max_length=200)] = None,
    ) -> Response:
        """Transactions, optionally filtered by state and label prefix."""
        infos = await engine.transactions(state=state, label_prefix=label_prefix)
        return _ok({"transactions": [_txn_json(info) for info in infos]})

    @app.post(
        "/v1/transactions/finish",
        response_model=FinishResponse,
        responses=_responses(404, 409),
        tags=["transactions"],
    )
    async def finish(body: FinishRequest) -> Response:
        """Commit and abort several transactions in one atomic decision."""
        result = await engine.finish(
            commit=body.commit, abort=body.abort, idempotence_key=body.idempotence_key
        )
        return _ok(
            {
                "committed": [str(t) for t in result.committed],
                "aborted": [str(t) for t in result.aborted],
                "duplicate": result.duplicate,
            }
        )

    @app.get(
        "/v1/transactions/{txn}",
        response_model=TxnResponse,
        responses=_responses(404),
        tags=["transactions"],
    )
    async def get_transaction(txn: TxnParam) -> Response:
        """One transaction's state, label, topics and whether it was fenced."""
        return _ok(_txn_json(await engine.get_transaction(txn)))

    @app.post(
        "/v1/transactions/{txn}/commit",
        response_model=TxnResponse,
        responses=_responses(404, 409),
        tags=["transactions"],
    )
    async def commit(txn: TxnParam) -> Response:
        """Commit; 200 once the markers are durable (again 200 if already committed)."""
        return _ok(_txn_json(await engine.commit(txn)))

    @app.post(
        "/v1/transactions/{txn}/abort",
        response_model=TxnResponse,
        responses=_responses(404, 409),
        tags=["transactions"],
    )
    async def abort(txn: TxnParam) -> Response:
        """Abort (again 200 if already aborted)."""
        return _ok(_txn_json(await engine.abort(txn)))

    # -- subscriptions

    @app.put(
        "/v1/topics/{topic}/subscriptions/{sub}",
        response_model=SubscriptionResponse,
        status_code=201,
        responses={
            200: {"model": SubscriptionResponse, "description": "It existed, same settings."},
            **_responses(404, 409),
        },
        tags=["subscriptions"],
    )
    async def create_subscription(
        topic: TopicName,
        sub: SubName,
        body: Annotated[SubscriptionRequest | None, Body()] = None,
    ) -> Response:
        """Create a durable subscription (201), or confirm an identical one (200)."""
        req = body or SubscriptionRequest()
        created = await engine.create_subscription(
            topic,
            sub,
            type=req.type,
            initial_position=req.initial_position,
            isolation=req.isolation,
        )
        return _ok(
            {
                "topic": topic,
                "subscription": sub,
                "type": req.type,
                "isolation": req.isolation,
                "initial_position": req.initial_position,
                "created": created,
            },
            201 if created else 200,
        )

    @app.delete(
        "/v1/topics/{topic}/subscriptions/{sub}",
        response_model=SubscriptionDeletedResponse,
        responses=_responses(404),
        tags=["subscriptions"],
    )
    async def delete_subscription(topic: TopicName, sub: SubName) -> Response:
        """Delete a subscription and its cursor."""
        await engine.delete_subscription(topic, sub)
        return _ok({"topic": topic, "subscription": sub, "deleted": True})

    @app.get(
        "/v1/topics/{topic}/subscriptions/{sub}/messages",
        response_model=ReceiveResponse,
        responses=_responses(404, 409),
        tags=["subscriptions"],
    )
    async def receive(
        topic: TopicName,
        sub: SubName,
        consumer: Annotated[str, Query(min_length=1, max_length=200)] = "default",
        max_messages: Annotated[int, Query(alias="max", ge=1, le=10_000)] = 100,
        wait_ms: Annotated[int, Query(ge=0, le=30_000)] = 0,
    ) -> Response:
        """Up to ``max`` messages, waiting up to ``wait_ms`` for the first one."""
        messages = await _receive(engine, drain, topic, sub, consumer, max_messages, wait_ms)
        return _ok({"messages": [_message_json(m) for m in messages]})

    @app.post(
        "/v1/topics/{topic}/subscriptions/{sub}/ack",
        response_model=AckResponse,
        responses=_responses(404, 409),
        tags=["subscriptions"],
    )
    async def ack(topic: TopicName, sub: SubName, body: AckRequest) -> Response:
        """Acknowledge positions (cumulatively, or within a transaction)."""
        positions = [Position.parse(p) for p in body.positions]
        await engine.ack(topic, sub, positions, cumulative=body.cumulative, txn=body.txn)
        return _ok({"acked": len(positions)})

    @app.post(
        "/v1/topics/{topic}/subscriptions/{sub}/nack",
        response_model=NackResponse,
        responses=_responses(404),
        tags=["subscriptions"],
    )
    async def nack(topic: TopicName, sub: SubName, body: NackRequest) -> Response:
        """Ask for redelivery of positions (``redelivery_count`` + 1)."""
        positions = [Position.parse(p) for p in body.positions]
        await engine.nack(topic, sub, positions)
        return _ok({"nacked": len(positions)})

    @app.post(
        "/v1/topics/{topic}/subscriptions/{sub}/seek",
        response_model=SeekResponse,
        responses=_responses(404),
        tags=["subscriptions"],
    )
    async def seek(topic: TopicName, sub: SubName, body: SeekRequest) -> Response:
        """Move the cursor: everything before the position counts as acknowledged."""
        await engine.seek(topic, sub, body.position)
        return _ok({"position": body.position})

    # -- range fetch

    @app.get(
        "/v1/topics/{topic}/fetch",
        response_model=FetchResponse,
        responses=_responses(404),
        tags=["messages"],
    )
    async def fetch(
        topic: TopicName,
        start: Annotated[str | None, Query(alias="from", pattern=FETCH_FROM_PATTERN)] = None,
        max_entries: Annotated[int, Query(alias="max", ge=1, le=10_000)] = 1000,
        isolation: Annotated[Isolation, Query()] = "read_committed",
    ) -> Response:
        """Raw entries from ``from`` (inclusive) with the aborted transactions among them."""
        begin_at = None if start in (None, "earliest") else start
        result = await engine.fetch(topic, begin_at, max=max_entries, isolation=isolation)
        return _ok(
            {
                "entries": [_entry_json(e) for e in result.entries],
                "aborted": [
                    {"txn": str(a.txn), "first_position": str(a.first_position)}
                    for a in result.aborted
                ],
                "next": str(result.next),
                "stable_position": _pos(result.stable_position),
                "last_confirmed": _pos(result.last_confirmed),
            }
        )

    _install_openapi(app)
    return app


async def _receive(
    engine: Engine,
    drain: Drain,
    topic: str,
    sub: str,
    consumer: str,
    max_messages: int,
    wait_ms: int,
) -> Sequence[Any]:
    """``engine.receive``, cut short (with no messages) if the server starts draining."""
    if wait_ms == 0 or drain.started:
        return await engine.receive(topic, sub, consumer=consumer, max=max_messages, timeout=0.0)
    task = asyncio.create_task(
        engine.receive(topic, sub, consumer=consumer, max=max_messages, timeout=wait_ms / 1000),
        name=f"http-receive:{topic}/{sub}/{consumer}",
    )
    try:
        await asyncio.wait((task, drain.future()), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return []
    return task.result()


def _install_openapi(app: FastAPI) -> None:
    """Generate ``/openapi.json`` without FastAPI's 422 responses (we answer 400)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                summary=app.summary,
                description="The txnstream HTTP API, version 1 (shared/HTTP_API.md).",
                routes=app.routes,
            )
            for path_item in schema.get("paths", {}).values():
                for operation in path_item.values():
                    operation.get("responses", {}).pop("422", None)
            components = schema.get("components", {}).get("schemas", {})
            components.pop("HTTPValidationError", None)
            components.pop("ValidationError", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
