"""Every SQL statement of the SQLite store, by domain: the writes each batch operation
maps to (:data:`WRITES`) and the queries behind the typed reads (what
:class:`~txnstream.ledger._sql_reads.ReadStatements` and ``ViewStatements`` ask for).

The schema these run against is :mod:`txnstream.ledger._schema`. Another store (another
dialect) has a module like this one of its own, with the same operation keys.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence

import msgspec

from . import _batch as op
from ._batch import Params
from ._position import Position

# -- writes: one statement per batch operation -------------------------------------------

WRITES: dict[str, str] = {
    # the log
    op.ENTRY: "INSERT INTO entries (topic_id, ledger_id, entry_id, kind, txn, data)"
    " VALUES (?, ?, ?, ?, ?, ?)",
    op.LEDGER_OPEN: "INSERT INTO ledgers (topic_id, ledger_id, created_ms, entries, bytes,"
    " has_aborts, base_offset) VALUES (?, ?, ?, NULL, NULL, 0, ?)",
    op.LEDGER_SEAL: "UPDATE ledgers SET entries = ?, bytes = ?"
    " WHERE topic_id = ? AND ledger_id = ?",
    op.LEDGER_DROP: "DELETE FROM ledgers WHERE topic_id = ? AND ledger_id = ?",
    op.LEDGER_HAS_ABORTS: "UPDATE ledgers SET has_aborts = 1 WHERE topic_id = ? AND ledger_id = ?",
    op.LEDGER_REMOTE: "UPDATE ledgers SET location = 'remote', url = ?, size = ?, checksum = ?"
    " WHERE topic_id = ? AND ledger_id = ?",
    op.LEDGER_ENTRIES_DROP: "DELETE FROM entries WHERE topic_id = ? AND ledger_id = ?",
    op.LEDGER_ABORTED_DROP: "DELETE FROM aborted_txns WHERE topic_id = ? AND marker_ledger = ?",
    op.TRIM_ENTRIES: "DELETE FROM entries WHERE topic_id = ? AND ledger_id <= ?",
    op.TRIM_LEDGERS: "DELETE FROM ledgers WHERE topic_id = ? AND ledger_id <= ?",
    op.TRIM_ABORTED: "DELETE FROM aborted_txns WHERE topic_id = ? AND last_ledger <= ?",
    op.ABORTED: "INSERT OR REPLACE INTO aborted_txns (topic_id, txn, first_ledger, first_entry,"
    " last_ledger, last_entry, marker_ledger, marker_entry, stable_ledger, stable_entry)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    # the catalog
    op.TOPIC_CREATE: "INSERT INTO topics (topic_id, name, created_ms) VALUES (?, ?, ?)",
    op.NEXT_TOPIC_ID: "INSERT OR REPLACE INTO meta (key, value) VALUES ('next_topic_id', ?)",
    op.TOPIC_RETENTION: "UPDATE topics SET retention = ? WHERE topic_id = ?",
    op.TOPIC_OFFLOAD: "UPDATE topics SET offload = ? WHERE topic_id = ?",
    op.PARTITIONED_CREATE: "INSERT INTO partitioned_topics (name, partitions, created_ms)"
    " VALUES (?, ?, ?)",
    op.PARTITIONED_DROP: "DELETE FROM partitioned_topics WHERE name = ?",
    op.TOPIC_TTL: "UPDATE topics SET ttl_ms = ? WHERE topic_id = ?",
    op.PRODUCER: "INSERT OR REPLACE INTO producers (topic_id, producer, last_seq, positions)"
    " VALUES (?, ?, ?, ?)",
    op.TOPIC_DROP_ENTRIES: "DELETE FROM entries WHERE topic_id = ?",
    op.TOPIC_DROP_LEDGERS: "DELETE FROM ledgers WHERE topic_id = ?",
    op.TOPIC_DROP_ABORTED: "DELETE FROM aborted_txns WHERE topic_id = ?",
    op.TOPIC_DROP_PRODUCERS: "DELETE FROM producers WHERE topic_id = ?",
    op.PRODUCER_DROP: "DELETE FROM producers WHERE topic_id = ? AND producer = ?",
    op.TOPIC_DROP: "DELETE FROM topics WHERE topic_id = ?",
    # subscriptions
    op.SUBSCRIPTION_CREATE: "INSERT INTO subscriptions (topic_id, name, type, isolation, cursor,"
    " created_ms) VALUES (?, ?, ?, ?, ?, ?)",
    op.CURSOR: "UPDATE subscriptions SET cursor = ? WHERE topic_id = ? AND name = ?",
    op.SUBSCRIPTION_DROP: "DELETE FROM subscriptions WHERE topic_id = ? AND name = ?",
    op.SUBSCRIPTIONS_DROP: "DELETE FROM subscriptions WHERE topic_id = ?",
    op.SUBSCRIPTION_POLICY: "UPDATE subscriptions SET policy = ? WHERE topic_id = ? AND name = ?",
    op.REDELIVERY: "INSERT OR REPLACE INTO redeliveries (topic_id, name, ledger_id, entry_id,"
    " count, not_before_ms) VALUES (?, ?, ?, ?, ?, ?)",
    op.REDELIVERY_DROP: "DELETE FROM redeliveries WHERE topic_id = ? AND name = ?"
    " AND ledger_id = ? AND entry_id = ?",
    op.REDELIVERIES_DROP: "DELETE FROM redeliveries WHERE topic_id = ? AND name = ?",
    op.REDELIVERIES_DROP_TOPIC: "DELETE FROM redeliveries WHERE topic_id = ?",
    op.DELIVERY_TIME: "INSERT OR REPLACE INTO delivery_times (topic_id, ledger_id, entry_id,"
    " deliver_at_ms) VALUES (?, ?, ?, ?)",
    op.DELIVERY_TIMES_PRUNE: "DELETE FROM delivery_times WHERE deliver_at_ms <= ?",
    op.DELIVERY_TIMES_DROP_TOPIC: "DELETE FROM delivery_times WHERE topic_id = ?",
    # the coordinator
    op.NEXT_TXN_SEQ: "INSERT OR REPLACE INTO meta (key, value) VALUES ('next_txn_seq', ?)",
    op.STORE_META: "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
    op.TXN: "INSERT OR REPLACE INTO txns (seq, state, timeout_ms, deadline_ms, transactional_id,"
    " label, fenced, topics, acks, created_ms, ended_ms, reason, owner)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    op.FINISH_KEY: "INSERT OR REPLACE INTO finish_keys (key, created_ms) VALUES (?, ?)",
    op.TXNS_PRUNE: "DELETE FROM txns WHERE state != 'open' AND ended_ms < ?",
    op.PRODUCER_EPOCH: "INSERT OR REPLACE INTO producer_epochs (name, epoch, session, used_ms,"
    " txn_seq) VALUES (?, ?, ?, ?, ?)",
    op.PRODUCER_EPOCH_DROP: "DELETE FROM producer_epochs WHERE name = ?",
    # snapshots
    op.SNAPSHOT: "INSERT OR REPLACE INTO snapshots (topic_id, snapshot_id, ledger_id, entry_id,"
    " taken_ms, data) VALUES (?, ?, ?, ?, ?, ?)",
    op.SNAPSHOTS_UPTO_DROP: "DELETE FROM snapshots WHERE topic_id = ? AND snapshot_id <= ?",
    op.SNAPSHOTS_DROP: "DELETE FROM snapshots WHERE topic_id = ?",
    op.SEGMENT: "INSERT OR REPLACE INTO snapshot_segments (topic_id, segment_id, data)"
    " VALUES (?, ?, ?)",
    op.SEGMENT_DROP: "DELETE FROM snapshot_segments WHERE topic_id = ? AND segment_id = ?",
    op.SEGMENTS_BELOW_DROP: "DELETE FROM snapshot_segments WHERE topic_id = ? AND segment_id < ?",
    op.SEGMENTS_DROP: "DELETE FROM snapshot_segments WHERE topic_id = ?",
}
assert WRITES.keys() == op.OPERATIONS, op.OPERATIONS ^ WRITES.keys()

# -- reads (see txnstream.ledger._sql_reads.ReadStatements) --------------------------------

MARK = "?"
_JSON_ENCODE = msgspec.json.Encoder().encode


def int_list(values: Sequence[int]) -> str:
    """Ints as JSON text for ``json_each``. msgspec: ~5 ms for 200,000 ints where joining
    their str() took ~24 (a backlog count leaves out every aborted transaction of its
    range). A str, not bytes: the json functions of SQLite before 3.45 refuse a BLOB."""
    items = values.tolist() if isinstance(values, array) else list(values)
    return _JSON_ENCODE(items).decode()


def str_list(values: Sequence[str]) -> str:
    """Strings as JSON text for ``json_each``."""
    return json.dumps(list(values))


# -- reads: the log ----------------------------------------------------------------------

LEDGERS = (
    "SELECT ledger_id, created_ms, entries, bytes, has_aborts, location, url, size, checksum,"
    " base_offset FROM ledgers WHERE topic_id = ? ORDER BY ledger_id"
)
LEDGER_TOTALS = (
    "SELECT count(*), coalesce(sum(length(data)), 0) FROM entries"
    " WHERE topic_id = ? AND ledger_id = ?"
)
RANGE = (
    "SELECT ledger_id, entry_id, kind, txn, data FROM entries WHERE topic_id = ?"
    " AND (ledger_id, entry_id) >= (?, ?) AND (ledger_id, entry_id) <= (?, ?)"
    " ORDER BY ledger_id, entry_id LIMIT ?"
)
METAS = (
    "SELECT ledger_id, entry_id, kind, txn FROM entries WHERE topic_id = ?"
    " AND (ledger_id, entry_id) >= (?, ?) ORDER BY ledger_id, entry_id LIMIT ?"
)
COUNT_DATA = (
    "SELECT count(*) FROM entries WHERE topic_id = ? AND kind = 0"
    " AND (ledger_id, entry_id) >= (?, ?) AND (ledger_id, entry_id) <= (?, ?)"
    " AND (txn IS NULL OR txn NOT IN (SELECT value FROM json_each(?)))"
    " AND ((ledger_id << 32) | entry_id) NOT IN (SELECT value FROM json_each(?))"
)


def positions(topic_id: int, at: Sequence[Position]) -> tuple[str, Params]:
    """The log rows at the given positions, in log order (the keys as SQL text: SQLite
    has no array parameter)."""
    keys = ",".join(f"({int(p.ledger_id)},{int(p.entry_id)})" for p in at)
    return (
        "SELECT ledger_id, entry_id, kind, txn, data FROM entries WHERE topic_id = ?"
        f" AND (ledger_id, entry_id) IN (VALUES {keys}) ORDER BY ledger_id, entry_id",
        (topic_id,),
    )


LEDGER_ROWS = (
    "SELECT entry_id, kind, txn, data FROM entries WHERE topic_id = ? AND ledger_id = ?"
    " ORDER BY entry_id"
)
LEDGER_ABORTED = (
    "SELECT txn, first_ledger, first_entry, last_ledger, last_entry, marker_ledger,"
    " marker_entry, stable_ledger, stable_entry FROM aborted_txns"
    " WHERE topic_id = ? AND marker_ledger = ? ORDER BY marker_entry"
)

# -- reads: the catalog ------------------------------------------------------------------

TOPICS = "SELECT topic_id, name, created_ms, retention, offload FROM topics ORDER BY topic_id"
NEXT_TOPIC_ID = (
    "SELECT (SELECT coalesce(max(topic_id), -1) FROM topics),"
    " (SELECT value FROM meta WHERE key = 'next_topic_id')"
)
PARTITIONED = "SELECT name, partitions, created_ms FROM partitioned_topics ORDER BY name"
PRODUCERS = "SELECT producer, last_seq, positions FROM producers WHERE topic_id = ?"

# -- reads: subscriptions ----------------------------------------------------------------

SUBSCRIPTIONS = "SELECT topic_id, name, type, isolation, cursor, created_ms FROM subscriptions"
SUBSCRIPTION_POLICIES = "SELECT topic_id, name, policy FROM subscriptions WHERE policy IS NOT NULL"
REDELIVERIES = (
    "SELECT topic_id, name, ledger_id, entry_id, count, not_before_ms FROM redeliveries"
    " ORDER BY topic_id, name, ledger_id, entry_id"
)
DELIVERY_TIMES = (
    "SELECT topic_id, ledger_id, entry_id, deliver_at_ms FROM delivery_times"
    " WHERE deliver_at_ms > ?"
)
TOPIC_TTLS = "SELECT topic_id, ttl_ms FROM topics WHERE ttl_ms IS NOT NULL"

# -- reads: the coordinator --------------------------------------------------------------

NEXT_TXN_SEQ = "SELECT value FROM meta WHERE key = 'next_txn_seq'"
STORE_META = "SELECT key, value FROM meta WHERE key IN (SELECT value FROM json_each(?))"
REMOTE_LEDGERS = "SELECT count(*) FROM ledgers WHERE location = 'remote'"
NTH_NEWEST_ENDED = (
    "SELECT seq FROM txns WHERE state != 'open' AND ended_ms >= ?"
    " ORDER BY seq DESC LIMIT 1 OFFSET ?"
)
TXNS = (
    "SELECT seq, state, timeout_ms, deadline_ms, transactional_id, label, fenced,"
    " topics, acks, created_ms, ended_ms, reason, owner FROM txns"
    " WHERE state = 'open' OR (ended_ms >= ? AND seq >= ?) ORDER BY seq"
)
FINISH_KEYS = "SELECT key FROM finish_keys"
PRODUCER_EPOCHS = "SELECT name, epoch, session, used_ms, txn_seq FROM producer_epochs"
ENDED_ROWS = (
    "SELECT seq, state, timeout_ms, deadline_ms, label, fenced, topics, created_ms, reason,"
    " owner FROM txns WHERE state != 'open'"
)
ENDED_TXN = ENDED_ROWS + " AND seq = ?"
OUTCOME_FLAGS = "(state = 'committed') | ((fenced != 0) << 1)"


# -- reads: snapshots --------------------------------------------------------------------

SNAPSHOTS = "SELECT snapshot_id, data FROM snapshots WHERE topic_id = ? ORDER BY snapshot_id DESC"
SNAPSHOT_COUNTERS = (
    "SELECT (SELECT coalesce(max(snapshot_id), -1) FROM snapshots WHERE topic_id = ?),"
    " (SELECT coalesce(max(segment_id), -1) FROM snapshot_segments WHERE topic_id = ?)"
)


def segments(topic_id: int, ids: Sequence[int]) -> tuple[str, Params]:
    """``(segment_id, data)`` of the given segments (the ids as SQL text)."""
    listed = ",".join(str(int(segment_id)) for segment_id in ids)
    return (
        "SELECT segment_id, data FROM snapshot_segments"
        f" WHERE topic_id = ? AND segment_id IN ({listed})",
        (topic_id,),
    )


# -- the read-only reader (other processes: the Spark path mode) ---------------------------

VIEW_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?, ?)"
VIEW_VERSION = "PRAGMA user_version"
VIEW_TOPIC = "SELECT topic_id FROM topics WHERE name = ?"
VIEW_FIRST = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
    " ORDER BY ledger_id, entry_id LIMIT 1"
)
VIEW_LAST = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
    " ORDER BY ledger_id DESC, entry_id DESC LIMIT 1"
)
VIEW_LAST_BEFORE = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
    " AND (ledger_id, entry_id) < (?, ?) ORDER BY ledger_id DESC, entry_id DESC LIMIT 1"
)
VIEW_REMOTE = (
    "SELECT ledger_id, entries, url, size FROM ledgers WHERE topic_id = ?"
    " AND location = 'remote' ORDER BY ledger_id"
)
_VIEW_UNDECIDED = "SELECT seq, topics FROM txns WHERE state NOT IN ({marks})"
_VIEW_FIRST_DATA = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ? AND kind = 0 AND txn IN ({marks})"
)


def view_undecided(decided: Sequence[str]) -> tuple[str, Params]:
    """``(seq, topics)`` of the transactions whose state is not in ``decided``."""
    return _VIEW_UNDECIDED.format(marks=",".join("?" * len(decided))), tuple(decided)


def view_first_data(topic_id: int, txns: Sequence[int]) -> tuple[str, Params]:
    """``(ledger_id, entry_id)`` of the data entries of ``txns`` (no order yet)."""
    return _VIEW_FIRST_DATA.format(marks=",".join("?" * len(txns))), (topic_id, *txns)


VIEW_AFTER = " AND (ledger_id, entry_id) > (?, ?)"
VIEW_FIRST_ORDER = " ORDER BY ledger_id, entry_id LIMIT 1"
VIEW_NTH = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
    " AND (ledger_id, entry_id) >= (?, ?) ORDER BY ledger_id, entry_id LIMIT 1 OFFSET ?"
)
VIEW_LEDGER_TOPS = (
    "SELECT ledger_id, (SELECT max(entry_id) FROM entries e WHERE e.topic_id ="
    " l.topic_id AND e.ledger_id = l.ledger_id) FROM ledgers l WHERE topic_id = ?"
    " ORDER BY ledger_id"
)
VIEW_HAS_ABORTS = (
    "SELECT 1 FROM ledgers WHERE topic_id = ? AND ledger_id >= ? AND has_aborts != 0 LIMIT 1"
)
VIEW_ABORTED = (
    "SELECT txn FROM aborted_txns WHERE topic_id = ?"
    " AND (marker_ledger, marker_entry) >= (?, ?)"
    " AND (first_ledger, first_entry) < (?, ?) AND (last_ledger, last_entry) >= (?, ?)"
)
VIEW_DATA = (
    "SELECT entry_id, txn, data FROM entries WHERE topic_id = ? AND ledger_id = ?"
    " AND entry_id >= ? AND entry_id < ? AND kind = 0 ORDER BY entry_id"
)
