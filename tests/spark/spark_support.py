"""Helpers of the Spark tests: test data, the expected committed view, row normalizing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from support import free_port, wait_for

from txnstream.api import Engine, EngineConfig, Transaction

T = TypeVar("T")

Row = tuple[str, str | None, bytes | None, str | None, dict[str, str], str | None]


def expected_columns(value: Any) -> tuple[bytes | None, str | None]:
    """The (value, value_json) columns the source promises for a message value."""
    if isinstance(value, bytes):
        return value, None
    if value is None:
        return None, "null"
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if isinstance(value, str):
        return value.encode(), text
    return text.encode(), text


async def engine_view(engine: Engine, topic: str, isolation: str = "read_committed") -> list[Row]:
    """What a reader of ``topic`` must get: the engine's range fetch, filtered as the
    contract says (markers out; aborted data out when read_committed)."""
    rows: list[Row] = []
    position = None
    while True:
        result = await engine.fetch(topic, position, max=10_000, isolation=isolation)
        aborted = {a.txn for a in result.aborted}
        for entry in result.entries:
            if entry.kind != "data":
                continue
            if isolation == "read_committed" and entry.txn in aborted:
                continue
            value, text = expected_columns(entry.value)
            rows.append((str(entry.position), entry.key, value, text, entry.properties, entry.txn))
        if not result.entries:
            return rows
        position = result.next


def spark_rows(df: DataFrame) -> list[Row]:
    """The rows of a txnstream DataFrame, normalized and in position order."""
    out = []
    for r in df.collect():
        out.append(
            (
                r["position"],
                r["key"],
                None if r["value"] is None else bytes(r["value"]),
                r["value_json"],
                dict(r["properties"] or {}),
                r["txn"],
            )
        )
    return sorted(out, key=lambda row: tuple(int(x) for x in row[0].split(":")))


def reader(spark: SparkSession, topic: str, **options: str) -> Any:
    """``spark.read.format("txnstream")`` with ``topic`` and ``options``."""
    read = spark.read.format("txnstream").option("topic", topic)
    for key, value in options.items():
        read = read.option(key, value)
    return read


async def populate_mixed(engine: Engine, topic: str) -> Transaction:
    """Committed, aborted (interleaved), open and plain data; returns the open txn.

    Layout: plain messages of several value kinds; transactions A (committed) and B
    (aborted) interleaved; then C opens and stays open; after C's first entry a
    committed D and a plain message follow (not readable while C is open).
    """
    await engine.send(topic, b"plain-bytes", key="k0", properties={"src": "test"})
    await engine.send(topic, "plain text é")
    await engine.send(topic, {"order": 1, "items": [1, 2]})
    await engine.send(topic, None)
    await engine.send(topic, 42)
    a = await engine.begin(label="test:a")
    b = await engine.begin(label="test:b")
    for i in range(25):
        await a.send(topic, f"a-{i}".encode(), key=f"a{i}")
        await b.send(topic, f"b-{i}".encode())
    await a.commit()
    await b.abort()
    await engine.send_many(topic, [b"p1", b"p2"])
    c = await engine.begin(label="test:c")
    await c.send(topic, b"c-0")
    d = await engine.begin()
    await d.send_many(topic, [b"d-0", b"d-1"])
    await d.commit()
    await engine.send(topic, b"after-open")
    await c.send(topic, b"c-1")
    await engine._rt.store.flush()  # transactional sends are pipelined: make them durable
    return c


# Small ledgers, so that a test topic spans several ledgers (several input partitions).
LEDGER_ENTRIES = 40


@dataclass
class LiveServer:
    """A txnstream server running in this process."""

    url: str
    data: Path
    engine: Engine
    loop: asyncio.AbstractEventLoop
    topics: list[str] = field(default_factory=list)

    def run(self, awaitable: Awaitable[T], timeout: float = 60.0) -> T:
        """Run a coroutine on the server's event loop (its engine lives there)."""

        async def wrap() -> T:
            return await awaitable

        future: Future[T] = asyncio.run_coroutine_threadsafe(wrap(), self.loop)
        return future.result(timeout)

    def new_topic(self) -> str:
        name = f"t{uuid.uuid4().hex[:10]}"
        self.run(self.engine.create_topic(name))
        return name


def run_engine(path: Path, action: Callable[[Engine], Awaitable[T]]) -> T:
    """Open an engine on ``path`` in this thread, run ``action``, close it."""

    async def main() -> T:
        config = EngineConfig(durability="normal", ledger_max_entries=LEDGER_ENTRIES)
        async with Engine.open(path, config) as engine:
            return await action(engine)

    return asyncio.run(main())


@contextlib.contextmanager
def engine_in_thread(
    store: str | Path, config: EngineConfig, *, http: bool
) -> Iterator[LiveServer]:
    """An engine on ``store`` in a background thread with its own event loop, served over
    HTTP by a real uvicorn server on a free loopback port when ``http`` (else ``url`` is
    empty); closed, and the thread joined, on exit."""
    port = free_port()
    state: dict[str, Any] = {}

    async def own() -> None:
        async with Engine.open(store, config) as engine:
            state.update(engine=engine, loop=asyncio.get_running_loop())
            if not http:
                done = asyncio.Event()
                state["stop"] = done.set
                await done.wait()
                return
            import uvicorn

            from txnstream.api.http import create_app

            uv = uvicorn.Server(
                uvicorn.Config(
                    create_app(engine),
                    host="127.0.0.1",
                    port=port,
                    log_level="warning",
                    lifespan="off",
                )
            )
            state["stop"] = lambda: setattr(uv, "should_exit", True)
            state["server"] = uv
            await uv.serve()

    def main() -> None:
        try:
            asyncio.run(own())
        except Exception as exc:  # noqa: BLE001 - reported by the wait below
            state["error"] = exc

    thread = threading.Thread(target=main, name="spark-test-engine", daemon=True)
    thread.start()
    ready = (lambda: state["server"].started) if http else (lambda: True)
    wait_for(lambda: "error" in state or ("stop" in state and ready()), 60, "the engine to serve")
    assert "error" not in state, state.get("error")
    url = f"http://127.0.0.1:{port}" if http else ""
    try:
        yield LiveServer(url, Path(store), state["engine"], state["loop"])
    finally:
        state["loop"].call_soon_threadsafe(state["stop"])
        thread.join(timeout=30)
        assert not thread.is_alive()
