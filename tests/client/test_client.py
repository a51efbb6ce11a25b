"""``txnstream.api.client`` against a real server: every method round-trips, every error maps.

One scenario runs with the blocking and the asyncio client alike: ``run`` awaits what
the async client returns and passes the sync client's results through.
"""

from __future__ import annotations

import pickle
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import ServeSubprocess, free_port, self_signed_cert

from txnstream.api import (
    EngineError,
    Position,
    TxnStreamHttpError,
    TxnStreamTransportError,
)
from txnstream.api.client import AsyncClient, Client, message_value, wire_message
from txnstream.api.client._calls import answer, health

Run = Callable[[Any], Awaitable[Any]]


async def _passed(value: Any) -> Any:
    return value


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


async def _scenario(c: Any, run: Run, name: str) -> None:
    topic = f"{name}-a"
    assert await run(c.health()) == {"status": "ok"}
    assert await run(c.create_topic(topic)) is True
    assert await run(c.create_topic(topic)) is False
    assert topic in await run(c.list_topics())
    assert await run(c.create_topic(f"{name}-p", partitions=2)) is True
    assert (await run(c.stats(f"{name}-p")))["partition_count"] == 2

    sent = [wire_message({"n": 1}, key="k", properties={"p": "v"}), wire_message(b"\x00\x01")]
    produced = await run(c.produce(topic, sent))
    assert len(produced["positions"]) == 2
    assert produced["duplicate"] is False
    once = await run(c.produce(topic, [wire_message("x")], producer="p", sequence=0))
    again = await run(c.produce(topic, [wire_message("x")], producer="p", sequence=0))
    assert (once["duplicate"], again["duplicate"]) == (False, True)
    assert again["positions"] == once["positions"]

    began = await run(c.begin(timeout_ms=60_000, label=f"{name}:1"))
    txn = began["txn"]
    assert (began["state"], began["timeout_ms"]) == ("open", 60_000)
    await run(c.produce(topic, [wire_message("in-txn")], txn=txn))
    shown = await run(c.get_transaction(txn))
    assert (shown["state"], shown["label"], shown["topics"]) == ("open", f"{name}:1", [topic])
    listed = await run(c.list_transactions(state="open", label_prefix=f"{name}:"))
    assert [t["txn"] for t in listed] == [txn]
    assert (await run(c.commit(txn)))["state"] == "committed"
    other = (await run(c.begin()))["txn"]
    assert (await run(c.abort(other)))["state"] == "aborted"
    t3, t4 = (await run(c.begin()))["txn"], (await run(c.begin()))["txn"]
    finished = await run(c.finish(commit=[t3], abort=[t4], idempotence_key=f"{name}-k"))
    assert finished == {"committed": [t3], "aborted": [t4], "duplicate": False}

    settings = {"type": "exclusive", "initial_position": "earliest", "isolation": "read_committed"}
    assert await run(c.create_subscription(topic, "s", **settings)) is True
    assert await run(c.create_subscription(topic, "s", **settings)) is False
    got = await run(c.receive(topic, "s", consumer="c1", max=100, wait_ms=1000))
    assert [message_value(m) for m in got] == [{"n": 1}, b"\x00\x01", "x", "in-txn"]
    assert (got[0]["key"], got[0]["properties"]) == ("k", {"p": "v"})
    first = got[0]["position"]
    assert await run(c.nack(topic, "s", [first])) == {"nacked": 1}
    redelivered = await run(c.receive(topic, "s", consumer="c1", wait_ms=1000))
    assert [(m["position"], m["redelivery_count"]) for m in redelivered] == [(first, 1)]
    assert await run(c.ack(topic, "s", [first])) == {"acked": 1}
    last = got[-1]["position"]
    assert await run(c.ack(topic, "s", [Position.parse(last)], cumulative=True)) == {"acked": 1}
    assert await run(c.receive(topic, "s", consumer="c1")) == []
    stats = await run(c.stats(topic))
    assert (stats["topic"], stats["subscriptions"]["s"]["backlog"]) == (topic, 0)
    await run(c.seek(topic, "s", "earliest"))
    assert len(await run(c.receive(topic, "s", consumer="c1", max=10))) == 4
    await run(c.seek(topic, "s", Position.parse(last)))
    assert [m["position"] for m in await run(c.receive(topic, "s", consumer="c1"))] == [last]

    page = await run(c.fetch(topic))
    kinds = [e["kind"] for e in page["entries"]]
    assert kinds.count("data") == 4
    assert "commit" in kinds
    one = await run(c.fetch(topic, Position.parse(first), max=1, isolation="read_uncommitted"))
    assert [e["position"] for e in one["entries"]] == [first]
    metrics = await run(c.request("GET", "/metrics"))
    assert metrics.status_code == 200
    assert "txnstream" in metrics.text

    assert (await run(c.delete_subscription(topic, "s")))["deleted"] is True

    # consumer policies and message TTL (issue 31 items 14-16)
    assert await run(
        c.create_subscription(
            topic, "p", type="shared", max_redeliveries=2, dead_letter_topic="dlq", nack_delay_ms=5
        )
    )
    policy = (await run(c.list_subscriptions(topic)))["p"]
    assert (policy["max_redeliveries"], policy["dead_letter_topic"], policy["nack_delay_ms"]) == (
        2,
        "dlq",
        5,
    )
    assert (await run(c.nack(topic, "p", ["0:0"], delay_ms=10)))["nacked"] == 1
    assert await run(c.set_ttl(topic, 60_000)) == {"topic": topic, "ttl_ms": 60_000}
    assert (await run(c.stats(topic)))["ttl_ms"] == 60_000
    assert (await run(c.delete_topic(topic)))["deleted"] is True
    assert topic not in await run(c.list_topics())


