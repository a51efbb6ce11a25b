"""Slow and greedy clients against a real ``txnstream serve`` over real sockets (issue 30,
item 8): a head that is not complete within ``--header-timeout`` gets 408 and is closed,
a body that arrives slower than the minimum rate is cut off with 408, and past
``--max-inflight-body-bytes`` a request with a body gets 503 before it is read, while
everyone else is served."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from support import ServeSubprocess, wait_for

HEADER_TIMEOUT = 2.0
MAX_REQUEST = 1024 * 1024
INFLIGHT = 2 * MAX_REQUEST


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeSubprocess]:
    root = tmp_path_factory.mktemp("slow")
    args = (
        *("--header-timeout", str(HEADER_TIMEOUT)),
        *("--max-request-bytes", str(MAX_REQUEST)),
        *("--max-inflight-body-bytes", str(INFLIGHT)),
    )
    with ServeSubprocess(root / "data", root / "server.log", *args) as s:
        yield s


def _connect(server: ServeSubprocess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=15)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """The status, headers and body of the next answer on ``sock`` (bounded by its timeout)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _poll(sock: socket.socket, *, drop: bool) -> bool:
    """True once the server has answered on ``sock`` or closed it; never blocks.
    ``drop``: read and drop what it sent (True then means closed), else leave it."""
    sock.setblocking(False)
    try:
        if drop:
            while sock.recv(65536):
                pass
        else:
            sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)
    return True


def _closed(sock: socket.socket) -> bool:
    return _poll(sock, drop=True)


def _answered(sock: socket.socket) -> bool:
    return _poll(sock, drop=False)


def _produce_head(server: ServeSubprocess, topic: str, length: int) -> bytes:
    return (
        f"POST /v1/topics/{topic}/messages HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"content-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    ).encode()


def _produce_body(size: int) -> bytes:
    """A produce body of exactly ``size`` bytes (one message)."""
    shell = json.dumps({"messages": [{"value": ""}]}).encode()
    return json.dumps({"messages": [{"value": "x" * (size - len(shell))}]}).encode()


def _topic(server: ServeSubprocess, name: str) -> None:
    assert httpx.put(f"{server.url}/v1/topics/{name}", timeout=10).status_code == 201


def _stored(server: ServeSubprocess, name: str) -> int:
    stats = httpx.get(f"{server.url}/v1/topics/{name}/stats", timeout=10).json()
    return int(stats["entries"])


@pytest.mark.timeout(60)
def test_half_sent_heads_are_closed_after_the_header_timeout(server: ServeSubprocess) -> None:
    with contextlib.ExitStack() as stack:
        crowd = [stack.enter_context(_connect(server)) for _ in range(30)]
        started = time.monotonic()
        for sock in crowd:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        # a client that sends its whole head is served meanwhile
        assert httpx.get(f"{server.url}/v1/health", timeout=5).status_code == 200
        status, headers, body = _answer(crowd[0])
        waited = time.monotonic() - started
        assert status == 408
        assert headers["connection"] == "close"
        assert json.loads(body)["error"]["code"] == "invalid_request"
        assert HEADER_TIMEOUT - 0.5 <= waited < HEADER_TIMEOUT + 5
        wait_for(lambda: all(_closed(s) for s in crowd), 10, "every half-sent head to close")
    # a head that trickles in byte by byte gets no more time than one sent at once
    with _connect(server) as sock:
        started = time.monotonic()
        head = f"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        for byte in head.encode():
            if _answered(sock):
                break
            sock.sendall(bytes([byte]))
            time.sleep(0.05)
        assert _answer(sock)[0] == 408
        assert time.monotonic() - started < HEADER_TIMEOUT + 5


@pytest.mark.timeout(60)
def test_keep_alive_requests_each_get_the_full_header_timeout(server: ServeSubprocess) -> None:
    """The deadline is per head, from its first byte: a connection that is slow to start
    its next request (idle, not mid-head) is not cut off by it."""
    with _connect(server) as sock:
        request = f"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()
        for _ in range(2):
            sock.sendall(request)
            assert _answer(sock)[0] == 200
            time.sleep(HEADER_TIMEOUT * 0.75)  # idle between requests: keep-alive's business
        sock.sendall(request)
        assert _answer(sock)[0] == 200


