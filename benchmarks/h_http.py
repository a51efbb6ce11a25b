"""H0/H1/H2: the HTTP server (issue 3) against the embedded engine and a bare FastAPI app.

``run(quick) -> list[dict]`` (figure dicts as in ``bench-results.json``: ``id``,
``value``, ``unit``, ``baseline``, ``ratio``, plus ``target``/``met``/``samples``...).
Run alone: ``.venv/bin/python -m benchmarks.h_http [--quick] [--runs N] [--json]``.

Servers (real uvicorn processes on a free loopback port, killed in ``finally``):

* the txnstream app: ``python -m txnstream serve --data TMP --host 127.0.0.1 --port P
  --log-level warning`` (default durability ``full``), a fresh data directory per run;
* H0: ``python -m uvicorn benchmarks.h0_app:app --host 127.0.0.1 --port P --log-level
  warning --no-access-log --timeout-keep-alive 30``: the uvicorn settings ``serve`` uses
  (``api/cli/_serve.py::make_server``: access log off, keep-alive 30 s; ``auto`` picks
  uvloop and the httptools parser for both, as the package installs them).

Load generator: this process, 64 workers pulling operations from a shared counter, each
request on one of 64 keep-alive HTTP/1.1 connections of a small asyncio-streams client
(:class:`RawConnection`: one ``write`` per request, response read by Content-Length).
``wrk`` is not installed here (and is not installed by this benchmark). httpx's
``AsyncClient`` is available as ``--generator httpx`` for comparison only: its
connection pool costs milliseconds of client CPU per request on this machine
(encode/httpx#3215; measured 76-213 req/s against the bare app that serves ~1,450 req/s
to the raw client), so it would measure itself, not the server. Every workload runs a
fixed number of operations after an untimed warm-up (128 operations, which also opens
the connections). The CPU time of this process and of the server over the timed part
is recorded (``cpu_cores``) to show which side saturates (2 cores here).

Workloads (100-byte ``bytes`` values sent as ``value_b64``):

* ``H0-req``: batch-1 produce bodies to the bare app, requests/s.
* ``H1-plain1`` / ``H1-plain100``: one POST of 1 / 100 messages per operation.
* ``H1-txn1`` / ``H1-txn100``: ``POST /v1/transactions``, one POST of 1 / 100 messages
  with ``"txn"``, ``POST .../commit``: three requests per operation.
  messages/s and requests/s of each.
* ``H1-embedded-*``: the same operations through ``api.Engine`` in this process (64
  asyncio tasks: ``engine.produce`` / ``begin`` + ``produce(txn=)`` + ``commit``), a
  fresh data directory, default ``EngineConfig()`` (durability ``full`` like the server),
  ``EMBEDDED_SCALE`` times as many operations (the embedded engine is 3-15x faster; the
  longer run keeps its timing well above scheduler noise).
* ``H2``: commit-to-delivery over HTTP. A consumer long-polls ``GET .../messages?
  wait_ms=5000`` (and acks cumulatively after each batch) while a producer does begin +
  send + commit over HTTP, waiting for each delivery (and for the consumer's next poll
  to be under way) before the next transaction; latency from just before the commit
  request is sent to the consumer's response arriving. 10 warm-up transactions.

Sizes: 3000 HTTP operations of batch 1, 300 of batch 100, 200 H2 transactions (quick:
600, 60, 50). Each run starts a fresh txnstream server; the workloads are interleaved run
by run and each figure is the median over the runs (3 by default).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.core import (
    VALUE_SIZE,
    Figure,
    Target,
    collect_garbage,
    format_table,
    make_values,
    percentile,
    progress,
    resolve,
)
from benchmarks.http_support import (
    CONCURRENCY,
    Client,
    Server,
    h0_argv,
    server_process,
    txnstream_argv,
)
from txnstream.api import Engine, EngineConfig, OutgoingMessage

H2_WARMUP = 10
WARMUP_OPS = 2 * CONCURRENCY
EMBEDDED_SCALE = 5
H2_WAIT_MS = 5000
_POOL = 1000


@dataclass(frozen=True, slots=True)
class Sizes:
    """Operations per workload and H2 transactions, per mode."""

    batch1_ops: int
    batch100_ops: int
    h2_iterations: int

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        return cls(600, 60, 50) if quick else cls(3000, 1500, 200)


# -- load generation -------------------------------------------------------------------

Op = Callable[[], Awaitable[int]]
"""One operation; returns the HTTP requests it made (0 for embedded operations)."""


@dataclass(slots=True)
class Timed:
    """One timed workload run."""

    ops: int
    messages: int
    requests: int
    seconds: float
    client_cpu: float
    """Cores used by this process (generator or embedded engine) over the run."""
    server_cpu: float | None = None
    """Cores used by the server process over the run (HTTP only)."""

    @property
    def msg_rate(self) -> float:
        return self.messages / self.seconds

    @property
    def req_rate(self) -> float:
        return self.requests / self.seconds


async def drive(op: Op, ops: int, concurrency: int = CONCURRENCY) -> int:
    """Run ``op`` ``ops`` times with ``concurrency`` workers; the requests made."""
    counter = iter(range(ops))
    requests = 0

    async def worker() -> None:
        nonlocal requests
        for _ in counter:  # shared: each operation runs once
            made = await op()
            requests += made

    await asyncio.gather(*(worker() for _ in range(min(concurrency, ops))))
    return requests


async def timed(op: Op, ops: int, batch: int, server: Server | None) -> Timed:
    """Warm up (2 x concurrency operations, untimed), then time ``ops`` operations."""
    await drive(op, WARMUP_OPS)
    collect_garbage()
    server_cpu = server.cpu_seconds() if server is not None else 0.0
    cpu = time.process_time()
    started = time.perf_counter()
    requests = await drive(op, ops)
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    server_used = None if server is None else (server.cpu_seconds() - server_cpu) / seconds
    return Timed(ops, ops * batch, requests, seconds, cpu / seconds, server_used)


def _chunks(values: list[bytes], batch: int, count: int = 20) -> list[list[bytes]]:
    """``count`` batches of ``batch`` values, taken around the pool."""
    out = []
    for i in range(count):
        start = (i * batch) % (len(values) - batch + 1)
        out.append(values[start : start + batch])
    return out


class Bodies:
    """Pre-encoded produce bodies of one batch size (``value_b64``), cycled."""

    def __init__(self, values: list[bytes], batch: int) -> None:
        self._messages = [
            json.dumps(
                [{"value_b64": base64.b64encode(v).decode("ascii")} for v in chunk],
                separators=(",", ":"),
            ).encode()
            for chunk in _chunks(values, batch)
        ]
        self._next = 0

    def body(self, txn: str | None = None) -> bytes:
        messages = self._messages[self._next]
        self._next = (self._next + 1) % len(self._messages)
        if txn is None:
            return b'{"messages":' + messages + b"}"
        return b'{"messages":' + messages + b',"txn":' + json.dumps(txn).encode() + b"}"


def http_plain_op(client: Client, topic: str, bodies: Bodies) -> Op:
    target = f"/v1/topics/{topic}/messages"

    async def op() -> int:
        await client.request("POST", target, bodies.body())
        return 1

    return op


def http_txn_op(client: Client, topic: str, bodies: Bodies) -> Op:
    target = f"/v1/topics/{topic}/messages"

    async def op() -> int:
        begun = await client.request("POST", "/v1/transactions", b"{}", expect=201)
        txn = json.loads(begun)["txn"]
        await client.request("POST", target, bodies.body(txn))
        await client.request("POST", f"/v1/transactions/{txn}/commit")
        return 3

    return op


def embedded_plain_op(engine: Engine, topic: str, batches: list[list[OutgoingMessage]]) -> Op:
    cycle = itertools.cycle(batches)

    async def op() -> int:
        await engine.produce(topic, next(cycle))
        return 0

    return op


def embedded_txn_op(engine: Engine, topic: str, batches: list[list[OutgoingMessage]]) -> Op:
    cycle = itertools.cycle(batches)

    async def op() -> int:
        txn = await engine.begin()
        await engine.produce(topic, next(cycle), txn=txn.id)
        await txn.commit()
        return 0

    return op


# -- workloads -------------------------------------------------------------------------

H1_WORKLOADS: tuple[tuple[str, int, bool], ...] = (
    ("plain1", 1, False),
    ("plain100", 100, False),
    ("txn1", 1, True),
    ("txn100", 100, True),
)
"""(name, batch size, transactional)."""


def _ops(sizes: Sizes, batch: int) -> int:
    return sizes.batch1_ops if batch == 1 else sizes.batch100_ops


def _expected_entries(ops: int, batch: int, transactional: bool) -> int:
    done = ops + WARMUP_OPS
    return done * batch + (done if transactional else 0)  # + one COMMIT marker per txn


async def run_h0(server: Server, sizes: Sizes, values: list[bytes], generator: str) -> Timed:
    """Batch-1 produce bodies to the bare app."""
    async with Client(server.url, generator=generator) as client:
        op = http_plain_op(client, "h0", Bodies(values, 1))
        return await timed(op, sizes.batch1_ops, 1, server)


async def run_h1_http(
    server: Server, sizes: Sizes, values: list[bytes], generator: str
) -> dict[str, Timed]:
    """Every H1 workload over HTTP on its own topic; checks the entries stored."""
    out = {}
    async with Client(server.url, generator=generator) as client:
        for name, batch, transactional in H1_WORKLOADS:
            topic = f"h1-{name}"
            await client.request("PUT", f"/v1/topics/{topic}", b"{}", expect=201)
            make = http_txn_op if transactional else http_plain_op
            ops = _ops(sizes, batch)
            out[name] = await timed(make(client, topic, Bodies(values, batch)), ops, batch, server)
            stats = await client.json("GET", f"/v1/topics/{topic}/stats")
            expected = _expected_entries(ops, batch, transactional)
            if stats["entries"] != expected or stats["open_txns"] != 0:
                raise AssertionError(f"H1 {name}: expected {expected} entries, stats {stats}")
    return out


async def run_h1_embedded(path: Path, sizes: Sizes, values: list[bytes]) -> dict[str, Timed]:
    """The same workloads through an in-process engine (fresh data directory)."""
    out = {}
    async with Engine.open(path, EngineConfig()) as engine:
        for name, batch, transactional in H1_WORKLOADS:
            topic = f"h1-{name}"
            await engine.create_topic(topic)
            batches = [[OutgoingMessage(v) for v in chunk] for chunk in _chunks(values, batch)]
            make = embedded_txn_op if transactional else embedded_plain_op
            ops = _ops(sizes, batch) * EMBEDDED_SCALE
            out[name] = await timed(make(engine, topic, batches), ops, batch, None)
            stats = await engine.stats(topic)
            expected = _expected_entries(ops, batch, transactional)
            if stats["entries"] != expected or stats["open_txns"] != 0:
                raise AssertionError(f"embedded {name}: expected {expected}, stats {stats}")
    return out


async def run_h2(url: str, iterations: int, generator: str) -> list[float]:
    """Commit-to-delivery latencies (ms) over HTTP with a long-polling consumer."""
    topic, sub = "h2", "latency"
    base = f"/v1/topics/{topic}/subscriptions/{sub}"
    poll = f"{base}/messages?consumer=h2&max=100&wait_ms={H2_WAIT_MS}"
    filler = base64.b64encode(make_values(1, VALUE_SIZE)[0]).decode("ascii")
    loop = asyncio.get_running_loop()
    arrivals: dict[int, asyncio.Future[float]] = {}
    polling = asyncio.Event()
    async with (
        Client(url, 1, generator) as producer,
        Client(url, 1, generator) as consumer_client,
    ):
        await producer.request("PUT", f"/v1/topics/{topic}", b"{}", expect=201)
        settings = {"type": "exclusive", "isolation": "read_committed"}
        await producer.json("PUT", base, settings, expect=201)

        async def consume() -> None:
            while True:
                polling.set()
                response = await consumer_client.request("GET", poll)
                now = time.perf_counter()
                polling.clear()
                messages = json.loads(response)["messages"]
                for message in messages:
                    waiting = arrivals.get(int(message["key"]))
                    if waiting is not None and not waiting.done():
                        waiting.set_result(now)
                if messages:
                    ack = {"positions": [messages[-1]["position"]], "cumulative": True}
                    await consumer_client.json("POST", f"{base}/ack", ack)

        consumer = asyncio.create_task(consume(), name="h2-consumer")
        latencies: list[float] = []
        collect_garbage()
        try:
            for i in range(H2_WARMUP + iterations):
                await asyncio.wait_for(polling.wait(), timeout=10.0)
                arrival = arrivals[i] = loop.create_future()
                begun = await producer.json("POST", "/v1/transactions", {}, expect=201)
                txn = begun["txn"]
                body = {"messages": [{"key": str(i), "value_b64": filler}], "txn": txn}
                await producer.json("POST", f"/v1/topics/{topic}/messages", body)
                started = time.perf_counter()
                await producer.request("POST", f"/v1/transactions/{txn}/commit")
                arrived = await asyncio.wait_for(arrival, timeout=10.0)
                del arrivals[i]
                if i >= H2_WARMUP:
                    latencies.append((arrived - started) * 1000)
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
    return latencies


# -- figures ---------------------------------------------------------------------------


@dataclass(slots=True)
class Collected:
    """Samples per figure id (one per run) plus CPU samples per workload."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, dict[str, list[float]]] = field(default_factory=dict)

    def add(self, figure_id: str, value: float) -> None:
        self.samples.setdefault(figure_id, []).append(value)

    def add_cpu(self, workload: str, result: Timed) -> None:
        cpu = self.cpu.setdefault(workload, {"client": [], "server": []})
        cpu["client"].append(result.client_cpu)
        if result.server_cpu is not None:
            cpu["server"].append(result.server_cpu)


