"""Every SQL statement of the PostgreSQL store, by domain: the writes each batch operation
maps to (:data:`WRITES`, the same keys as :mod:`._sqlite_sql`) and the queries behind the
typed reads (what :class:`._sql_reads.ReadStatements` and ``ViewStatements`` ask for).

The schema is :mod:`._pg_schema`. Rows come back in the shapes SQLite gives (the
interface's): flags as 0/1 ints, sums as ints, in the primary key's order (SQLite's
clustered tables give it by themselves; here every query says so, whatever plan runs).
SQLite's ``INSERT OR REPLACE`` is an
``INSERT ... ON CONFLICT (key) DO UPDATE`` of every other column; lists of ids travel as
one array parameter (``= ANY``, a hashed ``NOT IN (SELECT unnest(...))``) instead of
SQL text built per call.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import _batch as op
from ._batch import Params
from ._position import Position


def _upsert(table: str, key: tuple[str, ...], columns: tuple[str, ...]) -> str:
    """``INSERT OR REPLACE`` in PostgreSQL: every non-key column takes the new value."""
    names = (*key, *columns)
    return (
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(['%s'] * len(names))})"
        f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET "
        + ", ".join(f"{column} = EXCLUDED.{column}" for column in columns)
    )


def _meta(key: str) -> str:
    return (
        f"INSERT INTO meta (key, value) VALUES ('{key}', %s)"
        " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
    )


_TXN_COLUMNS = (
    "state",
    "timeout_ms",
    "deadline_ms",
    "transactional_id",
    "label",
    "fenced",
    "topics",
    "acks",
    "created_ms",
    "ended_ms",
    "reason",
    "owner",
)

# -- writes: one statement per batch operation -------------------------------------------

WRITES: dict[str, str] = {
    # the log
    op.ENTRY: "INSERT INTO entries (topic_id, ledger_id, entry_id, kind, txn, data)"
    " VALUES (%s, %s, %s, %s, %s, %s)",
    op.LEDGER_OPEN: "INSERT INTO ledgers (topic_id, ledger_id, created_ms, entries, bytes,"
    " has_aborts, base_offset) VALUES (%s, %s, %s, NULL, NULL, FALSE, %s)",
    op.LEDGER_SEAL: "UPDATE ledgers SET entries = %s, bytes = %s"
    " WHERE topic_id = %s AND ledger_id = %s",
    op.LEDGER_DROP: "DELETE FROM ledgers WHERE topic_id = %s AND ledger_id = %s",
    op.LEDGER_HAS_ABORTS: "UPDATE ledgers SET has_aborts = TRUE"
    " WHERE topic_id = %s AND ledger_id = %s",
    op.LEDGER_REMOTE: "UPDATE ledgers SET location = 'remote', url = %s, size = %s,"
    " checksum = %s WHERE topic_id = %s AND ledger_id = %s",
    op.LEDGER_ENTRIES_DROP: "DELETE FROM entries WHERE topic_id = %s AND ledger_id = %s",
    op.LEDGER_ABORTED_DROP: "DELETE FROM aborted_txns WHERE topic_id = %s AND marker_ledger = %s",
    op.TRIM_ENTRIES: "DELETE FROM entries WHERE topic_id = %s AND ledger_id <= %s",
    op.TRIM_LEDGERS: "DELETE FROM ledgers WHERE topic_id = %s AND ledger_id <= %s",
    op.TRIM_ABORTED: "DELETE FROM aborted_txns WHERE topic_id = %s AND last_ledger <= %s",
    op.ABORTED: _upsert(
        "aborted_txns",
        ("topic_id", "txn"),
        (
            "first_ledger",
            "first_entry",
            "last_ledger",
            "last_entry",
            "marker_ledger",
            "marker_entry",
            "stable_ledger",
            "stable_entry",
        ),
    ),
    # the catalog
    op.TOPIC_CREATE: "INSERT INTO topics (topic_id, name, created_ms) VALUES (%s, %s, %s)",
    op.NEXT_TOPIC_ID: _meta("next_topic_id"),
    op.TOPIC_RETENTION: "UPDATE topics SET retention = %s WHERE topic_id = %s",
    op.TOPIC_OFFLOAD: "UPDATE topics SET offload = %s WHERE topic_id = %s",
    op.PRODUCER: _upsert("producers", ("topic_id", "producer"), ("last_seq", "positions")),
    op.TOPIC_DROP_ENTRIES: "DELETE FROM entries WHERE topic_id = %s",
    op.TOPIC_DROP_LEDGERS: "DELETE FROM ledgers WHERE topic_id = %s",
    op.TOPIC_DROP_ABORTED: "DELETE FROM aborted_txns WHERE topic_id = %s",
    op.TOPIC_DROP_PRODUCERS: "DELETE FROM producers WHERE topic_id = %s",
    op.PRODUCER_DROP: "DELETE FROM producers WHERE topic_id = %s AND producer = %s",
    op.TOPIC_DROP: "DELETE FROM topics WHERE topic_id = %s",
    op.PARTITIONED_CREATE: "INSERT INTO partitioned_topics (name, partitions, created_ms)"
    " VALUES (%s, %s, %s)",
    op.PARTITIONED_DROP: "DELETE FROM partitioned_topics WHERE name = %s",
    op.TOPIC_TTL: "UPDATE topics SET ttl_ms = %s WHERE topic_id = %s",
    op.SUBSCRIPTION_POLICY: "UPDATE subscriptions SET policy = %s"
    " WHERE topic_id = %s AND name = %s",
    op.REDELIVERY: "INSERT INTO redeliveries (topic_id, name, ledger_id, entry_id, count,"
    " not_before_ms) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (topic_id, name, ledger_id,"
    " entry_id) DO UPDATE SET count = EXCLUDED.count, not_before_ms = EXCLUDED.not_before_ms",
    op.REDELIVERY_DROP: "DELETE FROM redeliveries WHERE topic_id = %s AND name = %s"
    " AND ledger_id = %s AND entry_id = %s",
    op.REDELIVERIES_DROP: "DELETE FROM redeliveries WHERE topic_id = %s AND name = %s",
    op.REDELIVERIES_DROP_TOPIC: "DELETE FROM redeliveries WHERE topic_id = %s",
    op.DELIVERY_TIME: "INSERT INTO delivery_times (topic_id, ledger_id, entry_id,"
    " deliver_at_ms) VALUES (%s, %s, %s, %s) ON CONFLICT (topic_id, ledger_id, entry_id)"
    " DO UPDATE SET deliver_at_ms = EXCLUDED.deliver_at_ms",
    op.DELIVERY_TIMES_PRUNE: "DELETE FROM delivery_times WHERE deliver_at_ms <= %s",
    op.DELIVERY_TIMES_DROP_TOPIC: "DELETE FROM delivery_times WHERE topic_id = %s",
    # subscriptions
    op.SUBSCRIPTION_CREATE: "INSERT INTO subscriptions (topic_id, name, type, isolation,"
    " cursor, created_ms) VALUES (%s, %s, %s, %s, %s, %s)",
    op.CURSOR: "UPDATE subscriptions SET cursor = %s WHERE topic_id = %s AND name = %s",
    op.SUBSCRIPTION_DROP: "DELETE FROM subscriptions WHERE topic_id = %s AND name = %s",
    op.SUBSCRIPTIONS_DROP: "DELETE FROM subscriptions WHERE topic_id = %s",
    # the coordinator (fenced arrives as a bool or a 0/1 int)
    op.NEXT_TXN_SEQ: _meta("next_txn_seq"),
    op.STORE_META: "INSERT INTO meta (key, value) VALUES (%s, %s)"
    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
    op.TXN: "INSERT INTO txns (seq, " + ", ".join(_TXN_COLUMNS) + ")"
    " VALUES (%s, %s, %s, %s, %s, %s, (%s::int <> 0), %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (seq) DO UPDATE SET "
    + ", ".join(f"{column} = EXCLUDED.{column}" for column in _TXN_COLUMNS),
    op.FINISH_KEY: _upsert("finish_keys", ("key",), ("created_ms",)),
    op.TXNS_PRUNE: "DELETE FROM txns WHERE state <> 'open' AND ended_ms < %s",
    op.PRODUCER_EPOCH: _upsert(
        "producer_epochs", ("name",), ("epoch", "session", "used_ms", "txn_seq")
    ),
    op.PRODUCER_EPOCH_DROP: "DELETE FROM producer_epochs WHERE name = %s",
    # snapshots
    op.SNAPSHOT: _upsert(
        "snapshots",
        ("topic_id", "snapshot_id"),
        ("ledger_id", "entry_id", "taken_ms", "data"),
    ),
    op.SNAPSHOTS_UPTO_DROP: "DELETE FROM snapshots WHERE topic_id = %s AND snapshot_id <= %s",
    op.SNAPSHOTS_DROP: "DELETE FROM snapshots WHERE topic_id = %s",
    op.SEGMENT: _upsert("snapshot_segments", ("topic_id", "segment_id"), ("data",)),
    op.SEGMENT_DROP: "DELETE FROM snapshot_segments WHERE topic_id = %s AND segment_id = %s",
    op.SEGMENTS_BELOW_DROP: "DELETE FROM snapshot_segments WHERE topic_id = %s AND segment_id < %s",
    op.SEGMENTS_DROP: "DELETE FROM snapshot_segments WHERE topic_id = %s",
}
assert WRITES.keys() == op.OPERATIONS, op.OPERATIONS ^ WRITES.keys()

# -- reads (see txnstream.ledger._sql_reads.ReadStatements) --------------------------------

MARK = "%s"


def int_list(values: Sequence[int]) -> list[int]:
    """Ints as one ``bigint[]`` parameter."""
    return [int(value) for value in values]


def str_list(values: Sequence[str]) -> list[str]:
    """Strings as one ``text[]`` parameter."""
    return list(values)


# -- reads: the log ----------------------------------------------------------------------

LEDGERS = (
    "SELECT ledger_id, created_ms, entries, bytes, has_aborts::int, location, url, size,"
    " checksum, base_offset FROM ledgers WHERE topic_id = %s ORDER BY ledger_id"
)
LEDGER_TOTALS = (
    "SELECT count(*), coalesce(sum(length(data)), 0)::bigint FROM entries"
    " WHERE topic_id = %s AND ledger_id = %s"
)
RANGE = (
    "SELECT ledger_id, entry_id, kind, txn, data FROM entries WHERE topic_id = %s"
    " AND (ledger_id, entry_id) >= (%s, %s) AND (ledger_id, entry_id) <= (%s, %s)"
    " ORDER BY ledger_id, entry_id LIMIT %s"
)
METAS = (
    "SELECT ledger_id, entry_id, kind, txn FROM entries WHERE topic_id = %s"
    " AND (ledger_id, entry_id) >= (%s, %s) ORDER BY ledger_id, entry_id LIMIT %s"
)
COUNT_DATA = (
    "SELECT count(*) FROM entries WHERE topic_id = %s AND kind = 0"
    " AND (ledger_id, entry_id) >= (%s, %s) AND (ledger_id, entry_id) <= (%s, %s)"
    " AND (txn IS NULL OR txn NOT IN (SELECT unnest(%s::bigint[])))"
    " AND ((ledger_id << 32) | entry_id) NOT IN (SELECT unnest(%s::bigint[]))"
)
_POSITIONS = (
    "SELECT e.ledger_id, e.entry_id, e.kind, e.txn, e.data"
    " FROM unnest(%s::bigint[], %s::bigint[]) AS p (ledger_id, entry_id)"
    " JOIN entries e ON e.topic_id = %s AND e.ledger_id = p.ledger_id"
    " AND e.entry_id = p.entry_id ORDER BY e.ledger_id, e.entry_id"
)


def positions(topic_id: int, at: Sequence[Position]) -> tuple[str, Params]:
    """The log rows at the given positions, in log order (the keys as two arrays: one
    statement text whatever their number)."""
    ledgers = [int(p.ledger_id) for p in at]
    entries = [int(p.entry_id) for p in at]
    return _POSITIONS, (ledgers, entries, topic_id)


LEDGER_ROWS = (
    "SELECT entry_id, kind, txn, data FROM entries WHERE topic_id = %s AND ledger_id = %s"
    " ORDER BY entry_id"
)
LEDGER_ABORTED = (
    "SELECT txn, first_ledger, first_entry, last_ledger, last_entry, marker_ledger,"
    " marker_entry, stable_ledger, stable_entry FROM aborted_txns"
    " WHERE topic_id = %s AND marker_ledger = %s ORDER BY marker_entry"
)

# -- reads: the catalog ------------------------------------------------------------------

TOPICS = "SELECT topic_id, name, created_ms, retention, offload FROM topics ORDER BY topic_id"
PARTITIONED = "SELECT name, partitions, created_ms FROM partitioned_topics ORDER BY name"
SUBSCRIPTION_POLICIES = (
    "SELECT topic_id, name, policy FROM subscriptions WHERE policy IS NOT NULL"
    " ORDER BY topic_id, name"
)
REDELIVERIES = (
    "SELECT topic_id, name, ledger_id, entry_id, count, not_before_ms FROM redeliveries"
    " ORDER BY topic_id, name, ledger_id, entry_id"
)
DELIVERY_TIMES = (
    "SELECT topic_id, ledger_id, entry_id, deliver_at_ms FROM delivery_times"
    " WHERE deliver_at_ms > %s ORDER BY topic_id, ledger_id, entry_id"
)
TOPIC_TTLS = "SELECT topic_id, ttl_ms FROM topics WHERE ttl_ms IS NOT NULL ORDER BY topic_id"
NEXT_TOPIC_ID = (
    "SELECT (SELECT coalesce(max(topic_id), -1) FROM topics),"
    " (SELECT value FROM meta WHERE key = 'next_topic_id')"
)
PRODUCERS = (
    "SELECT producer, last_seq, positions FROM producers WHERE topic_id = %s ORDER BY producer"
)

# -- reads: subscriptions ----------------------------------------------------------------

SUBSCRIPTIONS = (
    "SELECT topic_id, name, type, isolation, cursor, created_ms FROM subscriptions"
    " ORDER BY topic_id, name"
)

# -- reads: the coordinator --------------------------------------------------------------

NEXT_TXN_SEQ = "SELECT value FROM meta WHERE key = 'next_txn_seq'"
STORE_META = "SELECT key, value FROM meta WHERE key = ANY(%s)"
REMOTE_LEDGERS = "SELECT count(*) FROM ledgers WHERE location = 'remote'"
NTH_NEWEST_ENDED = (
    "SELECT seq FROM txns WHERE state <> 'open' AND ended_ms >= %s"
    " ORDER BY seq DESC LIMIT 1 OFFSET %s"
)
TXNS = (
    "SELECT seq, state, timeout_ms, deadline_ms, transactional_id, label, fenced::int,"
    " topics, acks, created_ms, ended_ms, reason, owner FROM txns"
    " WHERE state = 'open' OR (ended_ms >= %s AND seq >= %s) ORDER BY seq"
)
FINISH_KEYS = "SELECT key FROM finish_keys ORDER BY key"
PRODUCER_EPOCHS = "SELECT name, epoch, session, used_ms, txn_seq FROM producer_epochs ORDER BY name"
ENDED_ROWS = (
    "SELECT seq, state, timeout_ms, deadline_ms, label, fenced::int, topics, created_ms,"
    " reason, owner FROM txns WHERE state <> 'open'"
)
ENDED_TXN = ENDED_ROWS + " AND seq = %s"
OUTCOME_FLAGS = "(state = 'committed')::int | (fenced::int << 1)"


# -- reads: snapshots --------------------------------------------------------------------

SNAPSHOTS = "SELECT snapshot_id, data FROM snapshots WHERE topic_id = %s ORDER BY snapshot_id DESC"
SNAPSHOT_COUNTERS = (
    "SELECT (SELECT coalesce(max(snapshot_id), -1) FROM snapshots WHERE topic_id = %s),"
    " (SELECT coalesce(max(segment_id), -1) FROM snapshot_segments WHERE topic_id = %s)"
)
_SEGMENTS = (
    "SELECT segment_id, data FROM snapshot_segments"
    " WHERE topic_id = %s AND segment_id = ANY(%s::bigint[])"
)


def segments(topic_id: int, ids: Sequence[int]) -> tuple[str, Params]:
    """``(segment_id, data)`` of the given segments (the ids as one array)."""
    return _SEGMENTS, (topic_id, [int(i) for i in ids])


# -- reads: every topic at once (recovery, see PgStore.prefetch_recovery) ----------------

ALL_LEDGERS = (
    "SELECT topic_id, ledger_id, created_ms, entries, bytes, has_aborts::int, location, url,"
    " size, checksum, base_offset FROM ledgers ORDER BY topic_id, ledger_id"
)
ALL_OPEN_LEDGER_TOTALS = (
    "SELECT l.topic_id, l.ledger_id, count(e.entry_id), coalesce(sum(length(e.data)), 0)::bigint"
    " FROM ledgers l LEFT JOIN entries e"
    " ON e.topic_id = l.topic_id AND e.ledger_id = l.ledger_id"
    " WHERE l.entries IS NULL GROUP BY l.topic_id, l.ledger_id"
)
ALL_SNAPSHOTS = (
    "SELECT topic_id, snapshot_id, data FROM snapshots ORDER BY topic_id, snapshot_id DESC"
)
ALL_SEGMENT_COUNTERS = "SELECT topic_id, max(segment_id) FROM snapshot_segments GROUP BY topic_id"
ALL_PRODUCERS = "SELECT topic_id, producer, last_seq, positions FROM producers"
ALL_TOPIC_IDS = "SELECT topic_id FROM topics"

# -- the store read from another process (_pg_view) --------------------------------------

VIEW_TABLES = (
    "SELECT table_name FROM information_schema.tables"
    " WHERE table_schema = current_schema() AND table_name = ANY(%s::text[])"
)
VIEW_TOPIC = "SELECT topic_id FROM topics WHERE name = %s"
VIEW_FIRST = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = %s"
    " ORDER BY ledger_id, entry_id LIMIT 1"
)
VIEW_LAST = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = %s"
    " ORDER BY ledger_id DESC, entry_id DESC LIMIT 1"
)
VIEW_LAST_BEFORE = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = %s"
    " AND (ledger_id, entry_id) < (%s, %s) ORDER BY ledger_id DESC, entry_id DESC LIMIT 1"
)
VIEW_REMOTE = (
    "SELECT ledger_id, entries, url, size FROM ledgers WHERE topic_id = %s"
    " AND location = 'remote' ORDER BY ledger_id"
)
_VIEW_UNDECIDED = "SELECT seq, topics FROM txns WHERE state <> ALL(%s::text[])"
_VIEW_FIRST_DATA = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = %s AND kind = 0"
    " AND txn = ANY(%s::bigint[])"
)


def view_undecided(decided: Sequence[str]) -> tuple[str, Params]:
    """``(seq, topics)`` of the transactions whose state is not in ``decided``."""
    return _VIEW_UNDECIDED, (list(decided),)


def view_first_data(topic_id: int, txns: Sequence[int]) -> tuple[str, Params]:
    """``(ledger_id, entry_id)`` of the data entries of ``txns`` (no order yet)."""
    return _VIEW_FIRST_DATA, (topic_id, [int(txn) for txn in txns])


VIEW_AFTER = " AND (ledger_id, entry_id) > (%s, %s)"
VIEW_FIRST_ORDER = " ORDER BY ledger_id, entry_id LIMIT 1"
VIEW_NTH = (
    "SELECT ledger_id, entry_id FROM entries WHERE topic_id = %s"
    " AND (ledger_id, entry_id) >= (%s, %s) ORDER BY ledger_id, entry_id LIMIT 1 OFFSET %s"
)
VIEW_LEDGER_TOPS = (
    "SELECT ledger_id, (SELECT max(entry_id) FROM entries e WHERE e.topic_id ="
    " l.topic_id AND e.ledger_id = l.ledger_id) FROM ledgers l WHERE topic_id = %s"
    " ORDER BY ledger_id"
)
VIEW_HAS_ABORTS = (
    "SELECT 1 FROM ledgers WHERE topic_id = %s AND ledger_id >= %s AND has_aborts LIMIT 1"
)
VIEW_ABORTED = (
    "SELECT txn FROM aborted_txns WHERE topic_id = %s"
    " AND (marker_ledger, marker_entry) >= (%s, %s)"
    " AND (first_ledger, first_entry) < (%s, %s) AND (last_ledger, last_entry) >= (%s, %s)"
)
VIEW_DATA = (
    "SELECT entry_id, txn, data FROM entries WHERE topic_id = %s AND ledger_id = %s"
    " AND entry_id >= %s AND entry_id < %s AND kind = 0 ORDER BY entry_id"
)