@pytest.mark.timeout(60)
def test_a_trickled_body_is_cut_off_and_nothing_is_stored(
    server: ServeSubprocess, name: str
) -> None:
    _topic(server, name)
    body = _produce_body(100_000)
    with _connect(server) as sock:
        started = time.monotonic()
        sock.sendall(_produce_head(server, name, len(body)))
        for offset in range(0, len(body), 10):  # 50 bytes/s
            if _answered(sock):
                break
            sock.sendall(body[offset : offset + 10])
            time.sleep(0.2)
        status, headers, answer = _answer(sock)
        assert status == 408
        assert "bytes/s" in json.loads(answer)["error"]["message"]
        assert headers["connection"] == "close"
        assert time.monotonic() - started < HEADER_TIMEOUT + 5
    assert _stored(server, name) == 0


@pytest.mark.timeout(60)
def test_a_body_at_a_fair_rate_is_not_cut_off(server: ServeSubprocess, name: str) -> None:
    """300 KiB at ~150 KiB/s takes longer than the grace, but keeps ahead of the rule."""
    _topic(server, name)
    body = _produce_body(300 * 1024)
    with _connect(server) as sock:
        sock.sendall(_produce_head(server, name, len(body)))
        step = len(body) // 8
        for offset in range(0, len(body), step):
            sock.sendall(body[offset : offset + step])
            time.sleep(0.25)
        assert _answer(sock)[0] == 200
    assert _stored(server, name) == 1


@pytest.mark.timeout(60)
def test_bodies_in_flight_are_bounded_before_reading(server: ServeSubprocess, name: str) -> None:
    _topic(server, name)
    big = _produce_body(MAX_REQUEST)
    with contextlib.ExitStack() as stack:
        holders = [stack.enter_context(_connect(server)) for _ in range(2)]
        for sock in holders:  # two bodies of the largest size, begun and held
            sock.sendall(_produce_head(server, name, len(big)) + big[:1000])

        def refused() -> bool:
            with _connect(server) as probe:
                probe.sendall(_produce_head(server, name, len(big)) + big)
                status, headers, body = _answer(probe)
                if status != 503:
                    return False
                assert headers["connection"] == "close"
                assert headers["retry-after"] == "1"
                assert json.loads(body)["error"]["code"] == "unavailable"
                return True

        wait_for(refused, 10, "a third body past --max-inflight-body-bytes to be refused")
        stored_before = _stored(server, name)
        # requests without a body, or with an empty one, are still served
        assert httpx.get(f"{server.url}/v1/health", timeout=5).status_code == 200
        txn = httpx.post(f"{server.url}/v1/transactions", timeout=5)
        assert txn.status_code in (200, 201)
        small = httpx.post(
            f"{server.url}/v1/topics/{name}/messages", json={"messages": [{"value": 1}]}, timeout=5
        )
        assert small.status_code == 503  # a body, and no room for it
        for sock in holders:  # the held bodies finish: their requests succeed
            sock.sendall(big[1000:])
            assert _answer(sock)[0] == 200
    assert stored_before == 0
    assert httpx.post(
        f"{server.url}/v1/topics/{name}/messages", json={"messages": [{"value": 1}]}, timeout=5
    ).is_success


def test_the_flags_are_in_serve_help() -> None:
    from typer.testing import CliRunner

    from txnstream.api.cli import app

    text = " ".join(CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).output.split())
    assert "--header-timeout" in text
    assert "TXNSTREAM_HEADER_TIMEOUT" in text
    assert "default: 10.0" in text
    assert "--max-inflight-body-bytes" in text
    assert "TXNSTREAM_MAX_INFLIGHT_BODY_BYTES" in text
    assert "default: 268435456" in text


@pytest.mark.timeout(60)
def test_an_endless_head_is_cut_off_at_its_size_bound(server: ServeSubprocess) -> None:
    """Headers pile up in memory until the head ends: past 64 KiB, 431 and closed."""
    with _connect(server) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        for i in range(200):  # 200 x 1 KiB, well within the header timeout
            if _answered(sock):
                break
            sock.sendall(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000))
        status, headers, _ = _answer(sock)
        assert status == 431
        assert headers["connection"] == "close"
