"""A flush applies runs of rows as multi-row INSERTs: the table must end up exactly as
row-by-row ``executemany`` leaves it, whatever the run length, duplicates included."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txnstream.ledger._sqlwriter import _multi_row_sql, _run_rows

pytestmark = pytest.mark.timeout(120)

SCHEMA = "CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB, n INTEGER)"
STATEMENTS = [
    "INSERT OR REPLACE INTO t (k, v, n) VALUES (?, ?, ?)",
    "INSERT OR REPLACE INTO t (k, v, n) VALUES (?, ?, 7)",
    "INSERT INTO t (k, v, n) VALUES (?, ?, ?) ON CONFLICT (k) DO UPDATE SET n = n + 1",
    "UPDATE t SET v = ?, n = ? WHERE k = ?",
]


def table(rows_by_statement: list[tuple[str, list[tuple[object, ...]]]], multi: bool) -> list:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(SCHEMA)
    for sql, rows in rows_by_statement:
        if multi:
            _run_rows(conn, sql, rows)
        else:
            conn.executemany(sql, rows)
    return conn.execute("SELECT k, v, n FROM t ORDER BY k").fetchall()


def params(sql: str) -> st.SearchStrategy[tuple[object, ...]]:
    keys = st.integers(0, 40)
    blobs = st.binary(max_size=4)
    if sql.startswith("UPDATE"):
        return st.tuples(blobs, st.integers(-(2**63), 2**63 - 1), keys)
    if "7)" in sql:
        return st.tuples(keys, blobs)
    return st.tuples(keys, blobs, st.integers(-5, 5))


def long_run(sql: str, n: int) -> list[tuple[object, ...]]:
    """``n`` rows (more than one multi-row chunk), keys repeating every 300."""
    if sql.startswith("UPDATE"):
        return [(bytes([i % 256]), i, i % 300) for i in range(n)]
    if "7)" in sql:
        return [(i % 300, bytes([i % 256])) for i in range(n)]
    return [(i % 300, bytes([i % 256]), i) for i in range(n)]


runs = st.sampled_from(STATEMENTS).flatmap(
    lambda sql: st.tuples(
        st.just(sql),
        st.lists(params(sql), min_size=1, max_size=40)
        | st.integers(257, 700).map(lambda n: long_run(sql, n)),
    )
)


@settings(max_examples=150)
@given(st.lists(runs, min_size=1, max_size=4))
def test_multi_row_inserts_leave_the_table_as_row_by_row_does(
    rows_by_statement: list[tuple[str, list[tuple[object, ...]]]],
) -> None:
    assert table(rows_by_statement, multi=True) == table(rows_by_statement, multi=False)


def test_only_plain_inserts_become_multi_row() -> None:
    assert _multi_row_sql(STATEMENTS[0], 2) == (
        "INSERT OR REPLACE INTO t (k, v, n) VALUES (?, ?, ?), (?, ?, ?)"
    )
    assert _multi_row_sql(STATEMENTS[1], 3) is not None
    assert _multi_row_sql(STATEMENTS[2], 2) is None  # ON CONFLICT after the tuple
    assert _multi_row_sql(STATEMENTS[3], 2) is None