async def test_every_method_round_trips_sync(server_url: str, name: str) -> None:
    with Client(server_url) as client:
        await _scenario(client, _passed, name)


async def test_every_method_round_trips_async(server_url: str, name: str) -> None:
    async with AsyncClient(server_url + "/", token="secret") as client:
        assert client.url == server_url
        await _scenario(client, _awaited, name)


def _txn_not_open(c: Client, name: str) -> None:
    txn = c.begin()["txn"]
    c.abort(txn)
    c.commit(txn)


def _fenced(c: Client, name: str) -> None:
    old = c.begin(transactional_id=name)["txn"]
    c.begin(transactional_id=name)
    c.commit(old)


def _conflict(c: Client, name: str) -> None:
    c.create_topic(name)
    c.create_subscription(name, "s", type="shared")
    c.create_subscription(name, "s", type="exclusive")


def _too_large(c: Client, name: str) -> None:
    c.create_topic(name)
    c.produce(name, [wire_message("x" * (5 * 1024 * 1024 + 1))])


@pytest.mark.parametrize(
    ("fail", "status", "code"),
    [
        (lambda c, name: c.create_topic("__reserved"), 400, "invalid_request"),
        (lambda c, name: c.receive(name, "s", max=0), 400, "invalid_request"),
        (lambda c, name: c.stats(name), 404, "not_found"),
        (lambda c, name: c.get_transaction("txn-999999999"), 404, "not_found"),
        (_txn_not_open, 409, "txn_not_open"),
        (_fenced, 409, "fenced"),
        (_conflict, 409, "conflict"),
        (_too_large, 413, "too_large"),
    ],
)
def test_error_answers_raise_with_status_and_code(
    server_url: str, name: str, fail: Callable[[Client, str], None], status: int, code: str
) -> None:
    with Client(server_url) as client, pytest.raises(TxnStreamHttpError) as raised:
        fail(client, name)
    assert type(raised.value) is TxnStreamHttpError
    assert (raised.value.status, raised.value.code) == (status, code)
    assert raised.value.message
    assert str(raised.value) == raised.value.message
    assert isinstance(raised.value, EngineError)


async def test_async_error_answer(server_url: str, name: str) -> None:
    async with AsyncClient(server_url) as client:
        with pytest.raises(TxnStreamHttpError) as raised:
            await client.delete_topic(name)
    assert (raised.value.status, raised.value.code) == (404, "not_found")


async def test_no_server_is_unavailable_and_not_sent() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url) as client, pytest.raises(TxnStreamTransportError) as raised:
        client.list_topics()
    assert (raised.value.status, raised.value.code, raised.value.sent) == (
        503,
        "unavailable",
        False,
    )
    assert raised.value.message.startswith(f"cannot reach the server at {url}: ")
    assert raised.value.retriable
    async with AsyncClient(url) as aclient:
        with pytest.raises(TxnStreamTransportError) as araised:
            await aclient.health()
    assert araised.value.sent is False


@pytest.fixture
def hangup_server() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback server that reads one request, records it and closes the connection."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            seen.append(conn.recv(65536))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    listener.close()
    thread.join(timeout=10)


