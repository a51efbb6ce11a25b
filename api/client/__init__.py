"""The one Python client of txnstream's HTTP API (v1), blocking and asyncio, on httpx.

Errors are :class:`TxnStreamHttpError` (an error answer) and
:class:`TxnStreamTransportError` (no answer), defined here and re-exported by
``txnstream.api``. Used by the CLI, the crash drill and the Spark ``url`` mode.
"""

import importlib
import typing

from ._errors import TxnStreamHttpError, TxnStreamTransportError

if typing.TYPE_CHECKING:
    from ._calls import message_value, wire_message
    from ._client import DEFAULT_FAILOVER_TIMEOUT, DEFAULT_TIMEOUT, AsyncClient, Client

# PEP 562, as the package roots do: the errors load without httpx, so the command line
# can name them (``txnstream.api`` re-exports them) and load httpx only when it talks.
_LAZY = {
    "message_value": "._calls",
    "wire_message": "._calls",
    "DEFAULT_FAILOVER_TIMEOUT": "._client",
    "DEFAULT_TIMEOUT": "._client",
    "AsyncClient": "._client",
    "Client": "._client",
}

__all__ = [
    "DEFAULT_FAILOVER_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "AsyncClient",
    "Client",
    "TxnStreamHttpError",
    "TxnStreamTransportError",
    "message_value",
    "wire_message",
]


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
