"""What one term of serving owns: the store and every component rebuilt from it.

A *term* starts when recovery (:func:`txnstream.api._recovery.load_runtime`) has opened
the store and rebuilt the topics, the coordinator and the subscriptions from it, and ends
when the engine closes, recovers in place after a storage failure, or steps down to a
standby (PostgreSQL store). Everything that must agree with one store lives in one
:class:`Runtime`, which the engine holds in one attribute and replaces in one assignment:
no call can see a new store beside an old coordinator, nor topics of the previous term.
What outlives terms (configuration, metrics, the offloaded-object reader and its caches,
locks, background task ownership) stays on the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from txnstream.dispatcher import SubscriptionRegistry
from txnstream.ledger import PartitionedRow, Store
from txnstream.snapshots import SnapshotState
from txnstream.txn_buffer import Coordinator, Topic

from ._config import OffloadPolicy, RetentionPolicy


@dataclass(slots=True, eq=False)
class Runtime:
    """The store of one term and the state rebuilt from it (see the module docstring).

    The dicts are the term's own: components built with it (the coordinator's topic
    lookup) hold these very objects, and the engine changes them in place (topic creation
    and deletion), never rebinds them.
    """

    store: Store
    coordinator: Coordinator
    subscriptions: SubscriptionRegistry
    topics: dict[str, Topic]
    """Every topic by name, partitions of partitioned topics included."""
    partitioned: dict[str, PartitionedRow]
    """Partitioned topics by name (their partitions are in ``topics``)."""
    snapshots: dict[int, SnapshotState]
    """Per topic id: the snapshot policy's state."""
    retention: dict[str, RetentionPolicy]
    """Topics with a retention policy of their own."""
    offload: dict[str, OffloadPolicy]
    """Topics with an offload policy."""
    ttl: dict[str, int]
    """Topics with a message TTL (ms)."""
    swept: set[int] = field(default_factory=set)
    """Topics whose orphan offloaded objects were looked for in this term (a failed flush
    of the previous one may have left some)."""
    next_partition: dict[str, int] = field(default_factory=dict)
    """Per partitioned topic: the round-robin partition of the next keyless message."""
    receive_from: dict[str, int] = field(default_factory=dict)
    """Per partitioned topic: the partition the next merged receive starts at."""
