"""The one support module of the tests: bounded waits, free ports, draining subscriptions."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from api import Engine, Message, Position, SubscriptionHandle


async def wait_until(
    condition: Callable[[], Awaitable[bool]],
    timeout: float,
    what: str,
    interval: float = 0.01,
) -> float:
    """Await ``condition()`` until true; fail after ``timeout`` s. Returns the time taken."""
    started = time.monotonic()
    deadline = started + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
    return time.monotonic() - started


def wait_for(
    condition: Callable[[], Any], timeout: float, what: str, interval: float = 0.02
) -> Any:
    """Poll ``condition()`` (synchronous) until truthy; fail after ``timeout`` s. Returns it."""
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
    return result


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def drain(sub: SubscriptionHandle, idle: float = 0.2, limit: float = 10.0) -> list[Message]:
    """Receive until a receive of ``idle`` seconds returns nothing (bounded by ``limit``)."""
    out: list[Message] = []
    deadline = time.monotonic() + limit
    while True:
        got = await sub.receive(max=1000, timeout=idle)
        if not got:
            return out
        out.extend(got)
        if time.monotonic() > deadline:
            raise AssertionError(f"subscription kept delivering for {limit}s")


def values(messages: list[Message]) -> list[Any]:
    return [m.value for m in messages]


def positions(messages: list[Message]) -> list[Position]:
    return [m.position for m in messages]


async def txn_state(engine: Engine, txn_id: str) -> str:
    return (await engine.get_transaction(txn_id)).state


async def make_topics(engine: Engine, *names: str) -> None:
    for name in names:
        assert await engine.create_topic(name) is True


async def eventually(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> float:
    """:func:`wait_until` for a plain (synchronous) condition."""

    async def check() -> bool:
        return condition()

    return await wait_until(check, timeout, what)


@contextmanager
def write_lock(db: Path) -> Iterator[sqlite3.Connection]:
    """Hold SQLite's write lock on ``db`` from a second connection until the block ends.

    The store's writer stalls meanwhile (and reports "database is locked" once its busy
    timeout passes), which freezes a flush mid-flight without touching the store.
    """
    with closing(sqlite3.connect(db, isolation_level=None)) as conn:
        conn.execute("BEGIN EXCLUSIVE")
        try:
            yield conn
        finally:
            conn.execute("ROLLBACK")
