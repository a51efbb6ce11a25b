"""The storage seam: no layer above ``ledger/`` speaks SQL or talks to a database driver.

The layers say what they store through typed operations (``WriteBatch.put_cursor``,
``Store.txn_rows``, ...); the statements of each store live in ``ledger/`` only, so a
second store (PostgreSQL) is a sibling implementation there, not an edit of the layers.
Every module of txn_buffer/, dispatcher/, snapshots/ and api/ is parsed: a string
constant (f-string parts included) that starts like an SQL statement, or an import of a
database driver, fails this test and says where.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import txnstream

pytestmark = pytest.mark.timeout(60)

ABOVE_THE_LEDGER = ("txn_buffer", "dispatcher", "snapshots", "api")
DRIVERS = {"sqlite3", "aiosqlite", "psycopg", "psycopg2", "psycopg_pool", "asyncpg"}
SQL = re.compile(
    r"""^\s*(
        SELECT\s+\S
      | INSERT\s+(OR\s+\w+\s+)?INTO\b
      | REPLACE\s+INTO\b
      | UPDATE\s+\w+\s+SET\b
      | DELETE\s+FROM\b
      | (CREATE|DROP|ALTER)\s+(TABLE|INDEX|UNIQUE|VIEW|TRIGGER)\b
      | PRAGMA\s+\w
      | WITH\s+(RECURSIVE\s+)?\w+(\s*\([^)]*\))?\s+AS\b
      | (BEGIN|COMMIT|ROLLBACK)(\s+(IMMEDIATE|EXCLUSIVE|DEFERRED|TRANSACTION))?\s*;?\s*$
    )""",
    re.VERBOSE,
)


def _modules() -> list[Path]:
    root = Path(txnstream.__file__).parent
    found = sorted(
        path for layer in ABOVE_THE_LEDGER for path in (root / layer).resolve().rglob("*.py")
    )
    assert len(found) > 50, found  # the layers are where this test looks
    return found


def violations(path: Path) -> list[str]:
    """What ``path`` holds that belongs below the storage seam, as ``file:line: why``."""
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if SQL.match(node.value):
                out.append(f"{where}: SQL string {node.value[:60]!r}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in DRIVERS:
                    out.append(f"{where}: imports the database driver {alias.name}")
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] in DRIVERS
        ):
            out.append(f"{where}: imports from the database driver {node.module}")
    return out


def test_no_sql_and_no_driver_above_the_ledger() -> None:
    found = [line for path in _modules() for line in violations(path)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        'Q = "SELECT seq FROM txns WHERE state = ?"',
        'Q = "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)"',
        'Q = "UPDATE subscriptions SET cursor = ? WHERE name = ?"',
        'Q = f"DELETE FROM {table} WHERE topic_id = ?"',
        'Q = "  PRAGMA user_version"',
        'Q = "CREATE TABLE t (k INTEGER)"',
        'Q = "BEGIN IMMEDIATE"',
        "import sqlite3",
        "import aiosqlite as db",
        "from psycopg import AsyncConnection",
        "from asyncpg.pool import Pool",
    ],
)
def test_the_check_catches(source: str, tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(source + "\n")
    assert violations(module)


@pytest.mark.parametrize(
    "source",
    [
        'METHODS = ("GET", "PUT", "DELETE")',  # HTTP verbs are not SQL
        'HELP = "Select the messages to delete from the topic"',
        'X = "UPDATE the cursor"',
        "from txnstream.ledger import Store",
    ],
)
def test_the_check_lets_pass(source: str, tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(source + "\n")
    assert not violations(module)
