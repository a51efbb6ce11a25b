"""Applying a flush to PostgreSQL: one transaction, fenced first, pipelined, durable when
COMMIT returns; and, when the connection broke around the COMMIT, finding out whether it
committed.

:func:`apply_flush` is what the PostgreSQL store's group commit does with every flush
(the writes of many callers, merged): ``BEGIN``, the fence (:data:`~._pg_lease.FENCE_SQL`
for each claimed scope), every run of rows, the flush's mark, ``COMMIT``, all sent in
pipeline mode, so the whole flush costs one round trip plus PostgreSQL's commit (its WAL
flush, and the synchronous standby's, per ``synchronous_commit``). A fence that fails
aborts the transaction on the server; PostgreSQL skips everything after it and the
COMMIT becomes a rollback, so nothing of the flush is stored.

A COMMIT whose answer was lost (the connection broke, PostgreSQL restarted) leaves the
flush in doubt: it may have committed. Each flush therefore also writes its *mark*
(``flush_marks``: the scope's epoch and the flush's sequence number) in the same
transaction, and :func:`flush_committed` settles the doubt on a new connection: it locks
the scope's lease row ``FOR UPDATE``, which waits until every transaction still holding it
``FOR SHARE`` (the flush in doubt, if its backend still runs) has ended, then reads the
mark. The writer makes no further flush before the doubt is settled, so the mark is the
in-doubt flush's exactly when it committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg

from ._errors import LeaseLostError
from ._pg_lease import FENCE_SQL, as_lease_lost

Params = Sequence[Any]
Run = tuple[str, Sequence[Params]]
"""A statement and the rows of parameters it runs with, in order."""

MARKS_DDL = """
CREATE TABLE IF NOT EXISTS flush_marks (
    scope TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    seq   BIGINT NOT NULL
);
"""
"""The table of each scope's last committed flush (part of the schema's first version)."""

_MARK = """
INSERT INTO flush_marks (scope, epoch, seq) VALUES (%s, %s, %s)
ON CONFLICT (scope) DO UPDATE SET epoch = EXCLUDED.epoch, seq = EXCLUDED.seq
"""
_LOCK_LEASE = "SELECT epoch FROM leases WHERE scope = %s FOR UPDATE"
_READ_MARK = "SELECT epoch, seq FROM flush_marks WHERE scope = %s"


async def apply_flush(
    conn: psycopg.AsyncConnection[Any],
    claims: Mapping[str, int],
    runs: Iterable[Run],
    seq: int,
) -> None:
    """Apply ``runs`` in one transaction on ``conn`` (autocommit, idle), fenced by
    ``claims`` (scope -> epoch) and marked with flush number ``seq`` in each scope;
    returns once COMMIT returned.

    Raises :class:`~txnstream.ledger.LeaseLostError` when a scope's lease moved
    (nothing stored), ``psycopg.Error`` for anything else: a statement's error (nothing
    stored) or a connection failure (the outcome unknown: see :func:`flush_committed`).
    """
    try:
        async with conn.pipeline(), conn.transaction():
            for scope, epoch in sorted(claims.items()):
                await conn.execute(FENCE_SQL, (scope, epoch))
            async with conn.cursor() as cur:
                for sql, rows in runs:
                    if len(rows) == 1:
                        await cur.execute(sql, rows[0])
                    elif rows:
                        await cur.executemany(sql, rows)
                await cur.executemany(
                    _MARK, [(scope, epoch, seq) for scope, epoch in sorted(claims.items())]
                )
    except psycopg.Error as exc:
        lost = as_lease_lost(exc, claims)
        if lost is not None:
            raise lost from exc
        raise


async def flush_committed(
    conn: psycopg.AsyncConnection[Any],
    claims: Mapping[str, int],
    seq: int,
    lock_timeout: float | None = None,
) -> bool:
    """Whether the flush numbered ``seq`` under ``claims`` committed, asked on a new
    connection after :func:`apply_flush` failed with its outcome unknown.

    Waits until no transaction holds the claimed lease rows any more (the flush in doubt
    ends one way or the other first), at most ``lock_timeout`` seconds when given (then
    ``psycopg.errors.LockNotAvailable``: still in doubt). Raises
    :class:`~txnstream.ledger.LeaseLostError` if a scope's lease moved meanwhile: the
    flush may then have committed before the takeover, and only the new holder's state
    (which includes it if so) tells.
    """
    committed = True
    async with conn.transaction():
        if lock_timeout is not None:
            milliseconds = max(1, round(lock_timeout * 1000))
            await conn.execute(
                "SELECT set_config('lock_timeout', %s, true)", (f"{milliseconds}ms",)
            )
        for scope, epoch in sorted(claims.items()):
            row = await (await conn.execute(_LOCK_LEASE, (scope,))).fetchone()
            if row is None or int(row[0]) != epoch:
                moved = "none" if row is None else row[0]
                raise LeaseLostError(
                    f"lease of scope {scope!r} is at epoch {moved}: this writer's epoch"
                    f" {epoch} is fenced out (a flush of it was in doubt)",
                    scope,
                    epoch,
                )
            mark = await (await conn.execute(_READ_MARK, (scope,))).fetchone()
            committed = committed and mark is not None and tuple(mark) == (epoch, seq)
    return committed
