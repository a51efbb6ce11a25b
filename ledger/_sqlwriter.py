"""The writer's SQL work, shared by the writer thread and the writer process.

This file also runs on its own, as the writer process's program (``python -I
_sqlwriter.py DB SYNCHRONOUS``; see :mod:`txnstream.ledger._writer_process`), so it imports
nothing from this package: only the standard library and msgpack.

The process protocol, over the child's stdin and stdout:

* parent -> child, one frame per flush: a 4-byte little-endian length, then the flush's
  statements in MessagePack (the parent packs them with msgspec; ``[[sql, [row, ...]], ...]``);
* child -> parent, one reply per frame, in order: ``OK`` (applied and committed, fsync
  included), or ``FAILED`` + a 4-byte length + msgpack ``[exception type name, message,
  errno or None]`` (rolled back: nothing of that flush is stored). One ``OK`` first says
  the connection is open and set up (or ``FAILED`` says why not, and the child exits).
"""

from __future__ import annotations

import functools
import os
import select
import signal
import sqlite3
import struct
import sys
from collections.abc import Sequence
from typing import Any

import msgpack

Params = Sequence[Any]
Statements = list[tuple[str, list[Params]]]
"""A flush: ``(sql, rows)`` pairs in order (a row is a statement's parameters)."""

OK = b"\x00"
FAILED = b"\x01"
HEADER = struct.Struct("<I")


def writer_pragmas(synchronous: str) -> list[str]:
    """The write connection's settings (per connection, except the journal mode)."""
    return [
        "PRAGMA journal_mode=WAL",
        f"PRAGMA synchronous={synchronous}",
        "PRAGMA cache_size=-8192",  # appends touch only tails
        "PRAGMA busy_timeout=5000",
    ]


# Each statement a writer thread runs releases the GIL around sqlite3_step and must
# take it back, and ``executemany`` does so per row. While the event loop is busy, taking
# it back waits for the loop's switch interval (5 ms by default): 100 rows through
# executemany took 260 ms beside a busy thread, 13 ms as one multi-row INSERT (measured
# here). So runs of rows for a plain ``INSERT ... VALUES (?, ...)`` go as multi-row
# INSERTs: chunks of a power of two rows (a handful of statement texts for SQLite's
# statement cache), in order, so a later row still wins over an earlier one.
_MULTI_ROW_LIMIT = 256  # rows per statement (6 columns: far below SQLite's 32,766 variables)


@functools.lru_cache(maxsize=64)
def _multi_row_sql(sql: str, rows: int) -> str | None:
    """``sql`` for ``rows`` rows at once, or None if it is not a plain INSERT ... VALUES."""
    head, sep, values = sql.rpartition(" VALUES ")
    if not sep or not head.startswith("INSERT") or not values.startswith("(?"):
        return None
    if not values.endswith(")") or ")" in values[:-1]:
        return None  # (a clause after the VALUES tuple, e.g. an upsert's ON CONFLICT)
    return f"{head} VALUES {', '.join([values] * rows)}"


def _run_rows(conn: sqlite3.Connection, sql: str, rows: list[Params]) -> None:
    if len(rows) == 1:
        conn.execute(sql, rows[0])
        return
    if _multi_row_sql(sql, 2) is None:
        conn.executemany(sql, rows)
        return
    start, left = 0, len(rows)
    while left:
        size = min(_MULTI_ROW_LIMIT, 1 << (left.bit_length() - 1))  # largest power of 2
        chunk = rows[start : start + size]
        multi = _multi_row_sql(sql, size) if size > 1 else sql
        assert multi is not None
        conn.execute(multi, [value for row in chunk for value in row])
        start += size
        left -= size


def apply_flush(conn: sqlite3.Connection, statements: Statements) -> None:
    """One flush: its statements in one SQLite transaction (in the writer thread or the
    writer process)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, rows in statements:
            _run_rows(conn, sql, rows)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


# -- the writer process's program ------------------------------------------------------

_IDLE_CHECK = 1.0  # seconds between checks that the parent still lives, while idle


def _read_exact(size: int, parent: int) -> bytes | None:
    """``size`` bytes of stdin, or None at end of file or once the parent has gone (a
    forked grandchild may hold the pipe's write end open after the parent's death)."""
    parts: list[bytes] = []
    while size:
        ready, _, _ = select.select([0], [], [], _IDLE_CHECK)
        if not ready:
            if os.getppid() != parent:
                return None
            continue
        data = os.read(0, min(size, 1 << 20))
        if not data:
            return None
        parts.append(data)
        size -= len(data)
    return b"".join(parts)


def _write(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _failed(exc: BaseException) -> bytes:
    body: bytes = msgpack.packb([type(exc).__name__, str(exc), getattr(exc, "errno", None)])
    return FAILED + HEADER.pack(len(body)) + body


def main(argv: list[str]) -> int:
    """Apply flushes from stdin until end of file; reply to each on stdout."""
    db, synchronous = argv
    # The owner decides when this process stops (by closing its stdin): a Ctrl-C to the
    # terminal's process group, or a service manager's SIGTERM to the whole group, must
    # not end it under the owner's graceful shutdown, which still flushes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    parent = os.getppid()
    try:
        conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
        for pragma in writer_pragmas(synchronous):
            conn.execute(pragma)
    except Exception as exc:  # noqa: BLE001 - reported to the owner
        _write(_failed(exc))
        return 1
    _write(OK)
    while (head := _read_exact(HEADER.size, parent)) is not None:
        body = _read_exact(HEADER.unpack(head)[0], parent)
        if body is None:
            break  # the owner died while sending: nothing of that flush was applied
        try:
            apply_flush(conn, msgpack.unpackb(body))
        except Exception as exc:  # noqa: BLE001 - reported to the owner
            _write(_failed(exc))
        else:
            _write(OK)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
