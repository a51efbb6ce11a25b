"""txnstream: a transactional topic engine (Pulsar's transaction buffer, Kafka's last stable
offset) for asyncio services, an HTTP server and Spark pipelines.

The embedded surface (:class:`Engine`, its configuration, handles, value types and the one
error tree rooted at :class:`EngineError`) is re-exported from :mod:`txnstream.api`. The
layers are subpackages: ``txnstream.ledger`` <- ``txnstream.txn_buffer`` <-
{``txnstream.dispatcher``, ``txnstream.snapshots``} <- ``txnstream.api`` (whose adapters are
``txnstream.api.http``, ``.kafka``, ``.client``, ``.cli`` and ``.spark``).
"""

import typing

# The embedded surface is txnstream.api's, name for name: one list to keep (its __all__).
from txnstream.api import __all__ as __all__

if typing.TYPE_CHECKING:
    from txnstream.api import *  # noqa: F403


def __getattr__(name: str) -> typing.Any:
    # Lazily, as txnstream.api loads its names (PEP 562): ``import txnstream.api.client``
    # and the command line must not load the engine through this package's ``__init__``.
    if name in __all__:
        import txnstream.api

        value = getattr(txnstream.api, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
