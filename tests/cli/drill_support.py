"""Helpers for the drill tests: a small data directory made with the embedded engine."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from typer.testing import CliRunner, Result

from txnstream.api import Engine, EngineConfig, OutgoingMessage
from txnstream.api.cli import app
from txnstream.ledger import DB_FILE

REPO = Path(__file__).resolve().parents[2]
QUIET = EngineConfig(ledger_max_entries=10, snapshot_interval=3600.0)


async def _history(path: Path) -> None:
    """Two topics: commits, aborts, plain and idempotent sends, snapshots, a tail, one open txn."""
    async with Engine.open(path, QUIET) as engine:
        for topic in ("a", "b"):
            await engine.create_topic(topic)
        for i in range(24):
            txn = await engine.begin()
            await txn.send("a", i)
            if i % 2:
                await txn.send("b", i)
            await engine.send_many("a", [f"plain-{i}"])
            await (txn.commit() if i % 3 == 0 else txn.abort())
        batch = [OutgoingMessage("x"), OutgoingMessage("y")]
        await engine.produce("b", batch, producer="p", sequence=0)
        await engine.take_snapshot("a")
        await engine.take_snapshot("b")
        await engine.send("a", "between")
        await engine.take_snapshot("a")
        for i in range(3):  # the tail after the newest snapshot
            txn = await engine.begin()
            await txn.send("a", f"tail-{i}")
            await txn.abort()
        still_open = await engine.begin(timeout=600)
        await still_open.send("a", "open")
        await still_open.send("b", "open")
        await engine.send("a", "after-open")


def make_data(path: Path) -> Path:
    """Fill ``path`` (a new data directory) and return it."""
    asyncio.run(_history(path))
    return path


def sql(path: Path, statement: str, params: tuple[object, ...] = ()) -> int:
    """Run one statement on the data directory's database; returns rows changed."""
    with sqlite3.connect(path / DB_FILE) as conn:
        return conn.execute(statement, params).rowcount


def rows(path: Path, statement: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Rows of one query on the data directory's database."""
    with sqlite3.connect(path / DB_FILE) as conn:
        return list(conn.execute(statement, params))


def drill(*args: str) -> Result:
    """``txnstream drill ARGS`` in process."""
    return CliRunner().invoke(app, ["drill", *args])
