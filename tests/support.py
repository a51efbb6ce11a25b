"""The one support module of the tests: bounded waits, free ports, live servers, draining."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
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


@contextmanager
def running_server(data: Path) -> Iterator[str]:
    """A ``txnstream serve`` server over ``data`` on a free loopback port; yields its URL.

    Made by ``api.cli.make_server`` (the lifespan of ``serve``) and run in a background
    thread with its own event loop; stopped (and the engine closed) on exit.
    """
    from api.cli import make_server

    port = free_port()
    server = make_server(data, "127.0.0.1", port, log_level="warning")
    thread = threading.Thread(target=server.run, name="live-server", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), 30, "the live server to start")
    assert server.started, "the live server failed to start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=40)
        assert not thread.is_alive(), "the live server did not stop"


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
