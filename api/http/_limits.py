"""Response limits of the HTTP API (``docs/http-api.md``: ``max_bytes``)."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """How request bodies are read (``serve --header-timeout``,
    ``--max-inflight-body-bytes``), against clients that send slowly or all at once.

    A body must arrive at :attr:`min_rate` on average after a grace of :attr:`grace`
    seconds: its deadline is ``grace + received / min_rate`` seconds after its headers
    (Apache's ``mod_reqtimeout`` rule), so a trickle is cut off after ``grace`` seconds
    plus what it sent, while a large body on a reasonable link is not. The bodies of the
    requests in progress hold at most :attr:`max_inflight_bytes` together: a request
    whose body would go past it is 503 ``unavailable`` before any of it is read.
    """

    grace: float = 10.0
    min_rate: int = 64 * 1024
    max_inflight_bytes: int = 256 * MiB
