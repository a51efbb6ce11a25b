"""The SQLite store's schema: one file per data directory, migrated by ``PRAGMA user_version``.

Every record the store keeps lives here, whichever layer's records they are (the log,
the catalog, subscriptions and cursors, the coordinator's transactions, snapshots): the
layers reach them only through :class:`~txnstream.ledger.Store` and
:class:`~txnstream.ledger.WriteBatch`, whose statements are
:mod:`txnstream.ledger._sqlite_sql`'s.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 8

DB_FILE = "txnstream.db"
"""The name of the one SQLite file in a data directory."""

PRODUCER_EPOCHS_DDL = """
CREATE TABLE IF NOT EXISTS producer_epochs (
    name    TEXT PRIMARY KEY,
    epoch   INTEGER NOT NULL,
    session TEXT NOT NULL,
    used_ms INTEGER NOT NULL,
    txn_seq INTEGER
) WITHOUT ROWID;
"""

# Every table lives in the same file, so one SQLite transaction (one group commit) can
# carry data, markers, coordinator decisions and cursor updates atomically.
_DDL_V1 = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value ANY
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS topics (
    topic_id   INTEGER PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL,
    retention  BLOB
);

-- entries/bytes are NULL while a ledger is open; set when it is sealed.
CREATE TABLE IF NOT EXISTS ledgers (
    topic_id   INTEGER NOT NULL,
    ledger_id  INTEGER NOT NULL,
    created_ms INTEGER NOT NULL,
    entries    INTEGER,
    bytes      INTEGER,
    has_aborts INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (topic_id, ledger_id)
) WITHOUT ROWID;

-- kind: 0 data, 1 commit marker, 2 abort marker; txn: transaction sequence or NULL.
CREATE TABLE IF NOT EXISTS entries (
    topic_id  INTEGER NOT NULL,
    ledger_id INTEGER NOT NULL,
    entry_id  INTEGER NOT NULL,
    kind      INTEGER NOT NULL,
    txn       INTEGER,
    data      BLOB NOT NULL,
    PRIMARY KEY (topic_id, ledger_id, entry_id)
) WITHOUT ROWID;

-- Kafka-style aborted transaction index: one row per aborted transaction per topic,
-- recorded in the ledger its ABORT marker went to (marker_ledger).
CREATE TABLE IF NOT EXISTS aborted_txns (
    topic_id      INTEGER NOT NULL,
    txn           INTEGER NOT NULL,
    first_ledger  INTEGER NOT NULL,
    first_entry   INTEGER NOT NULL,
    last_ledger   INTEGER NOT NULL,
    last_entry    INTEGER NOT NULL,
    marker_ledger INTEGER NOT NULL,
    marker_entry  INTEGER NOT NULL,
    stable_ledger INTEGER,
    stable_entry  INTEGER,
    PRIMARY KEY (topic_id, txn)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS aborted_txns_by_marker
    ON aborted_txns (topic_id, marker_ledger, marker_entry);

CREATE TABLE IF NOT EXISTS producers (
    topic_id  INTEGER NOT NULL,
    producer  TEXT NOT NULL,
    last_seq  INTEGER NOT NULL,
    positions BLOB NOT NULL,
    PRIMARY KEY (topic_id, producer)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS subscriptions (
    topic_id   INTEGER NOT NULL,
    name       TEXT NOT NULL,
    type       TEXT NOT NULL,
    isolation  TEXT NOT NULL,
    cursor     BLOB NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (topic_id, name)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS txns (
    seq              INTEGER PRIMARY KEY,
    state            TEXT NOT NULL,
    timeout_ms       INTEGER NOT NULL,
    deadline_ms      INTEGER NOT NULL,
    transactional_id TEXT,
    label            TEXT,
    fenced           INTEGER NOT NULL DEFAULT 0,
    topics           BLOB NOT NULL,
    acks             BLOB NOT NULL,
    created_ms       INTEGER NOT NULL,
    ended_ms         INTEGER
);

CREATE TABLE IF NOT EXISTS finish_keys (
    key        TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL
) WITHOUT ROWID;

-- Sealed, immutable segments of a topic's aborted set, referenced by snapshots' indexes.
CREATE TABLE IF NOT EXISTS snapshot_segments (
    topic_id   INTEGER NOT NULL,
    segment_id INTEGER NOT NULL,
    data       BLOB NOT NULL,
    PRIMARY KEY (topic_id, segment_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS snapshots (
    topic_id    INTEGER NOT NULL,
    snapshot_id INTEGER NOT NULL,
    ledger_id   INTEGER NOT NULL,
    entry_id    INTEGER NOT NULL,
    taken_ms    INTEGER NOT NULL,
    data        BLOB NOT NULL,
    PRIMARY KEY (topic_id, snapshot_id)
) WITHOUT ROWID;
"""


