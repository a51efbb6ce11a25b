"""Applying a flush to PostgreSQL: one transaction, fenced first, pipelined, durable when
COMMIT returns; and, when the connection broke around the COMMIT, finding out whether it
committed.

:func:`apply_flush` is what the PostgreSQL store's group commit does with every flush
(the writes of many callers, merged): the fence (:data:`~._pg_lease.FENCE_SQL` for each
claimed scope), every run of rows, the flush's mark, then a Sync, all in pipeline mode
and one implicit transaction: PostgreSQL commits it when it reaches the Sync and answers
only once the COMMIT is durable (its WAL flush, and the synchronous standby's, per
``synchronous_commit``). The whole flush costs one round trip. A fence (or any statement)
that fails aborts the transaction on the server; PostgreSQL skips everything up to the
Sync and rolls back, so nothing of the flush is stored.

The statements go out as one write. psycopg's pipeline sends each statement, and each
row of an ``executemany``, as a socket write of its own (it flushes between commands),
and each of those wakes the server's backend: a transaction of 10 messages cost 16
writes and ~1.3 ms of client CPU. Here the flush is queued in libpq's buffer (psycopg's
``pq`` layer: a statement prepared once per connection, then one Bind/Execute per row,
bytes as binary parameters, the rest as text the server parses by the column's type),
sent with one write and answered with one read: ~0.35 ms, fewer wake-ups of the
backend. A row holding a value of another type (rare: none of the store's operations
makes one) takes psycopg's own pipeline, which adapts anything.

Each Execute costs the server an executor start and end (~20 us here, more than the row's
insert): a flush of 8 producers' transactions, 48 rows, spent 1 ms of its 1.9 ms in them.
So rows go as few statements as their order allows. Runs of plain INSERTs (and upserts)
into *different* tables commute (the schema has no triggers and no foreign keys), so a
flush's consecutive INSERT runs are merged per statement, in first-seen order (a
transaction's row, its entries, the next one's row, its entries: every transaction row,
then every entry); then each run of 2 or more rows goes as multi-row ``VALUES``, in
chunks of a power of two rows (a handful of prepared statements), in order. An upsert
goes multi-row only when its chunk's keys are distinct (PostgreSQL refuses to update
one row twice in a statement; row by row, the later row wins, as before).

A COMMIT whose answer was lost (the connection broke, PostgreSQL restarted) leaves the
flush in doubt: it may have committed. Each flush therefore also writes its *mark*
(``flush_marks``: the scope's epoch and the flush's sequence number) in the same
transaction, and :func:`flush_committed` settles the doubt on a new connection: it locks
the scope's lease row ``FOR UPDATE``, which waits until every transaction still holding it
``FOR SHARE`` (the flush in doubt, if its backend still runs) has ended, then reads the
mark. (A flush its backend has not read yet holds no lock: the store asks only once that
backend has ended; see ``PgStore._settle``.) A flush sent behind another before that
one's answer came (pipelined on the connection: the next flush travels while the
previous commits) first checks that the previous one's mark is there (:data:`_FOLLOWS`)
and rolls back whole if not; so a flush commits only after every flush before it did,
and a mark at or past a flush's number says it committed. Its doubt is settled only
after those before it are.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import pq

from ._errors import LeaseLostError
from ._pg_lease import FENCE_SQL, FENCED_SQLSTATE, as_lease_lost

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
_FOLLOWS = (
    "SELECT txnstream_fence(CASE WHEN EXISTS (SELECT FROM flush_marks"
    " WHERE scope = %s AND epoch = %s AND seq = %s) THEN %s ELSE %s END, %s)"
)
"""A flush's check that the flush it follows committed: the fence on its own scope when
that flush's mark is there, else on a scope no lease has, named after the flush
(:data:`_NOT_AFTER`), which fails the same way a moved epoch does (``TXNF1``, the scope
as its detail), so the check needs no function of its own in the schema."""
_NOT_AFTER = "(flush {seq} of epoch {epoch} did not commit)"
"""The scope :data:`_FOLLOWS` fences when the flush before did not commit (parentheses:
no scope is named so)."""


class PredecessorNotCommitted(Exception):
    """A flush rolled back whole because the flush it follows did not commit: safe to
    apply again (after that one)."""


async def apply_flush(
    conn: psycopg.AsyncConnection[Any],
    claims: Mapping[str, int],
    runs: Iterable[Run],
    seq: int,
    *,
    after: int | None = None,
) -> None:
    """Apply ``runs`` in one transaction on ``conn`` (autocommit), fenced by ``claims``
    (scope -> epoch) and marked with flush number ``seq`` in each scope; returns once
    COMMIT returned.

    ``after``: the number of a flush sent on ``conn`` before this one whose answer has
    not come yet. This one is then sent at once, behind it (pipelined: PostgreSQL runs
    them in order on the connection), and commits only if that one did. The answers
    are read in the order the flushes were sent.

    Raises :class:`~txnstream.ledger.LeaseLostError` when a scope's lease moved
    (nothing stored), :class:`PredecessorNotCommitted` when flush ``after`` did not
    commit (nothing stored), ``psycopg.Error`` for anything else: a statement's error
    (nothing stored) or a connection failure (the outcome unknown: see
    :func:`flush_committed`).
    """
    scopes = sorted(claims.items())
    follows: list[Run] = []
    if after is not None:
        follows = [
            (
                _FOLLOWS,
                [(s, e, after, s, _NOT_AFTER.format(seq=after, epoch=e), e) for s, e in scopes],
            )
        ]
    statements: list[Run] = [
        (FENCE_SQL, scopes),
        *follows,
        *merge_inserts(runs),
        (_MARK, [(s, e, seq) for s, e in scopes]),
    ]
    try:
        try:
            encoded = _encode_runs(statements, conn.info.encoding)
        except _Unsupported:
            await _apply_adapted(conn, statements)
        else:
            await _apply_encoded(conn, encoded)
    except psycopg.Error as exc:
        if exc.sqlstate == FENCED_SQLSTATE and exc.diag.message_detail not in claims:
            raise PredecessorNotCommitted(
                f"flush {seq} rolled back: the flush {after} before it did not commit"
            ) from exc
        lost = as_lease_lost(exc, claims)
        if lost is not None:
            raise lost from exc
        raise


class _Unsupported(Exception):
    """A parameter :func:`_encode_runs` does not encode itself: psycopg adapts it."""


_PLACEHOLDER = re.compile(r"%(s|%)")
_NAMES = itertools.count()
"""Prepared statements' numbers: a name is never given twice (a statement prepared by a
pipeline that failed further on exists, one after the failure does not)."""

Encoded = list[tuple[str, list[tuple[list[bytes | None], list[int]]]]]


def _numbered(sql: str) -> bytes:
    """``sql`` with psycopg's ``%s`` placeholders as PostgreSQL's ``$1, $2, ...``."""
    if "%(" in sql:
        raise _Unsupported("named placeholders")
    count = 0

    def number(match: re.Match[str]) -> str:
        nonlocal count
        if match.group(1) == "%":
            return "%"
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(number, sql).encode()


_INSERT = re.compile(r"INSERT INTO (\w+) \(([^()]*)\) VALUES ")
_CONFLICT = re.compile(r" ON CONFLICT \(([^()]*)\) DO UPDATE SET [^%]*")
_MULTI_ROW_LIMIT = 256  # rows per statement (a power of two; 13 columns: 3,328 parameters)


@dataclass(frozen=True, slots=True)
class _Insert:
    """An ``INSERT ... VALUES (...)`` statement taken apart for multi-row ``VALUES``."""

    table: str
    head: str  # up to and including ``VALUES ``
    values: str  # the parenthesised tuple of one row
    tail: str  # ``""`` or the ``ON CONFLICT (...) DO UPDATE SET ...`` clause
    key: tuple[int, ...] | None  # an upsert's conflict columns' parameter indices


def _closing(sql: str, start: int) -> int:
    """The index of the parenthesis closing the one at ``start``, or -1."""
    depth = 0
    for index in range(start, len(sql)):
        depth += (sql[index] == "(") - (sql[index] == ")")
        if not depth:
            return index
    return -1


def _one_parameter_each(values: str) -> bool:
    """Whether each top-level item of the tuple ``values`` holds exactly one ``%s``
    (then the n-th parameter is the n-th column's)."""
    depth, start = 0, 1
    items: list[str] = []
    for index in range(1, len(values) - 1):
        char = values[index]
        depth += (char == "(") - (char == ")")
        if char == "," and not depth:
            items.append(values[start:index])
            start = index + 1
    items.append(values[start:-1])
    return all(item.count("%s") == 1 for item in items)


@functools.lru_cache(maxsize=256)
def _parse_insert(sql: str) -> _Insert | None:
    """``sql`` taken apart if it is a plain INSERT of one ``VALUES`` tuple, or an upsert
    whose tuple gives each column one parameter; None otherwise (run row by row, never
    moved)."""
    match = _INSERT.match(sql)
    if match is None or "SELECT" in sql.upper():
        return None
    start = match.end()
    if sql[start : start + 1] != "(":
        return None
    end = _closing(sql, start)
    if end < 0:
        return None
    values, tail = sql[start : end + 1], sql[end + 1 :]
    if not tail:
        return _Insert(match.group(1), sql[:start], values, "", None)
    conflict = _CONFLICT.fullmatch(tail)
    columns = [name.strip() for name in match.group(2).split(",")]
    if conflict is None or values.count("%s") != len(columns) or "%%" in values:
        return None
    if not _one_parameter_each(values):
        return None
    keys = [name.strip() for name in conflict.group(1).split(",")]
    if not set(keys) <= set(columns):
        return None
    return _Insert(match.group(1), sql[:start], values, tail, tuple(columns.index(k) for k in keys))


@functools.lru_cache(maxsize=256)
def _multi_row(sql: str, rows: int) -> str:
    """``sql`` (an :func:`_parse_insert`-able statement) for ``rows`` rows at once."""
    insert = _parse_insert(sql)
    assert insert is not None
    return f"{insert.head}{', '.join([insert.values] * rows)}{insert.tail}"


def merge_inserts(runs: Iterable[Run]) -> list[Run]:
    """``runs`` with each stretch of consecutive INSERT runs into distinct tables (one
    statement per table) merged per statement, in first-seen order: they commute (see
    the module docstring). Anything else stays where it is and ends the stretch."""
    out: list[Run] = []
    merged: dict[str, list[Params]] = {}  # the stretch: statement -> its rows, in order
    tables: dict[str, str] = {}  # the stretch's tables -> their statement
    for sql, rows in runs:
        insert = _parse_insert(sql)
        if insert is None or tables.get(insert.table, sql) != sql:
            out.extend(merged.items())
            merged.clear()
            tables.clear()
            if insert is None:
                out.append((sql, rows))
                continue
        tables[insert.table] = sql
        merged.setdefault(sql, []).extend(rows)
    out.extend(merged.items())
    return out


def _chunks(
    sql: str, rows: list[tuple[list[bytes | None], list[int]]]
) -> list[tuple[str, list[tuple[list[bytes | None], list[int]]]]]:
    """Encoded ``rows`` of ``sql`` as multi-row statements when it allows: chunks of
    the largest power of two rows left (at most :data:`_MULTI_ROW_LIMIT`), in order."""
    insert = _parse_insert(sql) if len(rows) > 1 else None
    if insert is None:
        return [(sql, rows)]
    if insert.key is not None:
        key = insert.key
        if len({tuple(values[i] for i in key) for values, _ in rows}) != len(rows):
            return [(sql, rows)]  # a key twice: row by row, the later row wins
    out: list[tuple[str, list[tuple[list[bytes | None], list[int]]]]] = []
    start, left = 0, len(rows)
    while left:
        size = min(_MULTI_ROW_LIMIT, 1 << (left.bit_length() - 1))
        chunk = rows[start : start + size]
        if size == 1:
            out.append((sql, chunk))
        else:
            values = [value for row_values, _ in chunk for value in row_values]
            formats = [fmt for _, row_formats in chunk for fmt in row_formats]
            out.append((_multi_row(sql, size), [(values, formats)]))
        start += size
        left -= size
    return out


def _encode_runs(runs: Iterable[Run], encoding: str) -> Encoded:
    """Each row's parameters as libpq values and formats: bytes binary (a ``bytea``
    travels as is), ints, text and flags as text. Raises :class:`_Unsupported` for a
    value of another type, before anything was sent."""
    encoded: Encoded = []
    for sql, rows in runs:
        out = []
        for row in rows:
            values: list[bytes | None] = []
            formats: list[int] = []
            for value in row:
                kind = type(value)
                if kind is int:
                    values.append(b"%d" % value)
                    formats.append(0)
                elif kind is bytes:
                    values.append(value)
                    formats.append(1)
                elif value is None:
                    values.append(None)
                    formats.append(0)
                elif kind is str:
                    values.append(value.encode(encoding))
                    formats.append(0)
                elif kind is bool:  # as 1/0: both an int and a boolean parameter read it
                    values.append(b"1" if value else b"0")
                    formats.append(0)
                elif kind is bytearray or kind is memoryview:
                    values.append(bytes(value))
                    formats.append(1)
                else:
                    raise _Unsupported(kind.__name__)
            out.append((values, formats))
        if out:
            encoded.extend(_chunks(sql, out))
    return encoded


@dataclass(slots=True)
class _Writer:
    """What a writer connection has: its prepared statements, and the flushes sent on
    it whose answers were not read yet."""

    prepared: dict[str, bytes] = field(default_factory=dict)
    """SQL text -> the name it is prepared under."""
    last: asyncio.Future[None] | None = None
    """Done once the last flush sent has read its answer (or given up)."""
    exclusive: bool = False
    """The last flush is one psycopg's own pipeline sends (nothing may queue behind it)."""
    sent: int = 0
    """Flushes sent in pipeline mode and not answered: pipeline mode ends at 0."""


_WRITERS: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], _Writer] = (
    weakref.WeakKeyDictionary()
)


