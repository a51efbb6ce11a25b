"""The crash drill's workload: transactional producers, an idempotent producer, acking
consumers and the kill schedule, all through the async HTTP client, recorded in a
:class:`History`.

Every request of one transaction goes to the server start that began it, and an ack
to the start that delivered: a later server never sees a request meant for an earlier
one (see ``_server``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from txnstream.api.client import AsyncClient, TxnStreamHttpError, TxnStreamTransportError

from ._errors import DrillError
from ._history import Delivery, History, LogEntry, Pos, Sent, ServerTxn, TxnRun, parse_position
from ._server import DrillServers, ServerChild

TXN_TIMEOUT_MS = 5_000
"""Timeout of the transactions meant to end (commit or abort)."""
ABANDON_TIMEOUT_MS = 1_500
"""Timeout of the transactions left to time out."""
SUB = "drill"
FINAL_TIMEOUT = 60.0
"""Seconds per request of the final read-back (pages of 10,000 entries)."""


def _http(exc: TxnStreamHttpError) -> str:
    return f"HTTP {exc.status} {exc.code}: {exc.message[:200]}"


def _wire(msgs: Sequence[Sent]) -> list[dict[str, Any]]:
    return [{"value": {"id": m.id}} for m in msgs]


FILLER = "drill-disk-filler"
_FULL_AT_MOST = 10.0
"""Seconds a disk-full spell waits, the disk full, for the server to meet it."""
MAX_FILL_BYTES = 4 << 30
"""The disk-full phase fills only a file system at most this large (a tmpfs made for
the drill), never a real disk that others share."""


def fill_file_system(filler: Path) -> None:
    """Write ``filler`` until its file system has not one byte left."""
    stat = os.statvfs(filler.parent)
    if stat.f_blocks * stat.f_frsize > MAX_FILL_BYTES:
        raise DrillError(
            f"--disk-full fills the file system of {filler.parent}, which holds"
            f" {stat.f_blocks * stat.f_frsize} bytes: put DATA on a small one of its own"
            f" (at most {MAX_FILL_BYTES} bytes, e.g. a tmpfs)"
        )
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 1 << 16, 4096, 512):
            chunk = b"\0" * size
            with contextlib.suppress(OSError):
                while os.write(fd, chunk):
                    pass
    finally:
        os.close(fd)


class Workload:
    """Drives the workload and the kills for ``duration`` s, then settles and reads back."""

    def __init__(
        self,
        child: DrillServers,
        history: History,
        *,
        run: str,
        topics: list[str],
        seed: int,
        duration: float,
        kills: int,
        producers: int,
        err: Console,
        disk_full: int = 0,
        stops: int = 0,
    ) -> None:
        self.child = child
        self.history = history
        self.run = run
        self.topics = topics
        self.seed = seed
        self.duration = duration
        self.kill_count = kills
        self.spell_count = disk_full
        self.stop_count = stops
        self.producer_count = producers
        self.err = err
        self.stop = asyncio.Event()
        self.consumers_stop = asyncio.Event()
        self.started = 0.0

    @property
    def _single(self) -> ServerChild:
        """The one server over a data directory (pauses and disk-full spells need it)."""
        if not isinstance(self.child, ServerChild):
            raise DrillError("SIGSTOP pauses and disk-full spells need --data")
        return self.child

    def _note(self, what: str, detail: str) -> None:
        self.history.unexpected.append(f"{what}: {detail}")

    async def _until_up(self) -> AsyncClient | None:
        """The client of the running server; None once the drill is shutting down."""
        while not self.child.up.is_set():
            if self.consumers_stop.is_set():
                return None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.child.up.wait(), 0.5)
        return self.child.client

    # -- setup and workload --------------------------------------------------------

    async def setup(self) -> None:
        """Create the topics and their read_committed subscription."""
        client = self.child.client
        for topic in self.topics:
            try:
                await client.create_topic(topic)
            except TxnStreamHttpError as exc:
                raise DrillError(f"cannot create topic {topic}: {exc}") from None
            try:
                await client.create_subscription(
                    topic,
                    SUB,
                    type="exclusive",
                    initial_position="earliest",
                    isolation="read_committed",
                )
            except TxnStreamHttpError as exc:
                raise DrillError(f"cannot subscribe to {topic}: {exc}") from None

    async def _txn_worker(self, worker: int) -> None:
        """Begin, send 1-5 messages to 1-2 topics, then commit/abort/abandon; repeat."""
        rng = random.Random(f"{self.seed}:txn:{worker}")
        ordinal = 0
        while not self.stop.is_set():
            client = await self._until_up()
            if client is None:
                return
            ordinal += 1
            roll = rng.random()
            plan = "commit" if roll < 0.7 else "abort" if roll < 0.9 else "abandon"
            chosen = rng.sample(self.topics, min(len(self.topics), rng.randint(1, 2)))
            count = rng.randint(1, 5)
            key = f"{self.run}.w{worker}.{ordinal}"
            run = TxnRun(key, worker, ordinal, plan)
            groups: dict[str, list[Sent]] = defaultdict(list)
            for index in range(count):
                topic = chosen[index % len(chosen)]
                groups[topic].append(
                    Sent(f"{key}.{index}", topic, f"w{worker}", (ordinal, index), run)
                )
            await self._one_txn(client, run, groups)
            await asyncio.sleep(rng.uniform(0.0, 0.02))

    async def _one_txn(
        self, client: AsyncClient, run: TxnRun, groups: dict[str, list[Sent]]
    ) -> None:
        """One transaction, every request to the server start that began it."""
        timeout_ms = ABANDON_TIMEOUT_MS if run.plan == "abandon" else TXN_TIMEOUT_MS
        kills = self.history.kills
        try:
            began = await client.begin(timeout_ms=timeout_ms, label=run.key)
        except TxnStreamTransportError:
            self.history.begin_failures += 1
            return
        except TxnStreamHttpError as exc:
            self._note("begin", _http(exc))
            return
        run.txn = txn = str(began["txn"])
        self.history.txns.append(run)
        for topic, msgs in groups.items():
            for msg in msgs:
                run.messages.append(msg)
                self.history.messages[msg.id] = msg
            try:
                await client.produce(topic, _wire(msgs), txn=txn)
            except TxnStreamTransportError:
                run.reason = "send died with the server"
                return
            except TxnStreamHttpError as exc:
                if exc.status == 507:  # a disk-full spell: give the transaction up
                    run.reason = "send refused (507)"
                    with contextlib.suppress(TxnStreamHttpError):
                        await client.abort(txn)
                        run.outcome = "aborted"
                    return
                if exc.status == 404 and self.history.kills > kills:
                    # A begin's row becomes durable with the transaction's first entry: a
                    # kill -9 of the active in between leaves the new active without it.
                    run.reason = "begin died with the server (404)"
                    return
                if exc.status != 409:
                    self._note("transactional send", _http(exc))
                run.reason = f"send rejected ({exc.status})"
                return
        if run.plan == "abandon":
            run.reason = "left to time out"
            return
        try:
            await (client.commit(txn) if run.plan == "commit" else client.abort(txn))
        except TxnStreamTransportError as exc:
            if not exc.sent:
                run.reason = f"{run.plan} not sent (server down)"
            elif run.plan == "commit":
                run.outcome, run.reason = "unknown", "commit died with the server"
            else:
                run.reason = "abort died with the server"
            return
        except TxnStreamHttpError as exc:
            if exc.status == 503 and run.plan == "commit":
                # An active that lost its lease or its storage while this commit was in
                # flight answers 503 without knowing the outcome: the decision may be
                # durable (the successor then finishes it). In doubt, as a lost answer.
                run.outcome, run.reason = "unknown", "commit answered 503 (in doubt)"
                return
            if exc.status != 409:
                self._note(run.plan, _http(exc))
            run.reason = f"{run.plan} rejected ({exc.status})"
            return
        run.outcome = "committed" if run.plan == "commit" else "aborted"

    async def _idempotent_producer(self, deadline: float) -> None:
        """Plain batches with producer + sequence, sent until one answer says 200.

        A batch whose request failed is resent as is after the restart. After every
        restart the last acknowledged batch is also resent once, as a client that missed
        the answer would: the server must say ``duplicate`` and append nothing.
        """
        h = self.history
        rng = random.Random(f"{self.seed}:idem")
        producer = f"{self.run}-idem"
        sequences = [0] * len(self.topics)
        last_ok: tuple[str, list[dict[str, Any]], int] | None = None
        seen = self.child.client
        while not self.stop.is_set():
            h.idem_batches += 1
            which = h.idem_batches % len(self.topics)
            topic, sequence = self.topics[which], sequences[which]
            msgs = [
                Sent(f"{producer}.{which}.{sequence + i}", topic, "idem", (sequence + i, 0))
                for i in range(rng.randint(1, 3))
            ]
            for msg in msgs:
                h.messages[msg.id] = msg
            wire = _wire(msgs)
            while time.monotonic() < deadline:
                client = await self._until_up()
                if client is None:
                    return
                try:
                    if last_ok is not None and client is not seen:
                        seen = client
                        await self._resend(client, producer, *last_ok)
                    answer = await client.produce(topic, wire, producer=producer, sequence=sequence)
                except TxnStreamTransportError:
                    h.idem_retries += 1
                    await asyncio.sleep(0.05)
                    continue
                except TxnStreamHttpError as exc:
                    if exc.status == 507:  # a disk-full spell: the same batch again
                        await asyncio.sleep(0.05)
                        continue
                    self._note("idempotent send", _http(exc))
                    break
                for msg in msgs:
                    msg.committed = True
                last_ok = (topic, wire, sequence)
                if answer.get("duplicate"):
                    h.idem_duplicates += 1
                break
            sequences[which] = sequence + len(msgs)
            await asyncio.sleep(rng.uniform(0.002, 0.02))

    async def _resend(
        self,
        client: AsyncClient,
        producer: str,
        topic: str,
        wire: list[dict[str, Any]],
        sequence: int,
    ) -> None:
        """Resend an acknowledged idempotent batch: it must come back as a duplicate.

        A transport error propagates: the caller retries the whole step.
        """
        what = "resent idempotent batch not a duplicate"
        try:
            answer = await client.produce(topic, wire, producer=producer, sequence=sequence)
        except TxnStreamTransportError:
            raise
        except TxnStreamHttpError as exc:
            self._note(what, _http(exc))
            return
        if answer.get("duplicate") is True:
            self.history.idem_duplicates += 1
        else:
            self._note(what, f"answered {answer}")

    async def _consumer(self, topic: str) -> None:
        """Long-poll the read_committed subscription of ``topic`` and ack what arrives.

        A session is one server start: the ack goes to the server that delivered.
        """
        h = self.history
        last: tuple[str, Pos] | None = None
        while not self.consumers_stop.is_set():
            client = await self._until_up()
            if client is None:
                return
            try:
                messages = await client.receive(topic, SUB, consumer="c1", max=500, wait_ms=1000)
            except TxnStreamTransportError:
                await asyncio.sleep(0.05)
                continue
            except TxnStreamHttpError as exc:
                self._note("receive", _http(exc))
                await asyncio.sleep(0.2)
                continue
            base = self.child.session(client)
            got: list[Delivery] = []
            for message in messages:
                position = parse_position(message["position"])
                value = message.get("value")
                msg_id = value.get("id") if isinstance(value, dict) else None
                if not isinstance(msg_id, str):
                    h.unexpected.append(f"{topic}: foreign message at {message['position']}")
                    continue
                if last is not None and last[0] == base and position <= last[1]:
                    h.order_violations.append(f"{topic}: {message['position']} after {last[1]}")
                last = (base, position)
                redelivery_count = int(message.get("redelivery_count") or 0)
                delivery = Delivery(topic, base, position, msg_id, h.tick(), redelivery_count)
                h.deliveries.append(delivery)
                got.append(delivery)
            if not got:
                continue
            positions = [f"{d.position[0]}:{d.position[1]}" for d in got]
            try:
                await client.ack(topic, SUB, positions)
            except TxnStreamTransportError:
                continue
            except TxnStreamHttpError as exc:
                self._note("ack", _http(exc))
                continue
            clock = h.tick()
            for delivery in got:
                h.acked.setdefault(delivery.id, clock)

    async def _chaos(self, rng: random.Random) -> None:
        """The kills over the duration, then the SIGSTOP and disk-full phases."""
        await self._kills(rng)
        for _ in range(self.stop_count):
            await asyncio.sleep(rng.uniform(0.3, 0.8))
            self._single.pause()  # requests wait (the client's timeout is far longer)
            self.history.stops += 1
            await asyncio.sleep(rng.uniform(1.0, 2.5))
            self._single.resume()
        for spell in range(self.spell_count):
            await self._disk_full(rng, reserve=spell % 2 == 0)

    async def _disk_full(self, rng: random.Random, *, reserve: bool) -> None:
        """Fill DATA's file system to the last byte for a second or two, then free it.

        Odd spells run the server without a reserve (``--min-free-bytes 0``: its flushes
        meet the full disk), even ones with its default; the server is restarted (a
        SIGKILL) when that changes. The disk stays full until health says ``degraded``
        (up to :data:`_FULL_AT_MOST` s: it may stay ``ok`` with the reserve untouched,
        or while no write needed a new block); once freed it must be ``ok`` again
        within 30 s with no restart.
        """
        wanted = None if reserve else 0
        child = self._single
        if child.min_free_bytes != wanted:
            child.min_free_bytes = wanted
            child.kill()
            self.history.restart_seconds.append(await child.start())
        await asyncio.sleep(rng.uniform(0.3, 0.8))  # the workload writes on
        filler = child.data / FILLER
        await asyncio.to_thread(fill_file_system, filler)
        try:
            # Full until the server meets it (a write of the workload's needs a block the
            # disk no longer has: its WAL may have room a while longer), at most
            # _FULL_AT_MOST s; then a moment more, full.
            await asyncio.sleep(rng.uniform(0.5, 1.0))
            until = time.monotonic() + _FULL_AT_MOST
            status = await self._health()
            while status != "degraded" and time.monotonic() < until:
                await asyncio.sleep(0.1)
                status = await self._health()
            await asyncio.sleep(rng.uniform(0.5, 1.0))
        finally:
            await asyncio.to_thread(filler.unlink, missing_ok=True)
        freed = time.monotonic()
        while (now := await self._health()) != "ok":
            if time.monotonic() - freed > 30:
                self._note("disk-full spell", f"health {now!r} 30 s after the disk was freed")
                break
            await asyncio.sleep(0.05)
        label = "with the reserve" if reserve else "without a reserve"
        self.history.spells.append(
            f"{label}: health {status} while full, ok {time.monotonic() - freed:.2f} s after"
        )
        if status not in ("degraded", "ok"):
            self._note("disk-full spell", f"health {status!r} while the disk was full")

    async def _health(self) -> str:
        try:
            return str((await self.child.client.health()).get("status"))
        except TxnStreamHttpError as exc:
            return f"error {exc.status}"

    async def _kills(self, rng: random.Random) -> None:
        """``kills`` crashes spread over the duration (see :meth:`DrillServers.crash`)."""
        if self.kill_count <= 0:
            return
        slot = self.duration / self.kill_count
        schedule = [slot * k + rng.uniform(0.35, 0.95) * slot for k in range(self.kill_count)]
        restarted = time.monotonic()
        for at in schedule:
            now = time.monotonic()
            wait = max(self.started + at - now, restarted + 0.5 - now, 0.0)
            await asyncio.sleep(wait)
            await self.child.crash(self.history, rng)
            restarted = time.monotonic()

    # -- the run -------------------------------------------------------------------

    async def drive(self) -> None:
        """Workload and kills for the duration, then stop, settle and read everything back."""
        h = self.history
        rng = random.Random(self.seed)
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            console=self.err,
            transient=True,
        )
        tasks: list[asyncio.Task[None]] = []
        with progress:
            bar = progress.add_task("workload", total=self.duration, info="")

            def show(description: str) -> None:
                progress.update(
                    bar,
                    description=description,
                    completed=min(time.monotonic() - self.started, self.duration),
                    info=(
                        f"kills {h.kills}/{self.kill_count}  txns {len(h.txns)}  "
                        f"committed msgs {h.committed_count()}  "
                        f"deliveries {len(h.deliveries)}"
                    ),
                )

            self.started = time.monotonic()
            producer_deadline = self.started + self.duration + 90
            consumers = [asyncio.create_task(self._consumer(t)) for t in self.topics]
            producers = [
                asyncio.create_task(self._txn_worker(w)) for w in range(self.producer_count)
            ]
            producers.append(asyncio.create_task(self._idempotent_producer(producer_deadline)))
            chaos = asyncio.create_task(self._chaos(rng))
            tasks = [*consumers, *producers, chaos]
            try:
                while time.monotonic() - self.started < self.duration or not chaos.done():
                    if chaos.done() and chaos.exception() is not None:
                        break
                    if self.child.up.is_set() and not self.child.alive():
                        raise DrillError(f"the server died on its own; see {self.child.log_path}")
                    show("workload + kills")
                    await asyncio.sleep(0.2)
                await chaos  # re-raises a failed restart
                self.stop.set()
                show("stopping producers")
                await self._bounded(producers, 60.0, "producers")
                show("waiting for abandoned transactions to time out")
                await self._wait_decided()
                show("waiting for consumers to drain")
                await self._wait_drained()
                self.consumers_stop.set()
                await self._bounded(consumers, 20.0, "consumers")
                show("final read_committed fetch")
                await self._final_fetch()
            finally:
                self.stop.set()
                self.consumers_stop.set()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _bounded(self, tasks: list[asyncio.Task[None]], timeout: float, what: str) -> None:
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            raise DrillError(f"{len(pending)} {what} did not stop within {timeout:.0f} s")
        for task in done:
            if task.exception() is not None:
                raise DrillError(f"a {what[:-1]} task failed: {task.exception()!r}")

    async def _wait_decided(self) -> None:
        """Until no transaction of this run is open (abandoned ones time out)."""
        deadline = time.monotonic() + max(TXN_TIMEOUT_MS, ABANDON_TIMEOUT_MS) / 1000 + 20
        while True:
            with contextlib.suppress(TxnStreamHttpError):
                listed = await self.child.client.list_transactions(
                    state="open", label_prefix=self.run
                )
                self.history.still_open = [t["txn"] for t in listed]
                if not self.history.still_open:
                    return
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.25)

    async def _wait_drained(self) -> None:
        """Until every subscription's backlog is 0 (all deliverable entries acked)."""
        backlog_left = self.history.backlog_left
        deadline = time.monotonic() + 30 + len(self.history.messages) / 2000
        while True:
            for topic in self.topics:
                with contextlib.suppress(TxnStreamHttpError):
                    stats = await self.child.client.stats(topic)
                    backlog_left[topic] = int(stats["subscriptions"][SUB]["backlog"])
            if backlog_left and not any(backlog_left.values()):
                return
            if time.monotonic() > deadline:
                return
            await asyncio.sleep(0.25)

    async def _final_fetch(self) -> None:
        """Every topic from earliest, read_committed, aborted data dropped; and txn labels."""
        deadline = time.monotonic() + 120
        urls = self.child.client.urls
        async with AsyncClient(urls, timeout=FINAL_TIMEOUT, trust_env=False) as reader:
            for topic in self.topics:
                self.history.log_entries[topic] = await self._read_topic(reader, topic, deadline)
            try:
                listed = await reader.list_transactions(label_prefix=self.run)
            except TxnStreamHttpError as exc:
                raise DrillError(f"listing transactions: {_http(exc)}") from None
        self.history.server_txns = {t["txn"]: ServerTxn(t.get("label"), t["state"]) for t in listed}

    async def _read_topic(self, reader: AsyncClient, topic: str, deadline: float) -> list[LogEntry]:
        kept: list[LogEntry] = []
        aborted: set[str] = set()
        start = "earliest"
        while time.monotonic() < deadline:
            try:
                page = await reader.fetch(topic, start, max=10_000, isolation="read_committed")
            except TxnStreamHttpError as exc:
                raise DrillError(f"final fetch of {topic}: {_http(exc)}") from None
            aborted.update(a["txn"] for a in page["aborted"])
            for entry in page["entries"]:
                if entry["kind"] != "data" or entry.get("txn") in aborted:
                    continue
                value = entry.get("value")
                msg_id = value.get("id") if isinstance(value, dict) else None
                position = parse_position(entry["position"])
                kept.append(LogEntry(position, str(msg_id), entry.get("txn")))
            if not page["entries"]:
                return kept
            start = page["next"]
        raise DrillError("the final fetch overran its time budget")
