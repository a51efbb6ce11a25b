"""A client given several servers follows the active one, and its token goes nowhere else.

The active is a real txnstream server (``server_url``). The other servers are small real
HTTP servers on loopback that answer as a standby does (307 to a given URL, or 503 with
``txnstream-role: standby``) and record what reached them, headers included.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from support import free_port

from txnstream.api import TxnStreamHttpError, TxnStreamTransportError
from txnstream.api.client import AsyncClient, Client, wire_message

pytestmark = pytest.mark.timeout(60)


@dataclass
class Standby:
    """A loopback HTTP server answering like a standby; ``seen`` records each request."""

    url: str
    redirect_to: str | None = None
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)


@pytest.fixture
def standby() -> Iterator[Standby]:
    port = free_port()
    box = Standby(url=f"http://127.0.0.1:{port}")

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            box.seen.append((self.command, self.path, self.headers.get("authorization")))
            if box.redirect_to is not None:
                self.send_response(307)
                self.send_header("location", box.redirect_to + self.path)
                body = b""
            else:
                self.send_response(503)
                body = b'{"error": {"code": "unavailable", "message": "no active server"}}'
                self.send_header("content-type", "application/json")
            self.send_header("txnstream-role", "standby")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield box
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_a_refused_server_is_skipped_and_the_answering_one_kept(server_url: str, name: str) -> None:
    with Client(f"{_closed_url()},{server_url}") as client:
        assert client.create_topic(name) is True
        assert client.url == server_url
        assert name in client.list_topics()


def test_a_307_is_followed_to_a_given_server_once(
    server_url: str, standby: Standby, name: str
) -> None:
    standby.redirect_to = server_url
    with Client([standby.url, server_url], token="secret-token") as client:
        client.create_topic(name)
        produced = client.produce(name, [wire_message({"n": 1})])
        assert len(produced["positions"]) == 1
        assert client.url == server_url  # later requests go straight to the active
        client.stats(name)
    # the standby saw the first request and the produce was applied once, by the active
    assert standby.seen[0] == ("PUT", f"/v1/topics/{name}", "Bearer secret-token")
    assert len(standby.seen) == 1
    with Client(server_url) as client:
        assert client.stats(name)["entries"] == 1


def test_the_token_never_goes_to_a_location_it_was_not_given_for(
    server_url: str, standby: Standby, name: str
) -> None:
    # the standby sends clients to a server nobody gave the client: a recorder
    stranger = _RecordingServer()
    with stranger:
        standby.redirect_to = stranger.url
        started = time.monotonic()
        with (
            Client(standby.url, token="secret-token", failover_timeout=1.0) as client,
            pytest.raises(TxnStreamHttpError, match="not one of the servers given"),
        ):
            client.create_topic(name)
        assert time.monotonic() - started < 10
        assert stranger.seen == []
        # without a token there is nothing to leak: the redirect is followed
        with Client(standby.url, failover_timeout=1.0) as client:
            client.health()
        assert [(m, p) for m, p, _ in stranger.seen] == [("GET", "/v1/health")]


def test_a_standby_without_an_active_sends_the_client_on(
    server_url: str, standby: Standby, name: str
) -> None:
    with Client(f"{standby.url},{server_url}") as client:
        assert client.create_topic(name) is True
    assert [(m, p) for m, p, _ in standby.seen] == [("PUT", f"/v1/topics/{name}")]


def test_only_standbys_is_unavailable_after_the_failover_timeout(standby: Standby) -> None:
    started = time.monotonic()
    with (
        Client([standby.url, _closed_url()], failover_timeout=0.5) as client,
        pytest.raises(TxnStreamHttpError) as raised,
    ):
        client.list_topics()
    assert raised.value.code == "unavailable"
    assert 0.4 < time.monotonic() - started < 10
    assert len(standby.seen) >= 2  # it went round the list more than once, backing off


def test_one_server_answers_as_before(standby: Standby) -> None:
    with Client(standby.url) as client, pytest.raises(TxnStreamHttpError) as raised:
        client.list_topics()
    assert (raised.value.status, raised.value.code) == (503, "unavailable")
    assert len(standby.seen) == 1
    with Client(_closed_url()) as client, pytest.raises(TxnStreamTransportError):
        client.list_topics()


async def test_the_async_client_follows_the_same_way(
    server_url: str, standby: Standby, name: str
) -> None:
    standby.redirect_to = server_url
    async with AsyncClient(f"{_closed_url()},{standby.url},{server_url}") as client:
        assert await client.create_topic(name) is True
        assert client.url == server_url


@pytest.mark.parametrize("bad", ["", " , ", "ftp://x", "localhost:8080"])
def test_bad_server_lists_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="server URL"):
        Client(bad)


class _RecordingServer:
    """A loopback HTTP server that answers 200 ``{}`` and records each request."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append((self.command, self.path, self.headers.get("authorization")))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> _RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
