"""What the front doors use beside the engine: not the embedded surface.

The adapters in ``txnstream.api`` (``http``, ``kafka``, ``client``, ``cli``, ``spark``) use
the engine through ``from txnstream.api import ...`` like any service; this module is
their one other way in, for the few things a front door needs that a service embedding
the engine does not: the data directory's database file name (``serve`` probes it, the
snapshot drill looks for it), the topic name rules (the Kafka listener and the Spark
source check names before they reach the engine), the read-only committed view of a data
directory (the Spark source's path mode) and the replay check (the drills). None of it is
in ``txnstream.__all__``; ``tests/test_public_api.py`` lets only the adapters import it.

Loaded on first use (PEP 562), so a Spark executor naming :class:`CommittedReader` does not
load the engine.
"""

import typing

from txnstream.ledger import lazy_attributes as _lazy_attributes

if typing.TYPE_CHECKING:
    from txnstream.ledger import DB_FILE, validate_name
    from txnstream.txn_buffer import CommittedReader

    from ._replay_check import TopicReplay, replay_check

_LAZY: dict[str, str] = {
    "DB_FILE": "txnstream.ledger",
    "validate_name": "txnstream.ledger",
    "CommittedReader": "txnstream.txn_buffer",
    "TopicReplay": "txnstream.api._replay_check",
    "replay_check": "txnstream.api._replay_check",
}

__all__ = [
    "CommittedReader",
    "DB_FILE",
    "TopicReplay",
    "replay_check",
    "validate_name",
]

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, __all__)
