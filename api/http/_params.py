"""What the routers share: path parameters, raw JSON bodies, and the engine and drain
of the app.

The app factory puts the open engine and the :class:`Drain` on ``app.state``; routes
take ``request: Request`` and read them with :func:`engine_of` and :func:`drain_of`.
Not a ``Depends``: solving one costs about 7 us per request, a few percent of a produce.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from fastapi import Path, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from txnstream.api import Engine, InvalidArgumentError

from ._edge import BODY_KEY, Drain
from ._schemas import NAME_PATTERN

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


_Model = TypeVar("_Model", bound=BaseModel)


def request_body(model: type[BaseModel], *, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` documenting ``model`` as the JSON body (the route reads it raw);
    an optional body may also be empty or ``null``."""
    schema: dict[str, Any] = {"$ref": f"#/components/schemas/{model.__name__}"}
    if not required:
        schema = {"anyOf": [schema, {"type": "null"}]}
    content = {"application/json": {"schema": schema}}
    return {
        "requestBody": {"required": True, "content": content} if required else {"content": content}
    }


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


def validated(raw: bytes, model: type[_Model]) -> _Model:
    """``model`` validated from a raw JSON body, errors as FastAPI gives those of a body
    it validated (each error's ``loc`` under ``"body"``): a 400 ``invalid_request``."""
    try:
        return model.model_validate_json(raw or b"null")
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None
