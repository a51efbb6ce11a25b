"""The recovery drills' error.

Part of the one error tree rooted at :class:`~txnstream.api.EngineError` (documented in
``txnstream.ledger._errors``); ``txnstream.api`` re-exports it, loaded on first use.
"""

from __future__ import annotations

from txnstream.api import EngineError


class DrillError(EngineError):
    """A recovery drill could not run: no database, the server did not start, time ran out."""
