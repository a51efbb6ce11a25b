"""``serve --kafka-listen``: the listener starts and stops with the HTTP server (a real
subprocess), SIGTERM ends both cleanly, nothing acknowledged lost; bad flags exit 2."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from kafka_clients import TIMEOUT
from support import free_ports, self_signed_cert, wait_for

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


def _serve(
    data: Path, log: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "txnstream", "serve", "--data", str(data), *args],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def test_serve_runs_the_listener_beside_http_and_sigterm_ends_both(tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    http_port, kafka_port = free_ports(2)
    url = f"http://127.0.0.1:{http_port}"
    log = tmp_path / "serve.log"
    proc = _serve(
        tmp_path / "data",
        log,
        "--port",
        str(http_port),
        env={"TXNSTREAM_KAFKA_LISTEN": f"127.0.0.1:{kafka_port}"},
    )
    try:
        wait_for(lambda: proc.poll() is not None or _healthy(url), 30, "the server")
        assert proc.poll() is None, log.read_text()
        assert httpx.put(f"{url}/v1/topics/orders", timeout=10).status_code in (200, 201)
        bootstrap = f"127.0.0.1:{kafka_port}"
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(5):
            producer.produce("orders", value=f"m{i}".encode(), key=b"k")
        assert producer.flush(TIMEOUT) == 0
        stats = httpx.get(f"{url}/v1/topics/orders/stats", timeout=10).json()
        assert stats["entries"] == 5
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
        consumer.assign([TopicPartition("orders", 0, 0)])
        values: list[bytes] = []
        deadline_polls = int(TIMEOUT / 0.2)
        for _ in range(deadline_polls):
            if len(values) == 5:
                break
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
        consumer.close()
        assert values == [f"m{i}".encode() for i in range(5)]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=40)
    # uvicorn re-raises the signal once it has shut down cleanly (as the HTTP tests accept)
    assert code in (0, -signal.SIGTERM), log.read_text()
    text = log.read_text()
    assert "Kafka listener on 127.0.0.1" in text
    assert "Kafka listener stopped" in text
    assert "Traceback" not in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kafka-listen", "nonsense"], "--kafka-listen must be HOST:PORT"),
        (["--kafka-advertise", "h:1"], "--kafka-advertise needs --kafka-listen"),
        (["--kafka-listen", "0.0.0.0:9092"], "without authentication"),
    ],
)
def test_bad_kafka_flags_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "txnstream", "serve", "--data", str(tmp_path / "d"), *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


def test_with_auth_and_tls_clients_use_sasl_ssl(tmp_path: Path) -> None:
    """``--auth`` and ``--tls-cert``/``--tls-key``: the listener takes SASL_SSL only."""
    import json

    from confluent_kafka import Producer
    from test_sasl import PRINCIPALS

    cert, key = self_signed_cert(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert))
    principals = tmp_path / "principals.json"
    principals.write_text(json.dumps(PRINCIPALS))
    http_port, kafka_port = free_ports(2)
    log = tmp_path / "serve.log"
    args = ["--port", str(http_port), "--kafka-listen", f"127.0.0.1:{kafka_port}"]
    args += ["--auth", str(principals), "--tls-cert", str(cert), "--tls-key", str(key)]
    proc = _serve(tmp_path / "data", log, *args)
    url = f"https://127.0.0.1:{http_port}"

    def up() -> bool:
        try:
            return httpx.get(f"{url}/v1/health", verify=trust, timeout=1.0).is_success
        except httpx.TransportError:
            return False

    try:
        wait_for(lambda: proc.poll() is not None or up(), 30, "the server")
        created = httpx.put(
            f"{url}/v1/topics/orders",
            verify=trust,
            headers={"Authorization": "Bearer ops-token"},
            timeout=10,
        )
        assert created.status_code in (200, 201), created.text
        delivered: list[object] = []
        producer = Producer(
            {
                "bootstrap.servers": f"127.0.0.1:{kafka_port}",
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(cert),
                "sasl.mechanisms": "PLAIN",
                "sasl.username": "billing",
                "sasl.password": "billing-token",
            }
        )
        producer.produce("orders", value=b"over TLS", on_delivery=lambda e, m: delivered.append(e))
        assert producer.flush(TIMEOUT) == 0
        assert delivered == [None]
        stats = httpx.get(
            f"{url}/v1/topics/orders/stats",
            verify=trust,
            headers={"Authorization": "Bearer ops-token"},
            timeout=10,
        ).json()
        assert stats["entries"] == 1
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=40)
    assert code in (0, -signal.SIGTERM), log.read_text()
    assert "SASL_SSL" in log.read_text()
