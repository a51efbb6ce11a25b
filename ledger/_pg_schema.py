"""The PostgreSQL schema: the tables of :mod:`._schema` in PostgreSQL's types, plus the
lease, migrated on open under an advisory lock.

The tables and columns are SQLite's, one for one (a test compares them), plus PostgreSQL's
own: ``leases`` (:mod:`._pg_lease`), ``members`` (:mod:`._pg_members`) and
``flush_marks`` (:mod:`._pg_write`). Both stores keep the same rows: ``BIGINT`` for
SQLite's integers (ids, sequence numbers and milliseconds all pass 2**31), ``BYTEA`` for
blobs, ``BOOLEAN`` for flags, and a primary key on every table. SQLite's ``WITHOUT
ROWID`` tables (clustered on their key) become heap tables with a primary-key B-tree: a
range read of ``entries`` is an index range scan on ``(topic_id, ledger_id, entry_id)``,
and appends land on the index's right edge.

Every table lives in one database, so one PostgreSQL transaction (one group commit) can
carry data, markers, coordinator decisions and cursor updates atomically, as with SQLite.

:func:`migrate` runs on every open. Any number of servers may open one database at once:
each takes a transaction-scoped advisory lock first, so one migrates while the others
wait, then find the schema current and do nothing. The version lives in
``schema_version`` (one row); a database only moves forward, all steps in the one
transaction (a crash mid-way leaves the previous version, whole).
"""

from __future__ import annotations

from typing import Any

import psycopg

from ._errors import LedgerError
from ._pg_lease import LEASE_DDL, LEASE_DDL_V2
from ._pg_members import MEMBERS_DDL_V3
from ._pg_write import MARKS_DDL

SCHEMA_VERSION = 4

MIGRATION_LOCK = 0x7478_6E73_7472_6D00
"""The advisory lock key (``txnstrm\\0``) migrating openers serialise on."""

_VERSION_DDL = """
CREATE TABLE IF NOT EXISTS schema_version (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    version   INTEGER NOT NULL
)
"""

_DDL_V1 = (
    """
-- the store's own settings: counters it hands out (next_topic_id, next_txn_seq) and its
-- identity (store_id, ...); text, as SQLite's untyped column holds either
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- partitioned topics: a name and a partition count; the partitions are ordinary topics
-- named {name}-partition-{i}
CREATE TABLE partitioned_topics (
    name       TEXT PRIMARY KEY,
    partitions INTEGER NOT NULL,
    created_ms BIGINT NOT NULL
);

CREATE TABLE topics (
    topic_id   BIGINT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_ms BIGINT NOT NULL,
    retention  BYTEA,
    offload    BYTEA,
    ttl_ms     BIGINT  -- the message TTL (NULL: messages never expire)
);

-- entries/bytes are NULL while a ledger is open; set when it is sealed. location: 'local'
-- (rows in entries) or 'remote' (an object at url, of size bytes, with checksum).
CREATE TABLE ledgers (
    topic_id   BIGINT NOT NULL,
    ledger_id  BIGINT NOT NULL,
    created_ms BIGINT NOT NULL,
    entries    BIGINT,
    bytes      BIGINT,
    has_aborts BOOLEAN NOT NULL DEFAULT FALSE,
    location   TEXT NOT NULL DEFAULT 'local',
    url        TEXT,
    size       BIGINT,
    checksum   TEXT,
    base_offset BIGINT NOT NULL DEFAULT 0,  -- the Kafka offset of its first entry
    PRIMARY KEY (topic_id, ledger_id)
);

-- kind: 0 data, 1 commit marker, 2 abort marker; txn: transaction sequence or NULL.
CREATE TABLE entries (
    topic_id  BIGINT NOT NULL,
    ledger_id BIGINT NOT NULL,
    entry_id  BIGINT NOT NULL,
    kind      SMALLINT NOT NULL,
    txn       BIGINT,
    data      BYTEA NOT NULL,
    PRIMARY KEY (topic_id, ledger_id, entry_id)
);

-- Kafka-style aborted transaction index: one row per aborted transaction per topic,
-- recorded in the ledger its ABORT marker went to (marker_ledger).
CREATE TABLE aborted_txns (
    topic_id      BIGINT NOT NULL,
    txn           BIGINT NOT NULL,
    first_ledger  BIGINT NOT NULL,
    first_entry   BIGINT NOT NULL,
    last_ledger   BIGINT NOT NULL,
    last_entry    BIGINT NOT NULL,
    marker_ledger BIGINT NOT NULL,
    marker_entry  BIGINT NOT NULL,
    stable_ledger BIGINT,
    stable_entry  BIGINT,
    PRIMARY KEY (topic_id, txn)
);
CREATE INDEX aborted_txns_by_marker ON aborted_txns (topic_id, marker_ledger, marker_entry);

CREATE TABLE producers (
    topic_id  BIGINT NOT NULL,
    producer  TEXT NOT NULL,
    last_seq  BIGINT NOT NULL,
    positions BYTEA NOT NULL,
    PRIMARY KEY (topic_id, producer)
);

CREATE TABLE subscriptions (
    topic_id   BIGINT NOT NULL,
    name       TEXT NOT NULL,
    type       TEXT NOT NULL,
    isolation  TEXT NOT NULL,
    cursor     BYTEA NOT NULL,
    created_ms BIGINT NOT NULL,
    policy     BYTEA,  -- the consumer policy (redelivery limit, dead letters, nack delay)
    PRIMARY KEY (topic_id, name)
);

-- how often a position was released unacknowledged, and not before when it is delivered
-- again (a delayed nack): what a redelivery limit must remember across a restart
CREATE TABLE redeliveries (
    topic_id      BIGINT NOT NULL,
    name          TEXT NOT NULL,
    ledger_id     BIGINT NOT NULL,
    entry_id      BIGINT NOT NULL,
    count         BIGINT NOT NULL,
    not_before_ms BIGINT NOT NULL,
    PRIMARY KEY (topic_id, name, ledger_id, entry_id)
);

-- messages sent with a delivery time (deliverAt/deliverAfter), until that time passes
CREATE TABLE delivery_times (
    topic_id      BIGINT NOT NULL,
    ledger_id     BIGINT NOT NULL,
    entry_id      BIGINT NOT NULL,
    deliver_at_ms BIGINT NOT NULL,
    PRIMARY KEY (topic_id, ledger_id, entry_id)
);

-- reason: why it ended (client, timeout, fenced, low_watermark); owner: the principal
-- that began it (HTTP auth), NULL when unowned.
CREATE TABLE txns (
    seq              BIGINT PRIMARY KEY,
    state            TEXT NOT NULL,
    timeout_ms       BIGINT NOT NULL,
    deadline_ms      BIGINT NOT NULL,
    transactional_id TEXT,
    label            TEXT,
    fenced           BOOLEAN NOT NULL DEFAULT FALSE,
    topics           BYTEA NOT NULL,
    acks             BYTEA NOT NULL,
    created_ms       BIGINT NOT NULL,
    ended_ms         BIGINT,
    reason           TEXT,
    owner            TEXT
);

CREATE TABLE finish_keys (
    key        TEXT PRIMARY KEY,
    created_ms BIGINT NOT NULL
);

-- Sealed, immutable segments of a topic's aborted set, referenced by snapshots' indexes.
CREATE TABLE snapshot_segments (
    topic_id   BIGINT NOT NULL,
    segment_id BIGINT NOT NULL,
    data       BYTEA NOT NULL,
    PRIMARY KEY (topic_id, segment_id)
);

CREATE TABLE snapshots (
    topic_id    BIGINT NOT NULL,
    snapshot_id BIGINT NOT NULL,
    ledger_id   BIGINT NOT NULL,
    entry_id    BIGINT NOT NULL,
    taken_ms    BIGINT NOT NULL,
    data        BYTEA NOT NULL,
    PRIMARY KEY (topic_id, snapshot_id)
);
"""
    + LEASE_DDL
    + MARKS_DDL
)

