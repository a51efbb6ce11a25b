"""The PostgreSQL read connections' waiting (``_read_what_arrived``): psycopg reads a
result in libpq's 16 kB reads and asks to wait for the socket after each; what already
arrived is read at once instead of after a round trip through the event loop, at most
``_EAGER_READS`` reads in a row. Driven here by hand over a socket pair, with a
generator that reads as psycopg's do."""

from __future__ import annotations

import socket
from collections.abc import Generator, Iterator

import pytest
from psycopg.waiting import Ready, Wait

from txnstream.ledger._pg_store import _EAGER_READS, _read_what_arrived

pytestmark = pytest.mark.timeout(30)

CHUNK = 16


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    with ours, theirs:
        yield ours, theirs


def _reads(sock: socket.socket, wanted: int) -> Generator[Wait, Ready, bytes]:
    """Like psycopg's fetch: wait for the socket, read once (up to ``CHUNK``), and wait
    again until ``wanted`` bytes came."""
    data = b""
    while len(data) < wanted:
        ready = yield Wait.R
        assert ready == Ready.R
        data += sock.recv(CHUNK)
    return data


def _result(gen: Generator[Wait, Ready, bytes], ready: Ready | None = None) -> bytes | None:
    """Resume ``gen`` (with ``ready``, or start it): its result, or None if it waits."""
    try:
        state = next(gen) if ready is None else gen.send(ready)
    except StopIteration as done:
        result: bytes = done.value
        return result
    assert state == Wait.R
    return None


def test_what_already_arrived_is_read_without_waiting(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    theirs.sendall(b"x" * (10 * CHUNK))
    assert _result(_read_what_arrived(_reads(ours, 10 * CHUNK), ours.fileno())) == b"x" * 160


def test_it_waits_when_nothing_arrived_and_reads_on_after(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    gen = _read_what_arrived(_reads(ours, 4 * CHUNK), ours.fileno())
    assert _result(gen) is None  # nothing there: it waits
    theirs.sendall(b"a" * (2 * CHUNK))
    assert _result(gen, Ready.R) is None  # both chunks read, then it waits again
    theirs.sendall(b"b" * (2 * CHUNK))
    assert _result(gen, Ready.R) == b"a" * 32 + b"b" * 32


def test_a_long_result_goes_back_to_the_loop_every_so_many_reads(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, theirs = pair
    size = 3 * _EAGER_READS * CHUNK
    theirs.sendall(b"z" * size)  # all there already
    gen = _read_what_arrived(_reads(ours, size), ours.fileno())
    steps = 1
    result = _result(gen)
    while result is None:
        steps += 1
        result = _result(gen, Ready.R)
    assert result == b"z" * size
    assert steps == 3  # a step reads what it was woken for, then at most _EAGER_READS more
