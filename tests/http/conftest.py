"""Fixtures for the HTTP tests (the session server, ``server_url``, is in ``tests/conftest.py``).

- ``client``: an ``httpx.AsyncClient`` on the live server of the test's store (each test
  that takes it runs on both stores: ``store_kind`` in ``tests/conftest.py``).
- ``ServeProcess``: a real ``python -m txnstream serve`` subprocess, for restart and SIGTERM
  tests that need their own data directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import free_port, wait_for

REPO = Path(__file__).resolve().parents[2]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
async def client(store_kind: str, request: pytest.FixtureRequest) -> Any:
    """A client of the session server on the test's store (``[sqlite]``, ``[postgresql]``)."""
    base_url = request.getfixturevalue("server_url" if store_kind == "sqlite" else "pg_server_url")
    async with httpx.AsyncClient(base_url=base_url, timeout=30.0) as http:
        yield http


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/health", timeout=1.0).status_code in (200, 503)
    except httpx.TransportError:
        return False


class ServeProcess:
    """``python -m txnstream serve`` as a subprocess on a free port over ``data``."""

    def __init__(self, data: Path, log: Path) -> None:
        self.data = data
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str, env: dict[str, str] | None = None) -> ServeProcess:
        """Start it (``args``: more ``serve`` options) and wait until it answers health
        (200, or 503 when ``args``/``env`` make it unhealthy on purpose)."""
        env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "txnstream",
                    "serve",
                    "--data",
                    str(self.data),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "info",
                    *args,
                ],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, as under a terminal
            )
        proc = self.proc
        wait_for(lambda: proc.poll() is not None or _answers(self.url), 30, "the server to answer")
        assert proc.poll() is None, f"server exited early:\n{self.log()}"
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 40) -> int:
        """SIGTERM and wait; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"server ignored SIGTERM:\n{self.log()}") from None

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(AssertionError):
                self.terminate()


@pytest.fixture
def serve_process(tmp_path: Path) -> Any:
    """Factory: ``serve_process(data_dir)`` -> an unstarted :class:`ServeProcess`."""
    made: list[ServeProcess] = []

    def make(data: Path | None = None) -> ServeProcess:
        proc = ServeProcess(data or tmp_path / "data", tmp_path / f"server-{len(made)}.log")
        made.append(proc)
        return proc

    yield make
    for proc in made:
        proc.__exit__(None, None, None)
