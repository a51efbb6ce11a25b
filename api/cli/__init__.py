"""The ``txnstream`` command: ``serve`` runs the HTTP server; the rest is a client of one.

Client commands (``topics``, ``sub``, ``txn``, ``produce``, ``consume``) talk to
``--url`` (env ``TXNSTREAM_URL``) through :mod:`txnstream.api.client`: human-readable output by
default, ``--json`` for scripts, ``--format`` for messages. Errors are one line on
stderr: exit 1 when a request failed, 2 for a usage mistake. ``drill ...`` runs the
recovery drills.
"""

from ._app import app, main
from ._serve import make_server

__all__ = ["app", "main", "make_server"]
