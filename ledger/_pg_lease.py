"""Leadership on a PostgreSQL store: a lease row per scope, and the epoch that fences writes.

Several servers may open one database; for each *scope* exactly one of them is the active.
Today there is one scope, :data:`STORE_SCOPE` (the whole store); later a scope can be a
topic or a bundle of topics (as Pulsar's brokers own bundles), and "the active" becomes
"the owner of this scope": every operation here takes the scope, and :func:`fence` takes
a mapping of scopes to epochs, so that step changes callers, not this module.

The row (``leases``) holds an **epoch**, a fencing token bumped by every acquisition; the
**holder**'s id (unique per server process); the **url** clients are sent to; the
**kafka** address (``HOST:PORT``) Kafka clients are sent to, when the holder listens for
them (schema version 2); and the expiry, computed on the database's clock
(``clock_timestamp()``), never a client's, so servers with skewed clocks agree on when a
lease has expired.

- :meth:`Lease.try_acquire` takes the row only if it is free (released or never held) or
  expired, and bumps the epoch: an ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` whose
  condition PostgreSQL re-checks on the newest row version under the row lock, so of any
  number of contenders exactly one wins.
- :meth:`Lease.renew` extends the expiry only while the row still carries our epoch, and
  returns False once the lease was taken over. (A lease that expired but that nobody took
  is renewed: safety rests on the epoch, not on the clock.)
- :meth:`Lease.release` (clean shutdown) frees the row, so a standby need not wait for the
  expiry. :func:`read_lease` says who holds a scope and where clients should go.
- :func:`fence` is the first statement of every write transaction of the active: it locks
  the lease row ``FOR SHARE`` and compares the epoch, raising
  :class:`~txnstream.ledger.LeaseLostError` (and so rolling the transaction back) when it
  moved.

Why ``FOR SHARE`` makes takeover linearisable against in-flight writes: a takeover is an
``UPDATE`` of the lease row, which needs a row lock that conflicts with ``FOR SHARE``, and
row locks are held until the transaction ends, COMMIT (with its WAL flush and synchronous
replication wait) included. So for a write transaction W of epoch N and a takeover T:

- W locked the row first: T waits until W has committed or rolled back. Whatever W wrote
  is visible before epoch N+1 exists, and the new active, which loads its state only after
  its takeover committed, sees it.
- T locked the row first: W's ``FOR SHARE`` waits until T ends, then (read committed)
  reads the newest row version, sees epoch N+1 and fails before writing anything.
- T committed before W started: W reads epoch N+1 and fails.

There is no fourth case. A plain ``SELECT`` of the epoch would not do: W could read epoch
N, T commit and the new active load its state, and W then commit writes the new active
never saw (a cursor moved back, an entry id used twice). The check costs one row lock per
write transaction, taken in the same round trip as the writes when pipelined
(:data:`FENCE_SQL` fails the transaction on the server, so everything after it in the
pipeline is skipped and the COMMIT becomes a rollback).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from ._errors import InvalidArgumentError, LeaseLostError

STORE_SCOPE = "store"
"""The scope of the whole store (the only one until topics get owners of their own)."""

FENCED_SQLSTATE = "TXNF1"
"""The SQLSTATE :data:`FENCE_SQL` fails with when the epoch moved."""

LEASE_DDL = f"""
CREATE TABLE IF NOT EXISTS leases (
    scope       TEXT PRIMARY KEY,
    epoch       BIGINT NOT NULL,
    holder      TEXT,
    url         TEXT,
    acquired_at TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);

CREATE OR REPLACE FUNCTION txnstream_fence(p_scope TEXT, p_epoch BIGINT) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
    current_epoch BIGINT;
BEGIN
    SELECT epoch INTO current_epoch FROM leases WHERE scope = p_scope FOR SHARE;
    IF current_epoch IS DISTINCT FROM p_epoch THEN
        RAISE EXCEPTION 'lease of scope % is at epoch %: this writer''s epoch % is fenced out',
            quote_literal(p_scope), coalesce(current_epoch::TEXT, 'none'), p_epoch
            USING ERRCODE = '{FENCED_SQLSTATE}', DETAIL = p_scope;
    END IF;
