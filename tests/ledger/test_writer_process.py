"""The writer process (``EngineConfig(writer="process")``): it stores exactly what the
writer thread stores, its failures read as the thread's would, and its death fails the
store, after which an engine recovers in place with nothing acknowledged lost."""

from __future__ import annotations

import asyncio
import errno
import math
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import drain, wait_until

from txnstream.api import Engine, EngineConfig, EngineError
from txnstream.ledger import EngineFailedError, Store, WriteBatch
from txnstream.ledger._store import is_no_space
from txnstream.ledger._writer_process import _rebuild

pytestmark = pytest.mark.timeout(120)

_UPSERT = "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)"
_DELETE = "DELETE FROM meta WHERE key = ?"

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40),
    st.binary(max_size=300),
)
keys = st.text(alphabet="abcdef", min_size=1, max_size=3)
statement = st.one_of(
    st.tuples(st.just(_UPSERT), st.lists(st.tuples(keys, values), min_size=1, max_size=40)),
    st.tuples(st.just(_DELETE), st.lists(st.tuples(keys), min_size=1, max_size=3)),
)
flushes = st.lists(st.lists(statement, min_size=1, max_size=6), min_size=1, max_size=4)


async def _stored(directory: Path, flushes: list[Any], process: bool) -> list[Any]:
    store = await Store.open(directory / "txnstream.db", writer_process=process)
    try:
        for flush in flushes:
            batch = WriteBatch()
            for sql, rows in flush:
                batch.add_many(sql, rows)
            await store.write(batch)
        return await store.read("SELECT key, value, typeof(value) FROM meta ORDER BY key")
    finally:
        await store.close()


@settings(max_examples=25, deadline=None)
@given(flushes=flushes)
def test_the_process_stores_exactly_what_the_thread_stores(
    tmp_path_factory: pytest.TempPathFactory, flushes: list[Any]
) -> None:
    """Every SQLite type through the pipe: ints at both 64-bit ends, floats (infinities
    included), text, blobs, NULL, booleans; upserts and deletes, in order."""
    thread = asyncio.run(_stored(tmp_path_factory.mktemp("thread"), flushes, False))
    process = asyncio.run(_stored(tmp_path_factory.mktemp("process"), flushes, True))
    assert process == thread
    for _key, value, kind in process:  # the types survived, not just equal-looking values
        if isinstance(value, float) and math.isinf(value):
            assert kind == "real"


async def test_a_failed_statement_rolls_back_its_flush_only(tmp_path: Path) -> None:
    store = await Store.open(tmp_path / "txnstream.db", writer_process=True)
    try:
        good = WriteBatch()
        good.add(_UPSERT, ("a", 1))
        await store.write(good)
        bad = WriteBatch()
        bad.add(_UPSERT, ("b", 2))
        bad.add("INSERT INTO meta (key, value) VALUES (?, ?)", ("a", 3))  # duplicate key
        with pytest.raises(EngineFailedError, match="UNIQUE constraint failed"):
            await store.write(bad)
        assert isinstance(store.failure, sqlite3.IntegrityError)
        assert await store.read("SELECT key, value FROM meta") == [("a", 1)]
    finally:
        await store.close()


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
async def test_a_waited_batch_goes_to_the_writer_process_before_the_loop_pass_ends(
    tmp_path: Path, process: bool
) -> None:
    """The process writes beside the loop, so a commit goes to it at once and what the
    same pass submits after it takes the next flush; the writer thread shares the GIL,
    so it waits for the end of the pass and takes both in one flush. Either way both are
    durable, in submission order, before their waits return."""
    store = await Store.open(tmp_path / "txnstream.db", writer_process=process)
    flushes: list[int] = []
    store.on_flush = lambda entries, seconds: flushes.append(store.generation)
    try:
        first, second = WriteBatch(), WriteBatch()
        first.add(_UPSERT, ("k", "first"))
        second.add(_UPSERT, ("k", "second"))
        waits = [store.submit(first), store.submit(second)]  # one loop pass, no await between
        await asyncio.gather(*waits)
        assert len(flushes) == (2 if process else 1)
        assert await store.read("SELECT value FROM meta WHERE key = 'k'") == [("second",)]
    finally:
        await store.close()


def test_the_childs_errors_come_back_as_the_thread_would_raise_them() -> None:
    locked = _rebuild("OperationalError", "database is locked", None)
    assert type(locked) is sqlite3.OperationalError
    assert str(locked) == "database is locked"  # (the store retries this one)
    full = _rebuild("OperationalError", "database or disk is full", None)
    assert is_no_space(full)
    enospc = _rebuild("OSError", "No space left on device", errno.ENOSPC)
    assert isinstance(enospc, OSError)
    assert is_no_space(enospc)
    other = _rebuild("MemoryError", "", None)
    assert isinstance(other, EngineFailedError)
    assert "MemoryError" in str(other)