# Each step brings the schema from version N-1 to N; a database only ever moves forward.
_STEPS: dict[int, str] = {
    1: _DDL_V1,
    # why a transaction ended (client, timeout, fenced, low_watermark), for operators
    2: "ALTER TABLE txns ADD COLUMN reason TEXT;",
    # the principal that began a transaction (HTTP auth); NULL: unowned (embedded, no auth)
    3: "ALTER TABLE txns ADD COLUMN owner TEXT;",
    # tiered storage: where a ledger lives ('local' or 'remote': its object's URL, size
    # and checksum) and each topic's offload policy
    4: """
ALTER TABLE ledgers ADD COLUMN location TEXT NOT NULL DEFAULT 'local';
ALTER TABLE ledgers ADD COLUMN url TEXT;
ALTER TABLE ledgers ADD COLUMN size INTEGER;
ALTER TABLE ledgers ADD COLUMN checksum TEXT;
ALTER TABLE topics ADD COLUMN offload BLOB;
""",
    # Kafka offsets: the topic-wide offset of each ledger's entry 0 (entries before it in
    # the ledgers still listed; a ledger left open by a crash holds NULL entries and is
    # the last, so no base depends on it)
    5: """
ALTER TABLE ledgers ADD COLUMN base_offset INTEGER NOT NULL DEFAULT 0;
UPDATE ledgers SET base_offset = (
    SELECT coalesce(sum(coalesce(earlier.entries, 0)), 0) FROM ledgers AS earlier
    WHERE earlier.topic_id = ledgers.topic_id AND earlier.ledger_id < ledgers.ledger_id
);
""",
    # partitioned topics: a name and a partition count; the partitions are ordinary
    # topics named {name}-partition-{i}
    6: """
CREATE TABLE IF NOT EXISTS partitioned_topics (
    name       TEXT PRIMARY KEY,
    partitions INTEGER NOT NULL,
    created_ms INTEGER NOT NULL
) WITHOUT ROWID;
""",
    # consumer policies: a topic's message TTL, a subscription's encoded policy (redelivery
    # limit, dead-letter topic, nack delay), and the redelivery state that must outlive a
    # restart: how often a position was released unacknowledged, and not before when it
    # is delivered again (a delayed nack); and the delivery times messages were sent with
    7: """
ALTER TABLE topics ADD COLUMN ttl_ms INTEGER;
ALTER TABLE subscriptions ADD COLUMN policy BLOB;
CREATE TABLE IF NOT EXISTS redeliveries (
    topic_id      INTEGER NOT NULL,
    name          TEXT NOT NULL,
    ledger_id     INTEGER NOT NULL,
    entry_id      INTEGER NOT NULL,
    count         INTEGER NOT NULL,
    not_before_ms INTEGER NOT NULL,
    PRIMARY KEY (topic_id, name, ledger_id, entry_id)
) WITHOUT ROWID;
-- messages sent with a delivery time (deliverAt/deliverAfter), until that time passes
CREATE TABLE IF NOT EXISTS delivery_times (
    topic_id      INTEGER NOT NULL,
    ledger_id     INTEGER NOT NULL,
    entry_id      INTEGER NOT NULL,
    deliver_at_ms INTEGER NOT NULL,
    PRIMARY KEY (topic_id, ledger_id, entry_id)
) WITHOUT ROWID;
""",
    # producer epochs: each transactional id's current epoch (in its owner's namespace,
    # as the coordinator scopes it), the session of the bump that made it, when the id
    # was last used (for its expiry) and the epoch's newest transaction (NULL: none yet),
    # so a restart or a failover keeps fencing zombies and lets a producer go on
    8: PRODUCER_EPOCHS_DDL,
}


def migrate(conn: sqlite3.Connection) -> None:
    """Bring a database to :data:`SCHEMA_VERSION` (runs in the writer thread)."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise RuntimeError(
            f"data directory was written by a newer txnstream (schema {version} > {SCHEMA_VERSION})"
        )
    for step in range(version + 1, SCHEMA_VERSION + 1):
        # one transaction per step (user_version included): a crash redoes a whole step
        conn.executescript(f"BEGIN; {_STEPS[step]}\nPRAGMA user_version = {step}; COMMIT;")
