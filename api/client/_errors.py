"""The HTTP client's errors: an error answer of a server, or no answer at all.

Part of the one error tree rooted at :class:`~txnstream.api.EngineError` (documented in
``txnstream.ledger._errors``); ``txnstream.api`` re-exports both, loaded on first use.
"""

from __future__ import annotations

from typing import Any

from txnstream.api import EngineError


class TxnStreamHttpError(EngineError):
    """An error answer of a txnstream server, raised by the HTTP client (``txnstream.api.client``).

    ``status`` is the HTTP status, ``code`` the contract's error code (``not_found``,
    ``txn_not_open``, ...; ``unknown`` when the body was not an error envelope) and
    ``message`` the server's text.
    """

    def __init__(self, message: str, status: int, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message, self.status, self.code)


class TxnStreamTransportError(TxnStreamHttpError):
    """No answer from the server: it could not be reached, or the connection failed.

    Its ``code`` is ``unavailable`` and its ``status`` 503, the contract's pair for a server
    that cannot serve. ``sent`` is False when no connection was made, so the request surely
    did not arrive; True when it may have (an answer lost with the server).
    """

    retriable = True

    def __init__(self, message: str, sent: bool = True) -> None:
        super().__init__(message, 503, "unavailable")
        self.sent = sent

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.message, self.sent)