def _writer_children(db: Path) -> list[int]:
    """Pids of this process's writer processes for ``db``."""
    pids = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue
            if any(a.endswith(b"_sqlwriter.py") for a in argv) and str(db).encode() in argv:
                pids.append(int(pid))
    return pids


async def test_a_killed_writer_process_fails_the_store_and_the_engine_recovers(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    config = EngineConfig(writer="process")
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        acked = [await engine.send("t", {"n": n}) for n in range(20)]
        (child,) = _writer_children(data / "txnstream.db")
        os.kill(child, signal.SIGKILL)
        # The send after the kill fails (nothing can apply its flush); once recovery
        # has reopened the store with a new writer process, sends succeed again.
        refused = 0

        async def sent() -> bool:
            nonlocal refused
            try:
                acked.append(await engine.send("t", {"n": len(acked)}))
            except EngineError:
                refused += 1
                return False
            return True

        await wait_until(sent, 30, "a send to succeed after recovery")
        assert refused >= 1
        (new_child,) = _writer_children(data / "txnstream.db")
        assert new_child != child
        sub = await engine.subscribe("t", "all", initial_position="earliest")
        got = await drain(sub, idle=0.2, limit=30)
        assert [m.position for m in got] == acked
    assert _writer_children(data / "txnstream.db") == []  # closed with the engine


batches = st.lists(
    st.tuples(st.booleans(), st.lists(st.tuples(keys, st.integers(0, 9)), max_size=3)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=20, deadline=None)
@given(batches=batches, yield_every=st.integers(1, 4))
def test_flushes_complete_in_submission_order(
    tmp_path_factory: pytest.TempPathFactory, batches: list[Any], yield_every: int
) -> None:
    """Submissions while a flush is in the writer process: callbacks and waiters run in
    submission order, each after everything before it, and the table ends as the
    batches applied one by one would leave it (empty batches included)."""
    directory = tmp_path_factory.mktemp("order")

    async def run() -> None:
        store = await Store.open(directory / "txnstream.db", writer_process=True)
        try:
            published: list[int] = []
            waited: list[tuple[int, int]] = []  # (batch, batches published by then)
            futures = []
            model: dict[str, int] = {}
            for n, (wait, rows) in enumerate(batches):
                batch = WriteBatch()
                for key, value in rows:
                    batch.add(_UPSERT, (key, value))
                    model[key] = value
                batch.on_durable(lambda n=n: published.append(n))
                future = store.submit(batch, wait=wait)
                if future is not None:
                    future.add_done_callback(lambda _, n=n: waited.append((n, len(published))))
                    futures.append(future)
                if n % yield_every == 0:
                    await asyncio.sleep(0)  # the loop pass ends: due flushes go
            await store.flush()
            await asyncio.gather(*futures)
            assert published == list(range(len(batches)))
            assert [n for n, _ in waited] == sorted(n for n, _ in waited)
            assert all(done > n for n, done in waited)
            rows = await store.read("SELECT key, value FROM meta WHERE key != 'schema'")
            assert dict(rows) == model
        finally:
            await store.close()

    asyncio.run(run())


async def test_no_interpreter_to_start_fails_the_open_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host that embeds Python has no interpreter at ``sys.executable``: the open
    fails with a clear error and leaves the directory free for a thread writer."""
    monkeypatch.setattr("sys.executable", str(tmp_path / "no-python"))
    with pytest.raises(EngineFailedError, match="writer='thread'"):
        await Store.open(tmp_path / "txnstream.db", writer_process=True)
    monkeypatch.undo()
    store = await Store.open(tmp_path / "txnstream.db")
    await store.close()


async def test_a_large_flush_is_packed_off_the_loop_and_stored_whole(tmp_path: Path) -> None:
    """Past 1 MiB of payloads a flush is packed in a worker thread: what is stored and
    its order are the same."""
    values = [bytes([n % 251]) * 8192 for n in range(300)]  # ~2.4 MB in one flush
    config = EngineConfig(writer="process")
    async with Engine.open(tmp_path / "data", config) as engine:
        await engine.create_topic("t")
        positions = await engine.send_many("t", values)
        after = await engine.send("t", b"after")
    async with Engine.open(tmp_path / "data", config) as engine:
        sub = await engine.subscribe("t", "all", initial_position="earliest")
        got = await drain(sub, idle=0.2, limit=30)
    assert [m.value for m in got] == [*values, b"after"]
    assert [m.position for m in got] == [*positions, after]