async def _apply_encoded(conn: psycopg.AsyncConnection[Any], runs: Encoded) -> None:
    """Send ``runs`` in pipeline mode with one Sync (one implicit transaction), as one
    write, at once, behind any flush still waiting for its answer on ``conn``; then,
    once those have read theirs, wait for the Sync's answer. On an error the connection
    is closed unless the server answered the whole pipeline (then it is usable)."""
    order = _WRITERS.setdefault(conn, _Writer())
    while order.exclusive and order.last is not None:
        await order.last  # (psycopg's pipeline is running: queue nothing behind it)
    pgconn = conn.pgconn
    prepared = order.prepared
    new: dict[str, bytes] = {}  # prepared by this pipeline (known once it answered)
    preparing: list[tuple[str, bytes] | None] = []  # what each result answers
    answered = False
    before, mine = order.last, asyncio.get_running_loop().create_future()
    order.last, order.exclusive = mine, False
    order.sent += 1
    try:
        if pgconn.pipeline_status == pq.PipelineStatus.OFF:
            pgconn.enter_pipeline_mode()
        for sql, rows in runs:
            name = prepared.get(sql) or new.get(sql)
            if name is None:
                name = new[sql] = b"txnstream_%d" % next(_NAMES)
                pgconn.send_prepare(name, _numbered(sql))
                preparing.append((sql, name))
            for values, formats in rows:
                pgconn.send_query_prepared(name, values, param_formats=formats)
                preparing.append(None)
        pgconn.pipeline_sync()
        pgconn.flush()  # what the socket takes now; the rest goes in this flush's turn
        if before is not None:
            await before  # the answers come in order: theirs first
        results = await _exchange(pgconn)
        answered = True
    finally:
        order.sent -= 1
        if not answered:  # cancelled or broken mid-way: its state is unknown, not used again
            await conn.close()
        elif not order.sent:
            pgconn.exit_pipeline_mode()
        if not mine.done():
            mine.set_result(None)
        if order.last is mine:
            order.last = None
    error: pq.abc.PGresult | None = None
    for result, prepare in zip(results, preparing, strict=True):
        status = result.status
        if status == pq.ExecStatus.FATAL_ERROR and error is None:
            error = result
        elif prepare is not None and status == pq.ExecStatus.COMMAND_OK:
            prepared[prepare[0]] = prepare[1]
    if error is not None:
        raise psycopg.errors.error_from_result(error, encoding=conn.info.encoding)


