"""README's "Using Kafka clients" runs as printed against a real ``serve --kafka-listen``:
its kcat block (metadata, produce, consume) and its confluent-kafka transactional
example. Only the addresses change (and the block's own ``serve`` line is the server)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support import free_ports, wait_for

REPO = Path(__file__).resolve().parents[2]
HEADING = "\n## Using Kafka clients\n"

pytestmark = pytest.mark.timeout(120)


def _blocks(kind: str) -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index(HEADING)
    end = readme.find("\n## ", start + len(HEADING))
    return re.findall(rf"```{kind}\n(.*?)```", readme[start:end], re.S)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def test_the_kafka_section_runs_as_printed(tmp_path: Path) -> None:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (.ci/run installs it)")
    [shell] = _blocks("sh")
    [python] = _blocks("python")
    serve_line, *commands = shell.strip().split("\n")
    assert serve_line.startswith("txnstream serve")
    assert "--kafka-listen 127.0.0.1:9092" in serve_line
    http_port, kafka_port = free_ports(2)
    url = f"http://127.0.0.1:{http_port}"
    kafka = f"127.0.0.1:{kafka_port}"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    log = tmp_path / "serve.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "txnstream",
                "serve",
                "--data",
                str(tmp_path / "data"),
                "--port",
                str(http_port),
                "--kafka-listen",
                kafka,
            ],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(lambda: proc.poll() is not None or _healthy(url), 30, "the server")
        script = "\n".join(["set -euo pipefail", *commands])
        script = script.replace("http://127.0.0.1:8080", url).replace("127.0.0.1:9092", kafka)
        done = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env, check=False
        )
        assert done.returncode == 0, done.stderr
        assert 'topic "payments" with 1 partitions' in done.stdout
        assert 'topic "clicks" with 3 partitions' in done.stdout
        assert '0 k1 {"amount": 5}\n1 k2 {"amount": 7}\n' in done.stdout
        example = subprocess.run(
            [sys.executable, "-c", python.replace("127.0.0.1:9092", kafka)],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
            check=False,
        )
        assert example.returncode == 0, example.stderr
        expected = python.rsplit("# ", 1)[1].rsplit("]:", 1)[0] + "]"
        assert example.stdout.strip() == expected
        stats = httpx.get(f"{url}/v1/topics/payments/stats", timeout=10).json()
        assert stats["subscriptions"]["billing"]["backlog"] == 0  # the group committed all
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=40)
    assert code in (0, -signal.SIGTERM), log.read_text()
