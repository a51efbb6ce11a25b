"""The ``txnstream`` command: ``serve`` runs the HTTP server; the rest is a client of one.

Client commands (``topics``, ``sub``, ``txn``, ``produce``, ``consume``) talk to
``--url`` (env ``TXNSTREAM_URL``) through :mod:`txnstream.api.client`: human-readable output by
default (listings tab-separated under a header line), ``--json`` for scripts (JSON Lines),
``--format`` for messages; ``--url``, ``--token`` and ``--json`` may come before the
command too. Errors are one line on stderr: exit 1 when a request failed, 2 for a usage
mistake, 3 when ``serve`` cannot start. ``drill ...`` runs the recovery drills.

Nothing heavy loads with the command line: a command's module is imported (and typer
builds it) when it runs, so the server (FastAPI, uvicorn), the engine and the drills' code
load with the commands that run them, httpx with the commands that talk, and option
values are read without pydantic (``_coercion``); ``tests/cli/test_cli_startup.py``
checks what loads and how long a start takes.
"""

import typing

from ._app import app, main

if typing.TYPE_CHECKING:
    from ._serve import make_server

__all__ = ["app", "main", "make_server"]


def __getattr__(name: str) -> typing.Any:
    """``make_server`` loads with ``serve``'s modules, on first use (PEP 562)."""
    if name == "make_server":
        from ._serve import make_server

        return make_server
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