def measure(quick: bool, runs: int = 3, generator: str = "raw") -> tuple[list[Figure], Collected]:
    """Run everything ``runs`` times; the figures and the raw samples."""
    sizes = Sizes.of(quick)
    values = make_values(_POOL)
    wrk = shutil.which("wrk")
    progress(
        f"H: load generator {generator} asyncio client, {CONCURRENCY} keep-alive connections"
        f" (wrk {'found at ' + wrk + ', not used' if wrk else 'not installed'});"
        f" {sizes.batch1_ops} ops of batch 1, {sizes.batch100_ops} of batch 100,"
        f" {sizes.h2_iterations} H2 commits, {runs} run(s)"
    )
    got = Collected()
    work = Path(tempfile.mkdtemp(prefix="txnstream-bench-h-"))
    try:
        with server_process("h0", h0_argv, "/openapi.json", work / "h0.log") as h0:
            for run in range(runs):
                data = work / f"serve-{run}"
                log = work / f"serve-{run}.log"
                with server_process("txnstream", txnstream_argv(data), "/v1/health", log) as srv:
                    result = asyncio.run(run_h0(h0, sizes, values, generator))
                    got.add("H0-req", result.req_rate)
                    got.add_cpu("H0", result)
                    _report(run, runs, "H0", result)
                    http = asyncio.run(run_h1_http(srv, sizes, values, generator))
                    for name, result in http.items():
                        got.add(f"H1-{name}-msg", result.msg_rate)
                        got.add(f"H1-{name}-req", result.req_rate)
                        got.add_cpu(f"H1-{name}", result)
                        _report(run, runs, f"H1-{name}", result)
                    embedded = asyncio.run(run_h1_embedded(work / f"embedded-{run}", sizes, values))
                    for name, result in embedded.items():
                        got.add(f"H1-embedded-{name}-msg", result.msg_rate)
                        got.add_cpu(f"H1-embedded-{name}", result)
                        _report(run, runs, f"H1-embedded-{name}", result)
                    latencies = asyncio.run(run_h2(srv.url, sizes.h2_iterations, generator))
                    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
                    got.add("H2-p50", p50)
                    got.add("H2-p99", p99)
                    progress(
                        f"H run {run + 1}/{runs} H2: p50 {p50:.2f} ms, p99 {p99:.2f} ms,"
                        f" max {max(latencies):.2f} ms ({len(latencies)} commits)"
                    )
                shutil.rmtree(data, ignore_errors=True)
                shutil.rmtree(work / f"embedded-{run}", ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _figures(got.samples), got


def _report(run: int, runs: int, name: str, result: Timed) -> None:
    server = "" if result.server_cpu is None else f", server {result.server_cpu:.2f} cores"
    progress(
        f"H run {run + 1}/{runs} {name}: {result.msg_rate:,.0f} msg/s,"
        f" {result.req_rate:,.0f} req/s ({result.ops} ops in {result.seconds:.2f} s;"
        f" this process {result.client_cpu:.2f} cores{server})"
    )


def _figures(s: dict[str, list[float]]) -> list[Figure]:
    h0 = "H0-req"
    out = [Figure.of(h0, s[h0], "req/s")]
    for name, _, _ in H1_WORKLOADS:
        embedded = f"H1-embedded-{name}-msg"
        req_target = Target(">=", 0.5, h0) if name == "plain1" else None
        msg_target = Target(">=", 0.7, embedded) if name.endswith("100") else None
        req, msg = f"H1-{name}-req", f"H1-{name}-msg"
        out.append(Figure.of(req, s[req], "req/s", baseline=h0, target=req_target))
        out.append(Figure.of(msg, s[msg], "msg/s", baseline=embedded, target=msg_target))
    for name, _, _ in H1_WORKLOADS:
        out.append(Figure.of(f"H1-embedded-{name}-msg", s[f"H1-embedded-{name}-msg"], "msg/s"))
    out.append(Figure.of("H2-p50", s["H2-p50"], "ms"))
    out.append(Figure.of("H2-p99", s["H2-p99"], "ms", target=Target("<=", 50.0)))
    return out


def as_dicts(
    figures: Sequence[Figure], cpu: dict[str, dict[str, list[float]]]
) -> list[dict[str, Any]]:
    """``bench-results.json``-style figure dicts with the target check and the samples."""
    out = []
    for row in resolve(figures):
        f = row.figure
        item = row.as_json()
        if f.target is not None:
            item["target"] = f.target.describe(f.unit)
            item["target_spec"] = f.target.spec()
            item["actual"] = row.target_measured
            item["paired"] = row.target_paired
            item["met"] = row.target_met
        item["samples"] = [round(v, 3) for v in f.samples]
        item["spread"] = None if f.spread is None else round(f.spread, 3)
        workload = f.id.rsplit("-", 1)[0]
        if workload in cpu:
            item["cpu_cores"] = {
                side: round(statistics.median(v), 2) for side, v in cpu[workload].items() if v
            }
        out.append(item)
    return out


def run(quick: bool) -> list[dict[str, Any]]:
    """Measure H0, H1 and H2 (3 runs, medians); returns the figure dicts."""
    figures, got = measure(quick)
    return as_dicts(figures, got.cpu)


def main(argv: list[str] | None = None) -> int:
    """Run alone: progress on stderr; the table, then the figure dicts as JSON."""
    parser = argparse.ArgumentParser(description="txnstream H0/H1/H2 HTTP benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument(
        "--generator",
        choices=("raw", "httpx"),
        default="raw",
        help="HTTP load generator (httpx: for comparison, it is client-bound)",
    )
    args = parser.parse_args(argv)
    figures, got = measure(args.quick, max(1, args.runs), args.generator)
    print(format_table(resolve(figures)))
    print(json.dumps(as_dicts(figures, got.cpu), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
