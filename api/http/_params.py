"""What the routers share: path parameters, raw JSON bodies and their documentation,
and the engine and drain of the app.

The app factory puts the open engine and the :class:`Drain` on ``app.state``; routes
take ``request: Request`` and read them with :func:`engine_of` and :func:`drain_of`.
Not a ``Depends``: solving one costs about 7 us per request, a few percent of a produce.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Annotated, Any, TypeVar

from fastapi import Path, Request
from msgspec import Struct

from txnstream.api import Engine, InvalidArgumentError

from ._edge import BODY_KEY, Drain
from ._errors import responses
from ._wire import NAME_PATTERN, decode, decode_optional, ref

TopicName = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN,
        description="1-200 characters of `[A-Za-z0-9._-]`, not starting with `__`.",
    ),
]
SubName = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN,
        description="1-200 characters of `[A-Za-z0-9._-]`, not starting with `__`.",
    ),
]
TxnParam = Annotated[str, Path(description="A transaction id as returned by begin.")]


def engine_of(request: Request) -> Engine:
    """The open engine the app serves."""
    engine: Engine = request.app.state.engine
    return engine


def drain_of(request: Request) -> Drain:
    """The server's shutdown drain, for long polls."""
    drain: Drain = request.app.state.drain
    return drain


_T = TypeVar("_T", bound=Struct)


def documented(
    answer: type[Struct],
    *,
    status: int = 200,
    body: type[Struct] | None = None,
    optional: bool = False,
    errors: tuple[int, ...] | None = (),
    also: dict[int, str] | None = None,
) -> dict[str, Any]:
    """A route's keywords documenting its answer (``status``, and the ``also`` statuses
    with the same body), its ``errors`` (besides 400, 401, 403 and 503; None: none at
    all) and the JSON ``body`` it reads raw (``optional``: it may be empty or ``null``)."""
    content = {"application/json": {"schema": ref(answer)}}
    answers = {status: {"description": HTTPStatus(status).phrase, "content": content}}
    answers.update(
        {other: {"description": text, "content": content} for other, text in (also or {}).items()}
    )
    keywords: dict[str, Any] = {
        "status_code": status,
        "responses": {**answers, **({} if errors is None else responses(*errors))},
    }
    if body is not None:
        schema = ref(body) if not optional else {"anyOf": [ref(body), {"type": "null"}]}
        request_body: dict[str, Any] = {"content": {"application/json": {"schema": schema}}}
        keywords["openapi_extra"] = {"requestBody": request_body | {"required": not optional}}
    return keywords


async def body_of(request: Request, shape: type[_T], *, optional: bool = False) -> _T:
    """The request's JSON body decoded as ``shape`` (400 ``invalid_request`` otherwise);
    ``optional``: an empty or ``null`` body is ``shape()``, the defaults."""
    raw = await json_body(request)
    return decode_optional(raw, shape) if optional else decode(raw, shape)


async def json_body(request: Request) -> bytes:
    """The raw body, refused (400) unless it is sent as JSON (no Content-Type: JSON); an
    empty body is empty whatever its type (``curl -d ''`` says form-urlencoded)."""
    raw: bytes | None = request.scope.get(BODY_KEY)  # read by the edge already
    if raw is None:
        raw = await request.body()
    if not raw:
        return raw
    # (scope's headers, not request.headers: that builds a Headers mapping per request)
    content_type = next((v for k, v in request.scope["headers"] if k == b"content-type"), None)
    media_type = (content_type or b"application/json").decode("latin-1").split(";")[0].strip()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise InvalidArgumentError(
            f"the request body must be JSON (Content-Type: application/json), not {media_type!r}"
        )
    return raw
