"""Connection bounds of a real ``txnstream serve`` (issue 10): a crowd of idle sockets
past ``--limit-concurrency`` is refused at the door while the clients already connected
keep being served, and sockets that never send a request are closed after
``--timeout-keep-alive``."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import ServeSubprocess, wait_for

LIMIT = 20
IDLE_SECONDS = 5


@pytest.fixture
def bounded(tmp_path: Path) -> Iterator[ServeSubprocess]:
    args = ("--limit-concurrency", str(LIMIT), "--timeout-keep-alive", str(IDLE_SECONDS))
    with ServeSubprocess(tmp_path / "data", tmp_path / "server.log", *args) as server:
        yield server


def _status_or_refused(url: str) -> int:
    """A new client's answer: the status, or 0 when the connection was refused/reset."""
    try:
        return httpx.get(f"{url}/v1/health", timeout=5).status_code
    except httpx.TransportError:
        return 0


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed ``sock`` (after a 503 or not); never blocks."""
    sock.setblocking(False)
    try:
        while chunk := sock.recv(4096):  # a refused one first gets its 503
            del chunk
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


@pytest.mark.timeout(60)
def test_idle_crowd_is_refused_while_connected_clients_are_served(
    bounded: ServeSubprocess,
) -> None:
    with httpx.Client(base_url=bounded.url, timeout=10) as client, contextlib.ExitStack() as stack:
        assert client.get("/v1/health").status_code == 200  # connected before the crowd
        idle = [
            stack.enter_context(socket.create_connection(("127.0.0.1", bounded.port)))
            for _ in range(3 * LIMIT)
        ]
        # the crowd sent nothing: the ones past the bound were answered 503 and closed
        refused = wait_for(
            lambda: (n := sum(_closed_by_server(s) for s in idle)) >= 2 * LIMIT and n,
            10,
            "the connections past the bound to be refused",
        )
        assert refused >= 2 * LIMIT
        # the client connected before keeps being served, a new one is turned away
        for _ in range(5):
            assert client.post(
                "/v1/topics/t/messages", json={"messages": [{"value": 1}]}
            ).status_code in (200, 404)
            assert client.get("/v1/health").status_code == 200
        assert _status_or_refused(bounded.url) in (0, 503)
        # the idle ones are closed after --timeout-keep-alive, and new clients get in
        wait_for(lambda: all(_closed_by_server(s) for s in idle), 15, "idle sockets to close")
        wait_for(lambda: _status_or_refused(bounded.url) == 200, 10, "a new client to get in")
        assert client.get("/v1/health").status_code == 200
    log = bounded.log()
    assert "refused" in log
    assert "--limit-concurrency" in log


def test_a_limit_beyond_the_file_limit_is_lowered_with_a_warning(tmp_path: Path) -> None:
    """Past what the open-file limit allows, serve lowers the bound and says so (rather
    than failing later, at accept time, with EMFILE)."""
    args = ("--limit-concurrency", str(10**9))
    with ServeSubprocess(tmp_path / "data", tmp_path / "server.log", *args) as server:
        assert httpx.get(f"{server.url}/v1/health", timeout=10).status_code == 200
        log = server.log()
    assert "needs more open files than this process may have" in log
    assert "serving at most" in log