_READ, _WRITE = 1, 2


async def _exchange(pgconn: pq.abc.PGconn) -> list[pq.abc.PGresult]:
    """Send libpq's queued pipeline and collect one result per command up to its Sync.

    Reads while it writes (the server stops reading a client that does not read its
    answers), so a flush of any size goes through."""
    fd = pgconn.socket
    while pgconn.flush():
        if await _ready(fd, write=True) & _READ:
            pgconn.consume_input()
    results: list[pq.abc.PGresult] = []
    while True:
        while pgconn.is_busy():
            await _ready(fd, write=False)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:  # the end of one command's results
            continue
        if result.status == pq.ExecStatus.PIPELINE_SYNC:
            return results
        results.append(result)


async def _ready(fd: int, *, write: bool) -> int:
    """Wait until ``fd`` is readable (or, with ``write``, writable); which of them."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()

    def wake(state: int) -> None:
        if not future.done():
            future.set_result(state)

    loop.add_reader(fd, wake, _READ)
    if write:
        loop.add_writer(fd, wake, _WRITE)
    try:
        return await future
    finally:
        loop.remove_reader(fd)
        if write:
            loop.remove_writer(fd)


async def _apply_adapted(conn: psycopg.AsyncConnection[Any], runs: Iterable[Run]) -> None:
    """The same transaction through psycopg's pipeline, which adapts any Python value
    (a statement, and a socket write, at a time), once every flush sent before it has
    its answer; nothing is sent behind it meanwhile."""
    order = _WRITERS.setdefault(conn, _Writer())
    before, mine = order.last, asyncio.get_running_loop().create_future()
    order.last, order.exclusive = mine, True
    try:
        if before is not None:
            await before
        async with conn.pipeline(), conn.transaction(), conn.cursor() as cur:
            for sql, rows in runs:
                if len(rows) == 1:
                    await cur.execute(sql, rows[0])
                elif rows:
                    await cur.executemany(sql, rows)
    finally:
        mine.set_result(None)
        if order.last is mine:
            order.last, order.exclusive = None, False


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
            # A later flush commits only after this one did (``after``): its mark counts.
            committed = committed and mark is not None and mark[0] == epoch and mark[1] >= seq
    return committed
