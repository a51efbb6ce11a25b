"""The one error table and the exception handlers that answer with it.

Every engine error is mapped to a status and a contract code by :data:`ERROR_TABLE`
(walking the exception's MRO, so subclasses inherit their parent's row). Request
validation errors become 400 ``invalid_request`` instead of FastAPI's 422 (the app
factory removes the 422 entries from ``/openapi.json`` accordingly); errors the
framework raises itself (unknown route, wrong method) get contract codes too.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from txnstream.api import (
    ClosedError,
    ConflictError,
    DataDirLockedError,
    EngineError,
    EngineFailedError,
    FencedError,
    ForbiddenError,
    InsufficientStorageError,
    InvalidArgumentError,
    NotFoundError,
    RemoteStorageError,
    TooLargeError,
    TxnNotOpenError,
)

from ._access import PRINCIPAL_KEY, AccessPolicy
from ._edge import REQUEST_ID_KEY
from ._json import error
from ._wire import ErrorResponse, ref

log = logging.getLogger("txnstream.http")

ERROR_TABLE: dict[type[BaseException], tuple[int, str]] = {
    NotFoundError: (404, "not_found"),
    TxnNotOpenError: (409, "txn_not_open"),
    FencedError: (409, "fenced"),
    ForbiddenError: (403, "forbidden"),
    ConflictError: (409, "conflict"),
    TooLargeError: (413, "too_large"),
    InvalidArgumentError: (400, "invalid_request"),
    InsufficientStorageError: (507, "insufficient_storage"),
    DataDirLockedError: (503, "unavailable"),
    ClosedError: (503, "unavailable"),
    EngineFailedError: (503, "unavailable"),
    RemoteStorageError: (503, "unavailable"),
    RequestValidationError: (400, "invalid_request"),
}
"""The one map from an exception class to ``(status, code)``; looked up along the MRO."""

_STATUS_CODES = {404: "not_found", 409: "conflict", 413: "too_large", 503: "unavailable"}
"""Contract codes for HTTP errors raised by the framework itself (unknown route, ...)."""

_NAME_RULE = "1-200 characters of [A-Za-z0-9._-], not starting with '__'"


def lookup_error(exc: BaseException) -> tuple[int, str] | None:
    """The ``(status, code)`` row of ``exc``'s nearest class in :data:`ERROR_TABLE`."""
    for cls in type(exc).__mro__:
        row = ERROR_TABLE.get(cls)
        if row is not None:
            return row
    return None


def install_error_handlers(app: FastAPI) -> None:
    """Answer engine, validation and framework errors with contract error bodies."""
    app.add_exception_handler(EngineError, _engine_error_handler)
    app.add_exception_handler(RequestValidationError, _validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, _http_error_handler)


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` of a route: 400, 401, 403 and 503 always, plus ``statuses``."""
    text = {
        400: "Malformed request, or a foreign `Host` (`invalid_request`).",
        401: "No or unknown token, with `serve --auth` (`unauthorized`).",
        403: "Not permitted: no grant, another principal's transaction, or a foreign"
        " `Origin` (`forbidden`).",
        404: "Unknown topic, subscription or transaction (`not_found`).",
        409: "`txn_not_open`, `fenced` or `conflict`.",
        413: "Message value, request body or message count too large (`too_large`).",
        507: "The disk is nearly full: new data is refused, reads go on (`insufficient_storage`).",
        503: "The engine is closed or failed (`unavailable`).",
    }
    return {
        status: error_response(status, text[status]) for status in (400, 401, 403, *statuses, 503)
    }


def error_response(status: int, description: str) -> dict[str, Any]:
    """The OpenAPI response of an error ``status``: the error body, with an example."""
    example = _ERROR_EXAMPLES[status]
    return {
        "description": description,
        "content": {"application/json": {"schema": ref(ErrorResponse), "example": example}},
    }


def note_refusal(request: Request, status: int, reason: str) -> None:
    """Log and count a 401/403 a route answered (the middleware records its own)."""
    access: AccessPolicy | None = getattr(request.app.state, "access", None)
    if access is not None:
        identity = request.scope.get(PRINCIPAL_KEY)
        name = None if identity is None else identity.name
        access.refusals.record(status, reason, name, request.method, request.url.path)


_ERROR_EXAMPLES = {
    status: {"error": {"code": code, "message": message}}
    for status, code, message in [
        (
            400,
            "invalid_request",
            "messages.0: each message needs exactly one of 'value' and 'value_b64'",
        ),
        (401, "unauthorized", "a bearer token is required"),
        (403, "forbidden", "principal 'billing' may not produce to topic 'orders'"),
        (404, "not_found", "topic 'orders' not found"),
        (409, "txn_not_open", "transaction txn-17 is not open: it timed out (aborted)"),
        (413, "too_large", "message value of 6291456 bytes exceeds the limit of 5242880 bytes"),
        (503, "unavailable", "the engine is closed"),
        (507, "insufficient_storage", "not enough disk space: writes resume once space is freed"),
    ]
}


def _request_id(request: Request) -> str:
    return str(request.scope.get(REQUEST_ID_KEY, "-"))


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
        return error(500, "internal", f"internal error (request {_request_id(request)})")
    status, code = row
    if status == 403:  # e.g. another principal's transaction: logged and counted as refused
        note_refusal(request, status, str(getattr(exc, "reason", "not_owner")))
    level = logging.WARNING if status >= 500 else logging.INFO
    log.log(level, "request id=%s failed: %s %s: %s", _request_id(request), status, code, exc)
    return error(status, code, str(exc) or type(exc).__name__)


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
    return error(400, "invalid_request", message)


async def _http_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    code = _STATUS_CODES.get(status, "invalid_request" if status < 500 else "internal")
    message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    if status == 404 and message == "Not Found":
        message = f"no such route: {request.method} {request.url.path}"
    log.info("request id=%s failed: %s %s", _request_id(request), status, message)
    return error(status, code, message, headers=dict(exc.headers or {}))
