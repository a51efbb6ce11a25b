"""``txnstream serve`` logs as an operator reads them: a startup banner, one format for
uvicorn's and the engine's lines (text or JSON), and an access log only when asked."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from support import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]
TEXT_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+ \S"
)


def run_server(data: Path, *flags: str) -> list[str]:
    """Serve ``data`` with ``flags``, create a topic and send 3 messages, stop with
    SIGTERM; returns the lines the server wrote to stderr."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "txnstream",
            "serve",
            "--data",
            str(data),
            "--port",
            str(port),
            *flags,
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/v1/health", timeout=1).status_code == 200
            except httpx.TransportError:
                return proc.poll() is not None

        wait_for(healthy, 30, "the server to answer")
        assert proc.poll() is None, "the server exited early"
        assert httpx.put(f"{url}/v1/topics/orders", timeout=10).status_code in (200, 201)
        body = {"messages": [{"value": n} for n in range(3)]}
        assert httpx.post(f"{url}/v1/topics/orders/messages", json=body, timeout=10).is_success
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode in (0, -signal.SIGTERM), err
    return err.splitlines()


def test_text_logs_share_one_format_and_the_banner_says_what_recovery_did(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = run_server(data)
    assert first
    for line in first:
        assert TEXT_LINE.match(line), line  # uvicorn's lines look like the engine's
    assert any(" uvicorn.error Application startup complete." in line for line in first)
    assert not any("txnstream.access" in line for line in first)  # off by default
    (banner,) = [line for line in first if " txnstream.cli txnstream " in line]
    assert "serving http://127.0.0.1:" in banner
    assert f"data {data.resolve()};" in banner
    assert "durability full" in banner
    assert "recovered 0 topics" in banner

    second = run_server(data, "--log-format", "json", "--access-log", "--durability", "normal")
    records = [json.loads(line) for line in second]  # every line is one JSON object
    for record in records:
        assert {"time", "level", "logger", "message"} <= record.keys()
    assert any(r["logger"] == "uvicorn.error" for r in records)
    (start,) = [r for r in records if "recovery" in r]
    assert start["durability"] == "normal"
    assert start["data"] == str(data.resolve())
    assert start["url"].startswith("http://127.0.0.1:")
    assert re.fullmatch(r"\d+\.\d+.*", start["version"])
    assert start["recovery"]["topics"] == 1
    assert start["recovery"]["entries_replayed"] >= 3
    assert start["recovery"]["from_snapshot"] in (0, 1)
    assert "recovered 1 topic (" in start["message"]
    access = [r for r in records if r["logger"] == "txnstream.access"]
    produce = [r for r in access if r["method"] == "POST"]
    assert produce[0]["route"] == "/v1/topics/{topic}/messages"
    assert produce[0]["path"] == "/v1/topics/orders/messages"
    assert produce[0]["status"] == 200
    assert produce[0]["duration_ms"] > 0
    assert produce[0]["request_id"]
