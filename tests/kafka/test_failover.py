"""Kafka clients and several servers on one PostgreSQL store (issues 28 and 29): two real
``serve --store URL --kafka-listen`` processes, a real PostgreSQL cluster, confluent-kafka
clients; the active killed with ``kill -9`` by pid.

A standby's listener names the active (Metadata, FindCoordinator) and refuses the rest
with the errors that send clients there; a client bootstrapped with both addresses keeps
producing across a failover (idempotent: nothing twice; transactional: with its epoch,
its open transaction resumed at the new active, as across a Kafka transaction
coordinator failover), a zombie (an older epoch) stays fenced, and a read_committed
consumer reads every acknowledged message exactly once, in order, and nothing aborted."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceResponse,
)
from kafka_clients import consume
from kafka_support import KafkaWire, drop_refused, produce_request, record_batch
from serve_support import StoreServer
from support import free_ports, wait_for, wait_until

from txnstream.api.kafka._standby import node_id_of

pytestmark = pytest.mark.timeout(180)

LEASE = 1.0
"""The servers' --lease-timeout (s): short, so the test is."""
TAKEOVER = LEASE + 8.0
"""Seconds a takeover may take on a loaded 2-core machine."""


class KafkaServer(StoreServer):
    """A :class:`StoreServer` with ``--kafka-listen`` on a second free loopback port."""

    def __init__(self, store: str, log: Path) -> None:
        port, self.kafka_port = free_ports(2)
        self.kafka = f"127.0.0.1:{self.kafka_port}"
        super().__init__(store, log, "--kafka-listen", self.kafka, lease=LEASE, port=port)

    @property
    def node_id(self) -> int:
        return node_id_of(self.kafka)


@pytest.fixture
def pair(pg_url: str, tmp_path: Path) -> Iterator[tuple[KafkaServer, KafkaServer]]:
    """An active (first) and a standby (second), both with a Kafka listener."""
    servers: list[KafkaServer] = []
    try:
        a = KafkaServer(pg_url, tmp_path / "a.log")
        servers.append(a)
        a.wait_status("ok", 30)
        b = KafkaServer(pg_url, tmp_path / "b.log")
        servers.append(b)
        b.wait_status("standby", 30)
        yield a, b
    finally:
        for server in servers:
            server.stop()
        for server in servers:
            assert "Traceback" not in server.log.read_text(), server.log.read_text()


def _create(server: KafkaServer, *topics: str) -> None:
    for topic in topics:
        answer = httpx.put(f"{server.url}/v1/topics/{topic}", timeout=10, trust_env=False)
        assert answer.status_code in (200, 201), answer.text


async def test_a_standby_names_the_active_and_a_client_of_the_standby_alone_produces_there(
    pair: tuple[KafkaServer, KafkaServer],
) -> None:
    from confluent_kafka import Producer

    a, b = pair
    _create(a, "orders")
    wire = await KafkaWire.open(b.kafka_port)
    try:
        meta = await wire.call(MetadataRequest(topics=None), MetadataResponse, 8)
        # every server is a broker (a client that knows them all can always ask one)
        assert sorted((x.node_id, x.host, x.port) for x in meta.brokers) == sorted(
            [(a.node_id, "127.0.0.1", a.kafka_port), (b.node_id, "127.0.0.1", b.kafka_port)]
        )
        assert meta.controller_id == a.node_id != b.node_id
        assert [(t.name, [p.leader_id for p in t.partitions]) for t in meta.topics] == [
            ("orders", [a.node_id])
        ]
        for key_type in (0, 1):  # a group's coordinator, a transactional id's
            found = await wire.call(
                FindCoordinatorRequest(key="k", key_type=key_type), FindCoordinatorResponse, 1
            )
            assert (found.error_code, found.node_id, found.port) == (0, a.node_id, a.kafka_port)
        init = await wire.call(
            InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=10_000),
            InitProducerIdResponse,
            1,
        )
        assert init.error_code == 16  # NOT_COORDINATOR: go to the one FindCoordinator names
        produced = await wire.call(
            produce_request("orders", record_batch(-1, -1, -1, [b"to-the-standby"])),
            ProduceResponse,
            8,
        )
        [part] = produced.responses[0].partition_responses
        assert part.error_code == 6  # NOT_LEADER_OR_FOLLOWER: refresh metadata, go there
    finally:
        await wire.close()
    # a client that knows only the standby is sent to the active, and its produce lands
    producer = Producer({"bootstrap.servers": b.kafka, "enable.idempotence": True, "acks": "all"})
    for i in range(5):
        producer.produce("orders", value=f"m{i}".encode())
    assert producer.flush(30) == 0
    async with httpx.AsyncClient(trust_env=False) as http:
        stats = (await http.get(f"{a.url}/v1/topics/orders/stats", timeout=10)).json()
    assert stats["entries"] == 5
    values = await consume("confluent-kafka", a.kafka, "orders", "read_committed", b"m4")
    assert values == [f"m{i}".encode() for i in range(5)]