PRODUCER_EPOCHS_DDL_V4 = """
CREATE TABLE producer_epochs (
    name    TEXT PRIMARY KEY,
    epoch   BIGINT NOT NULL,
    session TEXT NOT NULL,
    used_ms BIGINT NOT NULL,
    txn_seq BIGINT
);
"""

# Each step brings the schema from version N-1 to N; a step, once released, never changes
# (a database at N-1 must get exactly what a fresh one gets).
_STEPS: dict[int, str] = {
    1: _DDL_V1,
    # 2: the lease row names the active's Kafka address too (a nullable column: the rows
    # a version-1 server wrote read as "no Kafka listener" until their next acquisition)
    2: LEASE_DDL_V2,
    # 3: every server sharing the store has a row (Kafka Metadata lists them all)
    3: MEMBERS_DDL_V3,
    # 4: each transactional id's producer epoch (SQLite's step 8), so a failover keeps
    # fencing zombies and lets a producer go on with its epoch
    4: PRODUCER_EPOCHS_DDL_V4,
}


async def migrate(conn: psycopg.AsyncConnection[Any]) -> int:
    """Bring the database to :data:`SCHEMA_VERSION`; returns the version it found (0:
    empty). Safe to run from any number of openers at once. Raises
    :class:`~txnstream.ledger.LedgerError` if a newer txnstream wrote the database."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(_VERSION_DDL)
        row = await (await conn.execute("SELECT version FROM schema_version")).fetchone()
        found = 0 if row is None else int(row[0])
        if found > SCHEMA_VERSION:
            raise LedgerError(
                f"the database was written by a newer txnstream (schema {found} >"
                f" {SCHEMA_VERSION}); upgrade txnstream to open it"
            )
        for step in range(found + 1, SCHEMA_VERSION + 1):
            await conn.execute(_STEPS[step])
        if found < SCHEMA_VERSION:
            await conn.execute(
                "INSERT INTO schema_version (version) VALUES (%s)"
                " ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version",
                (SCHEMA_VERSION,),
            )
    return found
