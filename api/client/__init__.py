"""The one Python client of txnstream's HTTP API (v1), blocking and asyncio, on httpx.

Errors are ``api.TxnStreamHttpError`` (an error answer) and ``api.TxnStreamTransportError``
(no answer). Used by the CLI, the crash drill and the Spark ``url`` mode.
"""

from ._calls import message_value, wire_message
from ._client import DEFAULT_FAILOVER_TIMEOUT, DEFAULT_TIMEOUT, AsyncClient, Client

__all__ = [
    "DEFAULT_FAILOVER_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "AsyncClient",
    "Client",
    "message_value",
    "wire_message",
]
