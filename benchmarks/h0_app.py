"""H0's bare FastAPI app: the ceiling of the HTTP stack, with no engine behind it.

One POST endpoint at the same path as the real produce endpoint: it reads and parses the
JSON body (``await request.json()``), stores nothing, and answers a produce-shaped body
(one position per message). No pydantic request model, no middleware, no engine: what
is left is uvicorn + httptools + Starlette/FastAPI routing + ``json``, i.e. the floor under
any endpoint of the real server. ``benchmarks.h_http`` runs it with the same uvicorn
settings as ``txnstream serve``::

    python -m uvicorn benchmarks.h0_app:app --host 127.0.0.1 --port N --log-level warning \
        --no-access-log --timeout-keep-alive 30

Readiness is probed on FastAPI's own ``/openapi.json`` (no second endpoint of ours).
"""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.responses import Response

app = FastAPI(title="txnstream H0 ceiling", redirect_slashes=False)


@app.post("/v1/topics/{topic}/messages")
async def produce(topic: str, request: Request) -> Response:
    """Parse the body, store nothing, answer like the real endpoint."""
    body = await request.json()
    count = len(body["messages"])
    content = json.dumps({"positions": ["0:0"] * count, "duplicate": False})
    return Response(content.encode(), media_type="application/json")
