"""The ``txnstream`` command: ``serve`` runs the HTTP server; the rest is a client of one.

Client commands talk to ``--url`` (env ``TXNSTREAM_URL``) through :mod:`api.client`:
human-readable output by default, ``--json`` for scripts; a 4xx prints the server's
error and exits 1. ``drill ...`` runs the recovery drills.
"""

from ._app import app, main
from ._serve import make_server

__all__ = ["app", "main", "make_server"]