END
$$;
"""
"""The lease table and the fence function (part of the PostgreSQL schema's first version)."""

LEASE_DDL_V2 = "ALTER TABLE leases ADD COLUMN IF NOT EXISTS kafka TEXT"
"""Schema version 2: the active's advertised Kafka address (NULL: it serves no Kafka
clients, or the row was written by a version-1 server). During a rolling upgrade a
version-1 server that takes the lease leaves the column as its predecessor wrote it
(its statements do not name it): upgrade every server before relying on Kafka clients
being sent to the active."""

FENCE_SQL = "SELECT txnstream_fence(%s, %s)"
"""The fence check, parameters ``(scope, epoch)``: the first statement of a write
transaction; fails with :data:`FENCED_SQLSTATE` (rolling the transaction back) when the
scope's lease no longer carries ``epoch``."""

_ACQUIRE = """
INSERT INTO leases AS l (scope, epoch, holder, url, kafka, acquired_at, expires_at)
VALUES (%(scope)s, 1, %(holder)s, %(url)s, %(kafka)s, clock_timestamp(),
        clock_timestamp() + make_interval(secs => %(ttl)s))
ON CONFLICT (scope) DO UPDATE
    SET epoch = l.epoch + 1, holder = EXCLUDED.holder, url = EXCLUDED.url,
        kafka = EXCLUDED.kafka, acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
    WHERE l.holder IS NULL OR l.expires_at <= clock_timestamp()
RETURNING epoch
"""
_RENEW = """
UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => %(ttl)s)
WHERE scope = %(scope)s AND epoch = %(epoch)s
RETURNING epoch
"""
_RELEASE = """
UPDATE leases SET holder = NULL, url = NULL, kafka = NULL, expires_at = clock_timestamp()
WHERE scope = %(scope)s AND epoch = %(epoch)s
"""
_READ = """
SELECT scope, epoch, holder, url, kafka, acquired_at, expires_at,
       holder IS NULL OR expires_at <= clock_timestamp()
FROM leases WHERE scope = %s
"""


@dataclass(frozen=True)
class LeaseState:
    """A scope's lease row as read (times on the database's clock)."""

    scope: str
    epoch: int
    holder: str | None
    url: str | None
    kafka: str | None
    """The holder's advertised Kafka address (``HOST:PORT``), None without a listener."""
    acquired_at: datetime
    expires_at: datetime
    free: bool
    """Released or expired when read: the next :meth:`Lease.try_acquire` wins it."""

    @property
    def active_url(self) -> str | None:
        """Where the active of this scope serves, or None when nobody holds it."""
        return None if self.free else self.url

    @property
    def active_kafka(self) -> str | None:
        """Where the active of this scope serves Kafka clients (``HOST:PORT``), or None
        when nobody holds it or it has no Kafka listener."""
        return None if self.free else self.kafka


class Lease:
    """One server's claim on one scope's lease.

    ``holder`` identifies this server process (unique: a restarted server is a new
    holder), ``url`` is where clients should go while it is the active (and ``kafka``
    where Kafka clients should), ``ttl`` the lease timeout in seconds. Each operation
    runs as its own transaction on the given connection, or as a savepoint of the
    caller's open transaction.
    """

    def __init__(
        self,
        holder: str,
        url: str | None,
        ttl: float,
        scope: str = STORE_SCOPE,
        *,
        kafka: str | None = None,
    ) -> None:
        if not (isinstance(ttl, int | float) and math.isfinite(ttl) and ttl > 0):
            raise InvalidArgumentError(f"lease timeout must be a positive number, not {ttl!r}")
        if not holder:
            raise InvalidArgumentError("a lease holder needs a non-empty id")
        self.scope = scope
        self.holder = holder
        self.url = url
        self.kafka = kafka
        self.ttl = float(ttl)
        self.epoch: int | None = None
        """The epoch this server holds the lease with, None while it does not."""
        self.valid_until = 0.0
        """``time.monotonic()`` before which the lease is surely still ours: the moment
        the last acquisition or renewal was sent, plus ``ttl`` (the database's expiry is
        later than that, so a server that steps down at this time never overlaps a
        successor that waited for the expiry)."""

    @property
    def held(self) -> bool:
        """True while this server holds the lease and its local deadline has not passed."""
        return self.epoch is not None and time.monotonic() < self.valid_until

    async def try_acquire(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Take the lease if it is free or expired, with the next epoch; False if another
        holder has it."""
        sent = time.monotonic()
        params = {
            "scope": self.scope,
            "holder": self.holder,
            "url": self.url,
            "kafka": self.kafka,
            "ttl": self.ttl,
        }
        async with conn.transaction():
            row = await (await conn.execute(_ACQUIRE, params)).fetchone()
        if row is None:
            return False
        self.epoch = int(row[0])
        self.valid_until = sent + self.ttl
        return True

    async def renew(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Extend the lease by ``ttl`` from now (database clock); False, and no longer
        held, if another holder took it over."""
        if self.epoch is None:
            return False
        sent = time.monotonic()
        params = {"scope": self.scope, "epoch": self.epoch, "ttl": self.ttl}
        async with conn.transaction():
            row = await (await conn.execute(_RENEW, params)).fetchone()
        if row is None:
            self.epoch = None
            return False
        self.valid_until = sent + self.ttl
        return True

    async def release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Give the lease up (clean shutdown), so a standby takes over without waiting for
        the expiry. Does nothing if it was already lost."""
        if self.epoch is None:
            return
        async with conn.transaction():
            await conn.execute(_RELEASE, {"scope": self.scope, "epoch": self.epoch})
        self.epoch = None

    async def fence(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """:func:`fence` with this lease's scope and epoch (inside the write transaction)."""
        if self.epoch is None:
            raise LeaseLostError(
                f"this server does not hold the lease of scope {self.scope!r}", self.scope, -1
            )
        await fence(conn, {self.scope: self.epoch})


async def fence(conn: psycopg.AsyncConnection[Any], claims: Mapping[str, int]) -> None:
    """Check, inside the caller's open write transaction, that each scope's lease still
    carries its epoch, locking the rows ``FOR SHARE`` until the transaction ends; raises
    :class:`~txnstream.ledger.LeaseLostError` if one moved (the caller rolls back).

    Scopes are locked in sorted order, so writers fencing several scopes never deadlock.
    """
    for scope, epoch in sorted(claims.items()):
        try:
            await conn.execute(FENCE_SQL, (scope, epoch))
        except psycopg.Error as exc:
            lost = as_lease_lost(exc, claims)
            if lost is None:
                raise
            raise lost from exc


def as_lease_lost(exc: BaseException, claims: Mapping[str, int]) -> LeaseLostError | None:
    """The :class:`~txnstream.ledger.LeaseLostError` a failed :data:`FENCE_SQL` stands
    for (``claims``: the scopes and epochs the transaction fenced), else None."""
    if not isinstance(exc, psycopg.Error) or exc.sqlstate != FENCED_SQLSTATE:
        return None
    scope = exc.diag.message_detail or ""
    return LeaseLostError(exc.diag.message_primary or str(exc), scope, claims.get(scope, -1))


async def read_lease(
    conn: psycopg.AsyncConnection[Any], scope: str = STORE_SCOPE
) -> LeaseState | None:
    """The lease row of ``scope`` (None if nobody ever held it)."""
    row = await (await conn.execute(_READ, (scope,))).fetchone()
    if row is None:
        return None
    name, epoch, holder, url, kafka, acquired_at, expires_at, free = row
    return LeaseState(name, int(epoch), holder, url, kafka, acquired_at, expires_at, bool(free))


async def create_lease_schema(conn: psycopg.AsyncConnection[Any]) -> None:
    """Create the lease table and fence function, at the schema's current version (the
    schema migration runs these too)."""
    async with conn.transaction():
        await conn.execute(LEASE_DDL)
        await conn.execute(LEASE_DDL_V2)