class _Idempotent(threading.Thread):
    """An idempotent producer (acks=all) of ``i0, i1, ...`` until stopped, then ``end``;
    records what was acknowledged and what failed."""

    def __init__(self, bootstrap: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.stop = bootstrap, stop
        self.acked: list[bytes] = []
        self.failed: list[bytes] = []
        self.error: BaseException | None = None

    def _delivered(self, err: Any, message: Any) -> None:
        (self.failed if err is not None else self.acked).append(message.value())

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "message.timeout.ms": 60_000,
                    "reconnect.backoff.max.ms": 500,
                }
            )
            n = 0
            while not self.stop.is_set():
                producer.produce("plain", value=f"i{n}".encode(), on_delivery=self._delivered)
                n += 1
                producer.poll(0.005)
            producer.produce("plain", value=b"end", on_delivery=self._delivered)
            assert producer.flush(60) == 0, "messages left unsent"
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


class _Transactional(threading.Thread):
    """A transactional producer committing transactions of 3 (``t<k>.<i>``) until
    stopped, then a last one (``end``), handling errors as a Kafka application must:
    retriable: retry; abortable: abort (the transaction is then aborted); fatal (fenced):
    a new producer, initialised again (the transaction then is in doubt: committed or
    not, all or nothing). A failover is none of these: the producer goes on."""

    def __init__(self, bootstrap: str, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.stop = bootstrap, stop
        self.committed: list[int] = []
        self.aborted: list[int] = []
        self.in_doubt: list[int] = []
        self.restarts = 0
        self.error: BaseException | None = None

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": "failover-txn",
                "linger.ms": 5,
                "reconnect.backoff.max.ms": 500,
            }
        )
        producer.init_transactions(60)
        return producer

    def _one(self, producer: Any, k: int, values: list[bytes]) -> str:
        """Run transaction ``k``: "committed", "aborted" or "fenced"."""
        from confluent_kafka import KafkaException

        try:
            producer.begin_transaction()
            for value in values:
                producer.produce("txns", value=value)
            assert producer.flush(60) == 0
            while True:
                try:
                    producer.commit_transaction(60)
                    return "committed"
                except KafkaException as exc:
                    if not exc.args[0].retriable():
                        raise
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal():
                return "fenced"
            if error.txn_requires_abort():
                try:
                    producer.abort_transaction(60)
                except KafkaException as again:
                    if again.args[0].fatal():
                        return "fenced"
                    raise
                return "aborted"
            raise

    def run(self) -> None:
        try:
            producer = self._producer()
            k = 0
            last = False
            while not last:
                last = self.stop.is_set()
                values = [b"end"] if last else [f"t{k}.{i}".encode() for i in range(3)]
                outcome = self._one(producer, k, values)
                if outcome == "committed":
                    self.committed.append(k)
                elif outcome == "aborted":
                    self.aborted.append(k)
                else:  # fenced: initialise a new producer, as the client must
                    self.in_doubt.append(k)
                    self.restarts += 1
                    producer = self._producer()
                    last = False  # (the last one again, until it commits)
                if last and outcome != "committed":
                    last = False
                k += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def _wait(condition: Any, timeout: float, what: str) -> None:
    wait_for(condition, timeout, what, interval=0.05)


async def _wait_brokers(server: KafkaServer, nodes: set[int]) -> None:
    """Wait (bounded) until ``server``'s Metadata lists exactly the brokers ``nodes``."""
    wire = await KafkaWire.open(server.kafka_port)

    async def listed() -> bool:
        meta = await wire.call(MetadataRequest(topics=None), MetadataResponse, 8)
        return {broker.node_id for broker in meta.brokers} == nodes

    try:
        await wait_until(listed, 30, f"{server.kafka} to list the brokers {nodes}", 0.05)
    finally:
        await wire.close()