def test_answer_lost_is_sent_and_token_is_a_bearer_header(
    hangup_server: tuple[str, list[bytes]],
) -> None:
    url, seen = hangup_server
    with Client(url, token="s3cret") as client, pytest.raises(TxnStreamTransportError) as raised:
        client.commit("txn-1")
    assert raised.value.sent is True
    request = seen[0].decode().lower()
    assert request.startswith("post /v1/transactions/txn-1/commit ")
    assert "authorization: bearer s3cret" in request


def test_answers_that_are_not_the_error_envelope() -> None:
    with pytest.raises(TxnStreamHttpError) as raised:
        answer(httpx.Response(502, text="<html>bad gateway</html>"))
    assert (raised.value.status, raised.value.code) == (502, "unknown")
    assert raised.value.message == "<html>bad gateway</html>"
    unhealthy = {"status": "degraded", "reason": "disk full"}
    assert health().read(httpx.Response(503, json=unhealthy)) == unhealthy
    envelope = {"error": {"code": "unavailable", "message": "the engine is not open"}}
    with pytest.raises(TxnStreamHttpError) as closed:
        health().read(httpx.Response(503, json=envelope))
    assert closed.value.code == "unavailable"


def test_errors_pickle_and_values_encode() -> None:
    for error in (
        TxnStreamHttpError("gone", 404, "not_found"),
        TxnStreamTransportError("x", False),
    ):
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), copy.message, copy.status, copy.code) == (
            type(error),
            error.message,
            error.status,
            error.code,
        )
    assert pickle.loads(pickle.dumps(TxnStreamTransportError("x", False))).sent is False
    assert wire_message(b"hi") == {"value_b64": "aGk=", "key": None, "properties": {}}
    assert wire_message(None, key="k") == {"value": None, "key": "k", "properties": {}}
    assert message_value(wire_message(b"\xff")) == b"\xff"


async def test_a_long_poll_on_an_unknown_subscription_raises_not_found(
    server_url: str, name: str
) -> None:
    async with AsyncClient(server_url) as client:
        await client.create_topic(name)
        for topic, sub in ((name, "missing"), (f"{name}-missing", "s")):
            with pytest.raises(TxnStreamHttpError) as raised:
                await client.receive(topic, sub, wait_ms=5000)
            assert (raised.value.status, raised.value.code) == (404, "not_found")
    with Client(server_url) as sync, pytest.raises(TxnStreamHttpError) as raised:
        sync.receive(name, "missing", wait_ms=5000)
    assert raised.value.status == 404


async def test_a_client_of_an_http_server_loads_no_certificates(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading the CA bundle was over a quarter of a CLI call's start (issue 31, item 3):
    the clients of an http:// server never do."""
    import ssl

    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        load(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    with Client(server_url) as client:
        client.list_topics()
    async with AsyncClient(server_url) as aclient:
        await aclient.list_topics()
    assert loads == []


async def test_https_is_verified_as_httpx_does_with_tls_made_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clients set TLS up on their first https:// request (a client of an http://
    server never loads the CA bundle: issue 31, item 3), verifying as httpx's defaults
    do: an unknown certificate is refused, one trusted through ``SSL_CERT_FILE``
    (``trust_env``) is accepted, and ``trust_env=False`` ignores that variable."""
    import ssl

    cert, key = self_signed_cert(tmp_path)
    args = ("--tls-cert", str(cert), "--tls-key", str(key))
    context = ssl.create_default_context(cafile=str(cert))
    with ServeSubprocess(
        tmp_path / "data", tmp_path / "log", *args, scheme="https", verify=context
    ) as server:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        monkeypatch.delenv("SSL_CERT_DIR", raising=False)
        with Client(server.url) as client, pytest.raises(TxnStreamTransportError) as refused:
            client.list_topics()
        assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value), refused.value
        async with AsyncClient(server.url) as aclient:
            with pytest.raises(TxnStreamTransportError, match="CERTIFICATE_VERIFY_FAILED"):
                await aclient.list_topics()

        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        with Client(server.url) as client:
            assert client.create_topic("over-tls")
            assert "over-tls" in client.list_topics()
        async with AsyncClient(server.url) as aclient:
            assert "over-tls" in await aclient.list_topics()
        with Client(server.url, trust_env=False) as client, pytest.raises(TxnStreamTransportError):
            client.list_topics()
