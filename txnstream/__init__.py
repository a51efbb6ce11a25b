"""txnstream: a transactional topic engine (Pulsar's transaction buffer, Kafka's last stable
offset) for asyncio services, an HTTP server and Spark pipelines.

The embedded surface (:class:`Engine`, its configuration, handles, value types and the one
error tree rooted at :class:`EngineError`) is re-exported from :mod:`txnstream.api`. The
layers are subpackages: ``txnstream.ledger`` <- ``txnstream.txn_buffer`` <-
{``txnstream.dispatcher``, ``txnstream.snapshots``} <- ``txnstream.api`` (whose adapters are
``txnstream.api.http``, ``.client``, ``.cli`` and ``.spark``).
"""

# The embedded surface is txnstream.api's, name for name: one list to keep (its __all__).
from txnstream.api import *  # noqa: F403
from txnstream.api import __all__ as __all__
