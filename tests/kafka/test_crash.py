"""A Kafka transaction whose server (the SQLite store) is killed (``kill -9``) and
restarted: the transactional id's epoch is durable, so the producer goes on with it, as a
Kafka producer does across a transaction coordinator failover, and a zombie with an older
epoch is refused. A real ``serve`` process and confluent-kafka."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from kafka_clients import TIMEOUT
from kafka_support import drop_refused
from support import free_ports, wait_for

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(150)


class _Server:
    """``serve`` with HTTP and the Kafka listener on fixed ports, restartable."""

    def __init__(self, data: Path, log: Path) -> None:
        self.data, self.log = data, log
        self.http_port, self.kafka_port = free_ports(2)
        self.url = f"http://127.0.0.1:{self.http_port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "txnstream", "serve", "--data", str(self.data)),
                    *("--port", str(self.http_port)),
                    *("--kafka-listen", f"127.0.0.1:{self.kafka_port}"),
                ],
                cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc = self.proc
        wait_for(lambda: proc.poll() is not None or self._healthy(), 30, "the server")
        assert proc.poll() is None, self.log.read_text()

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/v1/health", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    def get(self, path: str) -> object:
        response = httpx.get(f"{self.url}{path}", timeout=10)
        response.raise_for_status()
        return response.json()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        self.proc.wait(timeout=40)


def _read_committed(bootstrap: str, until: bytes) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.assign([TopicPartition("t", 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while until not in values:
            assert time.monotonic() < deadline, f"timed out; got {values}"
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def test_a_crash_after_add_partitions_the_producer_goes_on_and_commits_once(
    tmp_path: Path,
) -> None:
    """Killed after AddPartitionsToTxn was answered and before the records were produced:
    the empty engine transaction did not outlive the crash (nothing of it was durable,
    nothing acknowledged), so the restarted server begins it again at the producer's
    Produce, and the same producer commits it: no fatal error, no new producer, its
    record read once."""
    from confluent_kafka import Producer

    server = _Server(tmp_path / "data", tmp_path / "serve.log")
    server.start()
    try:
        assert httpx.put(f"{server.url}/v1/topics/t", timeout=10).status_code in (200, 201)
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{server.kafka_port}",
                "transactional.id": "crashy",
                # records wait for the commit's flush: AddPartitionsToTxn goes out at once,
                # the Produce only once commit_transaction() flushes
                "linger.ms": 30_000,
                "message.timeout.ms": 60_000,
                "transaction.timeout.ms": 60_000,
            }
        )
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce("t", b"before")
        producer.commit_transaction(TIMEOUT)

        producer.begin_transaction()
        producer.produce("t", b"resumed")

        def added() -> bool:  # AddPartitionsToTxn answered: the engine transaction is open
            return bool(server.get("/v1/transactions?state=open")["transactions"])  # type: ignore[index]

        wait_for(added, TIMEOUT, "AddPartitionsToTxn to open the transaction")
        server.kill()
        server.start()
        assert server.get("/v1/transactions?state=open") == {"transactions": []}

        producer.commit_transaction(TIMEOUT)  # the same producer: no error at all
        producer.begin_transaction()
        producer.produce("t", b"after")
        producer.commit_transaction(TIMEOUT)

        bootstrap = f"127.0.0.1:{server.kafka_port}"
        assert _read_committed(bootstrap, b"after") == [b"before", b"resumed", b"after"]
        stats = server.get("/v1/topics/t/stats")
        assert stats["entries"] == 6  # type: ignore[index]  # three records, three markers
    finally:
        server.kill(signal.SIGTERM)
    assert "Traceback" not in server.log.read_text()


def test_kill_9_mid_transaction_the_producer_goes_on_and_an_older_epoch_stays_fenced(
    tmp_path: Path,
) -> None:
    """Two producers of one transactional id, the second initialised last (the first is
    a zombie); the second has a transaction open, records acknowledged and more in
    flight, when the server is killed. After the restart the second goes on with its
    epoch and commits (no fatal error, no new producer), every record read once; the
    zombie is refused (fatal, fenced), never by chance, and nothing of it is stored."""
    from confluent_kafka import KafkaException, Producer

    server = _Server(tmp_path / "data", tmp_path / "serve.log")
    server.start()
    bootstrap = f"127.0.0.1:{server.kafka_port}"
    try:
        assert httpx.put(f"{server.url}/v1/topics/t", timeout=10).status_code in (200, 201)
        settings = {
            "bootstrap.servers": bootstrap,
            "transactional.id": "restarted",
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
            "transaction.timeout.ms": 60_000,
            "reconnect.backoff.max.ms": 500,
        }
        zombie = Producer(settings)
        zombie.init_transactions(TIMEOUT)
        producer = Producer(settings)
        producer.init_transactions(TIMEOUT)  # a newer epoch: the first is a zombie now
        producer.begin_transaction()
        for i in range(5):
            producer.produce("t", f"r{i}".encode())
        assert producer.flush(TIMEOUT) == 0  # acknowledged
        for i in range(5, 10):
            producer.produce("t", f"r{i}".encode())  # (some in flight at the kill)
        producer.poll(0)
        server.kill()
        server.start()

        for i in range(10, 15):
            producer.produce("t", f"r{i}".encode())
        producer.commit_transaction(TIMEOUT)  # the same producer, no error

        zombie.begin_transaction()
        zombie.produce("t", b"zombie")
        with pytest.raises(KafkaException) as raised:
            zombie.commit_transaction(TIMEOUT)
        assert raised.value.args[0].fatal(), raised.value.args[0]
        drop_refused(zombie)
        del zombie, raised

        producer.begin_transaction()
        producer.produce("t", b"after")
        producer.commit_transaction(TIMEOUT)
        expected = [f"r{i}".encode() for i in range(15)] + [b"after"]
        assert _read_committed(bootstrap, b"after") == expected
        stats = server.get("/v1/topics/t/stats")
        assert stats["entries"] == 16 + 2  # type: ignore[index]  # no zombie record; 2 markers
    finally:
        server.kill(signal.SIGTERM)
    assert "Traceback" not in server.log.read_text()
