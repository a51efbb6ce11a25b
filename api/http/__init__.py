"""The HTTP server: a FastAPI app over an open :class:`txnstream.api.Engine`
(``docs/http-api.md``).

One module per resource (topics, messages, transactions, subscriptions, fetch, admin),
the edge middleware, access (Host/Origin rules, bearer tokens, per-topic grants), one
error table. Imports the engine only through ``api``.
"""

from ._access import AccessPolicy, is_loopback
from ._app import create_app
from ._auth import Authenticator, AuthFileError, token_digest
from ._edge import ASGIApp, Drain, Message, Receive, Scope, Send, send_error
from ._errors import ERROR_TABLE
from ._json import error_body

__all__ = [
    "ASGIApp",
    "AccessPolicy",
    "Authenticator",
    "AuthFileError",
    "Drain",
    "ERROR_TABLE",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "create_app",
    "error_body",
    "is_loopback",
    "send_error",
    "token_digest",
]
