"""The HTTP server: a FastAPI app over an open :class:`api.Engine` (``shared/HTTP_API.md``).

One module per resource (topics, messages, transactions, subscriptions, fetch, admin),
the edge middleware, one error table. Imports the engine only through ``api``.
"""

from ._app import create_app
from ._edge import ASGIApp, Drain, Message, Receive, Scope, Send, send_error
from ._errors import ERROR_TABLE

__all__ = [
    "ASGIApp",
    "Drain",
    "ERROR_TABLE",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "create_app",
    "send_error",
]
