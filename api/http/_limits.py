"""Response limits of the HTTP API (``docs/http-api.md``: ``max_bytes``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

MiB = 1024 * 1024
DEFAULT_RESPONSE_BYTES = 8 * MiB
"""The byte budget of a ``receive`` or ``fetch`` answer when the request names none."""
MAX_RESPONSE_BYTES = 64 * MiB
"""The largest ``max_bytes`` a request may ask for (400 ``invalid_request`` above)."""

MaxBytes = Annotated[
    int,
    Query(
        ge=1,
        le=MAX_RESPONSE_BYTES,
        description="A byte budget for the answer's messages (default 8 MiB, at most"
        " 64 MiB); at least one always comes back.",
    ),
]
"""The ``max_bytes`` query parameter of ``receive`` and ``fetch``."""


DEFAULT_INFLIGHT_BODY_BYTES = 256 * MiB
"""How many bytes the bodies of all requests in progress may hold together by default
(``serve --max-inflight-body-bytes``): past it, 503 ``unavailable`` before reading."""
