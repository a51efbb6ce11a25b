"""A Kafka transaction whose server is killed (``kill -9``) after AddPartitionsToTxn was
answered and before its records were produced: AddPartitionsToTxn writes nothing durable
(an empty transaction does not outlive a crash), so after the restart its Produce is
answered UNKNOWN_PRODUCER_ID and its EndTxn is fenced (the server cannot tell whether a
commit of that producer was made before the crash, so it never reports an abort); a new
producer with the same transactional id goes on, and nothing of the lost transaction is
stored or read. A real ``serve`` process and confluent-kafka."""

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


def test_a_crash_after_add_partitions_fails_the_commit_and_nothing_is_kept(
    tmp_path: Path,
) -> None:
    from confluent_kafka import KafkaException, Producer

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
        producer.produce("t", b"lost")

        def added() -> bool:  # AddPartitionsToTxn answered: the engine transaction is open
            return bool(server.get("/v1/transactions?state=open")["transactions"])  # type: ignore[index]

        wait_for(added, TIMEOUT, "AddPartitionsToTxn to open the transaction")
        server.kill()
        server.start()
        assert server.get("/v1/transactions?state=open") == {"transactions": []}

        with pytest.raises(KafkaException) as raised:
            producer.commit_transaction(TIMEOUT)
        error = raised.value.args[0]
        # Its Produce is answered UNKNOWN_PRODUCER_ID (abortable); an EndTxn of a producer
        # this server has not initialised is fenced (the server cannot tell whether that
        # producer's commit was made before the crash, so it never reports an abort).
        # librdkafka may or may not send the EndTxn once the Produce failed: either way
        # the commit fails. The application then starts a new producer.
        if not error.fatal():
            assert error.name() == "UNKNOWN_PRODUCER_ID", error
            try:
                producer.abort_transaction(TIMEOUT)
                abort_error = None
            except KafkaException as exc:
                abort_error = exc.args[0]
            assert abort_error is None or abort_error.fatal(), abort_error
        producer = Producer(
            {"bootstrap.servers": f"127.0.0.1:{server.kafka_port}", "transactional.id": "crashy"}
        )
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce("t", b"after")
        producer.commit_transaction(TIMEOUT)

        bootstrap = f"127.0.0.1:{server.kafka_port}"
        assert _read_committed(bootstrap, b"after") == [b"before", b"after"]
        stats = server.get("/v1/topics/t/stats")
        assert stats["entries"] == 4  # type: ignore[index]  # two records, two commit markers
    finally:
        server.kill(signal.SIGTERM)
    assert "Traceback" not in server.log.read_text()
