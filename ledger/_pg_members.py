"""The servers sharing a PostgreSQL store: a row each, so every one knows the others.

The lease row (:mod:`._pg_lease`) names the active; it says nothing of the standbys. A
Kafka client needs them: a Kafka cluster's Metadata lists every broker, so a client
bootstrapped with one address learns the rest, and when the leader dies it asks another
broker it knows who leads now. librdkafka (since 2.10) forgets every broker a Metadata
response does not list, its bootstrap addresses included; told of the active alone, it has
no one left to ask once the active dies, and waits for its re-bootstrap timer (minutes).

So each server, active or standby, keeps a row in ``members`` (schema version 3): its
member id (unique per server process), its advertised URL and Kafka address, and an expiry
on the database's clock, extended at every lease renewal (the active) or lease poll (a
standby), deleted on a clean shutdown. A server that dies stays listed for
:data:`LINGER` seconds past its row's expiry: a client that tries it finds it down and
asks another. (Dropping it as its row expires, which is when a standby takes over,
would make the first Metadata that names the new leader also drop the old one, and
librdkafka 2.16, tearing down the old broker while it moves the partitions to the new
one, leaves them with no leader, producing nothing, until its next periodic refresh.)
Rows long expired are deleted by the next announcement.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ._store import Member

MEMBERS_DDL_V3 = """
CREATE TABLE IF NOT EXISTS members (
    member     TEXT PRIMARY KEY,
    url        TEXT,
    kafka      TEXT,
    expires_at TIMESTAMPTZ NOT NULL
)
"""
"""Schema version 3: the servers sharing the store (see the module docstring)."""

LINGER = 30.0
"""Seconds a server stays listed after its row expired (see the module docstring)."""

_FORGET_AFTER = 3600.0
"""Seconds after its expiry that a dead server's row is deleted (kept a while: an
operator looking at the table sees who was there)."""

_ANNOUNCE = """
INSERT INTO members AS m (member, url, kafka, expires_at)
VALUES (%(member)s, %(url)s, %(kafka)s, clock_timestamp() + make_interval(secs => %(ttl)s))
ON CONFLICT (member) DO UPDATE
    SET url = EXCLUDED.url, kafka = EXCLUDED.kafka, expires_at = EXCLUDED.expires_at
"""
_FORGET = "DELETE FROM members WHERE expires_at < clock_timestamp() - make_interval(secs => %s)"
_WITHDRAW = "DELETE FROM members WHERE member = %s"
_READ = """
SELECT member, url, kafka FROM members
WHERE expires_at > clock_timestamp() - make_interval(secs => %s)
ORDER BY member
"""


async def announce(conn: psycopg.AsyncConnection[Any], member: Member, ttl: float) -> None:
    """Say that ``member`` serves on this store for the next ``ttl`` seconds (and delete
    rows long expired). Runs as its own transaction, or a savepoint of the caller's."""
    params = {"member": member.member, "url": member.url, "kafka": member.kafka, "ttl": ttl}
    async with conn.transaction():
        await conn.execute(_ANNOUNCE, params)
        await conn.execute(_FORGET, (_FORGET_AFTER,))


async def withdraw(conn: psycopg.AsyncConnection[Any], member: str) -> None:
    """Remove ``member``'s row (clean shutdown: it no longer serves)."""
    await conn.execute(_WITHDRAW, (member,))


async def read_members(conn: psycopg.AsyncConnection[Any]) -> tuple[Member, ...]:
    """The servers whose rows have not expired (or did less than :data:`LINGER`
    seconds ago), ordered by member id."""
    rows = await (await conn.execute(_READ, (LINGER,))).fetchall()
    return tuple(Member(str(member), url, kafka) for member, url, kafka in rows)
