"""The Spark data source's error.

Part of the one error tree rooted at :class:`~txnstream.api.EngineError` (documented in
``txnstream.ledger._errors``); ``txnstream.api`` re-exports it, loaded on first use.
Importing this module loads neither pyspark nor pyarrow.
"""

from __future__ import annotations

from txnstream.api import EngineError


class TxnStreamSourceError(EngineError):
    """A problem of the txnstream Spark data source, with a message that names it."""
