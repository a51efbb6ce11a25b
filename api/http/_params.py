"""What the routers share: path parameters, and the engine and drain of the app.

The app factory puts the open engine and the :class:`Drain` on ``app.state``; routes
take ``request: Request`` and read them with :func:`engine_of` and :func:`drain_of`.
Not a ``Depends``: solving one costs about 7 us per request, a few percent of a produce.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Request

from api import Engine

from ._edge import Drain
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
