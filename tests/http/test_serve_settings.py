"""``serve`` as an operator runs it: every engine setting as a flag or environment
variable, one server per data directory, clear one-line errors."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from support import run_serve

from txnstream.api import EngineConfig
from txnstream.api.cli._config_flags import HELP

REPO = Path(__file__).resolve().parents[2]


def test_every_engine_setting_is_a_flag_and_an_environment_variable() -> None:
    names = [f.name for f in dataclasses.fields(EngineConfig)]
    assert sorted(HELP) == sorted(names)
    shown = subprocess.run(
        [sys.executable, "-m", "txnstream", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"},
        check=True,
    ).stdout
    for name in names:
        assert "--" + name.replace("_", "-") in shown, name
        assert f"TXNSTREAM_{name.upper()}" in shown, name


def test_settings_from_flags_and_environment_reach_the_engine(serve_process: Any) -> None:
    server = serve_process().start(
        "--max-messages-per-request", "2", env={"TXNSTREAM_MIN_FREE_BYTES": str(2**62)}
    )
    health = httpx.get(f"{server.url}/v1/health", timeout=5)
    assert health.status_code == 503
    assert health.json()["status"] == "degraded"
    refused = httpx.post(
        f"{server.url}/v1/topics/t/messages",
        json={"messages": [{"value": 1}, {"value": 2}, {"value": 3}]},
        timeout=5,
    )
    assert refused.status_code == 413


def test_bad_settings_and_paths_are_one_line_errors(tmp_path: Path) -> None:
    afile = tmp_path / "file"
    afile.write_text("not a directory")
    for args, words in [
        (("--data", str(afile)), "not a directory"),
        (("--data", str(tmp_path / "d"), "--durability", "sometimes"), "durability"),
        (("--data", str(tmp_path / "d"), "--max-message-bytes", "0"), "max_message_bytes"),
    ]:
        done = run_serve(*args)
        assert done.returncode != 0
        assert words in done.stderr, done.stderr
        assert "Traceback" not in done.stderr + done.stdout


def _fingerprint(data: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(data.iterdir())
        if p.name.endswith(".db")
    }


def test_a_second_server_on_the_same_directory_exits_and_changes_nothing(
    serve_process: Any,
) -> None:
    first = serve_process().start()
    assert httpx.put(f"{first.url}/v1/topics/t", timeout=5).status_code == 201
    sent = httpx.post(
        f"{first.url}/v1/topics/t/messages", json={"messages": [{"value": 1}]}, timeout=5
    )
    assert sent.status_code == 200
    httpx.get(f"{first.url}/v1/topics/t/stats", timeout=5)
    before = _fingerprint(first.data)
    second = run_serve("--data", str(first.data))
    assert second.returncode != 0
    assert "locked" in second.stderr + second.stdout
    assert f"pid {first.proc.pid}" in second.stderr + second.stdout
    assert _fingerprint(first.data) == before
    stats = httpx.get(f"{first.url}/v1/topics/t/stats", timeout=5).json()
    assert stats["last_confirmed"] == "0:0"  # the first keeps serving, data intact