async def test_kill_9_of_the_active_kafka_producers_go_on_and_nothing_is_lost_or_doubled(
    pair: tuple[KafkaServer, KafkaServer],
) -> None:
    a, b = pair
    _create(a, "plain", "txns")
    # The idempotent producer knows only the active's address: it learns the standby
    # from Metadata, which lists every server sharing the store (once the active read
    # its row). The transactional one is given both: fenced, it starts a new producer,
    # and a new client bootstrapped with only a dead server's address reaches nothing.
    await _wait_brokers(a, {a.node_id, b.node_id})
    stop = threading.Event()
    plain = _Idempotent(a.kafka, stop)
    txns = _Transactional(f"{a.kafka},{b.kafka}", stop)
    plain.start()
    txns.start()
    try:
        _wait(lambda: len(plain.acked) >= 200 and len(txns.committed) >= 5, 60, "a load")
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=10)
        acked, committed = len(plain.acked), len(txns.committed)
        b.wait_status("ok", TAKEOVER)
        # both go on past the failover
        _wait(
            lambda: len(plain.acked) >= acked + 200 and len(txns.committed) >= committed + 5,
            90,
            "the producers to go on at the new active"
            f" (acknowledged {acked} -> {len(plain.acked)}, committed {committed} ->"
            f" {len(txns.committed)}: each must grow by 200 and 5)",
        )
    finally:
        stop.set()
        plain.join(90)
        txns.join(90)
    assert not plain.is_alive()
    assert not txns.is_alive()
    assert plain.error is None, plain.error
    assert txns.error is None, txns.error
    assert plain.failed == []  # every message acknowledged (retried across the failover)

    # read_committed, from the new active only
    log = await consume("confluent-kafka", b.kafka, "plain", "read_committed", b"end")
    assert log == plain.acked  # each once, in the order produced (i0, i1, ...)
    assert log == [*sorted(log[:-1], key=lambda v: int(v[1:])), b"end"]

    # the failover is invisible to the transactional producer: never fenced, never in doubt
    assert (txns.restarts, txns.in_doubt) == (0, [])
    log = await consume("confluent-kafka", b.kafka, "txns", "read_committed", b"end")
    assert len(log) == len(set(log)), "a message twice"
    seen = [int(v.split(b".")[0][1:]) for v in log if v != b"end"]
    assert seen == sorted(seen)  # transactions in order, each one's messages together
    for k in txns.committed:
        if k != txns.committed[-1]:  # (the last one is "end")
            assert seen.count(k) == 3, f"committed transaction {k} not read exactly once"
    assert not set(seen) & set(txns.aborted), "an aborted transaction was read"
    assert set(seen) <= set(txns.committed) | set(txns.in_doubt)
    for k in txns.in_doubt:
        assert seen.count(k) in (0, 3)  # all or nothing


def _txn_settings(bootstrap: str, transactional_id: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "linger.ms": 5,
        "message.timeout.ms": 60_000,
        "transaction.timeout.ms": 60_000,
        "reconnect.backoff.max.ms": 500,
    }


def _commit(producer: Any) -> None:
    """commit_transaction, retrying what is retriable: any other error fails the test
    (an abortable or fatal one is what a failover must not cause)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + 60
    while True:
        try:
            producer.commit_transaction(60)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or time.monotonic() > deadline:
                raise


async def test_a_transaction_open_when_the_active_dies_goes_on_and_commits_at_the_new_active(
    pair: tuple[KafkaServer, KafkaServer],
) -> None:
    """The transaction coordinator's state (epoch, open transaction) is the store's: a
    producer with a transaction open, records acknowledged and more in flight, when the
    active is killed goes on at the new active with the same producer and epoch, and
    commits; the records of an aborted transaction before it are never read, and every
    committed one is read once."""
    a, b = pair
    _create(a, "resumed")
    from confluent_kafka import Producer

    producer = Producer(_txn_settings(f"{a.kafka},{b.kafka}", "resumer"))
    await asyncio.to_thread(producer.init_transactions, 60)

    def before_the_kill() -> None:
        producer.begin_transaction()
        producer.produce("resumed", b"c0")
        _commit(producer)
        producer.begin_transaction()
        producer.produce("resumed", b"aborted")
        assert producer.flush(60) == 0
        producer.abort_transaction(60)
        producer.begin_transaction()
        for i in range(5):
            producer.produce("resumed", f"o{i}".encode())
        assert producer.flush(60) == 0  # acknowledged
        for i in range(5, 10):
            producer.produce("resumed", f"o{i}".encode())  # (some in flight at the kill)
        producer.poll(0)

    await asyncio.to_thread(before_the_kill)
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    b.wait_status("ok", TAKEOVER)

    def after_the_takeover() -> None:
        for i in range(10, 15):
            producer.produce("resumed", f"o{i}".encode())
        _commit(producer)  # the same producer: no abortable or fatal error
        producer.begin_transaction()
        producer.produce("resumed", b"end")
        _commit(producer)

    await asyncio.to_thread(after_the_takeover)
    log = await consume("confluent-kafka", b.kafka, "resumed", "read_committed", b"end")
    assert log == [b"c0", *(f"o{i}".encode() for i in range(15)), b"end"]


async def test_a_zombie_initialised_before_a_newer_producer_stays_fenced_after_a_failover(
    pair: tuple[KafkaServer, KafkaServer],
) -> None:
    """Epochs are durable: two InitProducerIds at the active, then a failover; the new
    active goes on from the newest epoch (one more bump gives the next one, never a
    random one), the zombie's older epoch is refused every time, and the newer
    producer goes on."""
    from confluent_kafka import KafkaException, Producer

    a, b = pair
    _create(a, "fenced")
    wire = await KafkaWire.open(a.kafka_port)
    try:
        init = InitProducerIdRequest(transactional_id="probe", transaction_timeout_ms=10_000)
        first = await wire.call(init, InitProducerIdResponse, 1)
        second = await wire.call(init, InitProducerIdResponse, 1)
        assert (first.error_code, second.error_code) == (0, 0)
        assert second.producer_id == first.producer_id
        assert second.producer_epoch == first.producer_epoch + 1
    finally:
        await wire.close()
    bootstrap = f"{a.kafka},{b.kafka}"
    zombie = Producer(_txn_settings(bootstrap, "zombie"))
    await asyncio.to_thread(zombie.init_transactions, 60)
    producer = Producer(_txn_settings(bootstrap, "zombie"))
    await asyncio.to_thread(producer.init_transactions, 60)  # newer: the first is a zombie

    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    b.wait_status("ok", TAKEOVER)

    wire = await KafkaWire.open(b.kafka_port)
    try:
        for older in (first.producer_epoch, second.producer_epoch - 1):
            zombie_end = await wire.call(
                EndTxnRequest(
                    transactional_id="probe",
                    producer_id=first.producer_id,
                    producer_epoch=older,
                    committed=True,
                ),
                EndTxnResponse,
                1,
            )
            assert zombie_end.error_code == 47  # INVALID_PRODUCER_EPOCH: fenced, always
        third = await wire.call(init, InitProducerIdResponse, 1)
        assert (third.error_code, third.producer_id) == (0, first.producer_id)
        assert third.producer_epoch == second.producer_epoch + 1  # monotonic, not random
    finally:
        await wire.close()

    def zombie_transaction() -> KafkaException:
        zombie.begin_transaction()
        zombie.produce("fenced", b"zombie")
        try:
            zombie.commit_transaction(60)
        except KafkaException as exc:
            return exc
        raise AssertionError("the zombie committed")

    refused = await asyncio.to_thread(zombie_transaction)
    assert refused.args[0].fatal(), refused.args[0]
    drop_refused(zombie)

    def newer_transaction() -> None:
        producer.begin_transaction()
        producer.produce("fenced", b"end")
        _commit(producer)

    await asyncio.to_thread(newer_transaction)
    log = await consume("confluent-kafka", b.kafka, "fenced", "read_committed", b"end")
    assert log == [b"end"]
    async with httpx.AsyncClient(trust_env=False) as http:
        stats = (await http.get(f"{b.url}/v1/topics/fenced/stats", timeout=10)).json()
    assert stats["entries"] == 2  # "end" and its commit marker: nothing of the zombie


async def test_a_paused_active_stops_leading_and_stores_nothing_after_the_takeover(
    pair: tuple[KafkaServer, KafkaServer],
) -> None:
    """SIGSTOP the active for twice the lease timeout with a produce sent to it: the
    standby takes over; when the old active wakes, the produce is refused (never
    stored), and its listener names the new active."""
    a, b = pair
    _create(a, "late")
    wire = await KafkaWire.open(a.kafka_port)
    try:
        a.proc.send_signal(signal.SIGSTOP)
        paused = time.monotonic()
        request = produce_request("late", record_batch(-1, -1, -1, [b"from-the-old-active"]))
        request.API_VERSION = 8
        request.with_header(correlation_id=7, client_id="paused-test")
        await wire.send_raw(bytes(request.encode(header=True, framed=True)))
        b.wait_status("ok", TAKEOVER)
        await asyncio.sleep(max(0.0, paused + 2 * LEASE - time.monotonic()))  # (2 s at most)
        a.proc.send_signal(signal.SIGCONT)
        frame = await wire.read_frame(timeout=30)
        answer = ProduceResponse.decode(frame[4:], version=8)
        [part] = answer.responses[0].partition_responses
        # never acknowledged: fenced mid-write (NOT_LEADER_OR_FOLLOWER), or read only once
        # it stepped down, before it saw the new active (LEADER_NOT_AVAILABLE): the client
        # retries at the active either way
        assert part.error_code in (5, 6)
        a.wait_status("standby", 30)
        meta = await wire.call(MetadataRequest(topics=None), MetadataResponse, 8)
        assert sorted((x.node_id, x.port) for x in meta.brokers) == sorted(
            [(a.node_id, a.kafka_port), (b.node_id, b.kafka_port)]
        )
        assert [p.leader_id for t in meta.topics for p in t.partitions] == [b.node_id]
    finally:
        a.proc.send_signal(signal.SIGCONT)
        await wire.close()
    async with httpx.AsyncClient(trust_env=False) as http:
        stats = (await http.get(f"{b.url}/v1/topics/late/stats", timeout=10)).json()
    assert stats["entries"] == 0
