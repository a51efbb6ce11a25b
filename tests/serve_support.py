"""``serve --store URL`` processes for the failover tests (``tests/cli``, ``tests/kafka``):
real servers on free loopback ports, polled over ``/v1/health``, stopped by pid."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from support import free_port, start_in_repo, stop_process, wait_for


class StoreServer:
    """``python -m txnstream serve --store URL --port PORT --lease-timeout LEASE ARGS`` on a
    free loopback port, its output appended to ``log``, stopped by pid."""

    def __init__(self, store: str, log: Path, *args: str, lease: float, port: int = 0) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "txnstream", "serve", "--store", store]
        command += ["--port", str(self.port), "--lease-timeout", str(lease), *args]
        self.log = log
        self.proc = start_in_repo(command, log)

    def health(self) -> tuple[int, dict[str, Any], httpx.Headers] | None:
        """``/v1/health``'s status code, body and headers (None: no answer)."""
        try:
            r = httpx.get(f"{self.url}/v1/health", timeout=2.0, trust_env=False)
        except httpx.TransportError:
            return None
        return r.status_code, r.json(), r.headers

    def wait_status(self, status: str, timeout: float = 30.0) -> float:
        """Seconds until health says ``status`` (fails at once if the server exited)."""
        started = time.monotonic()

        def reached() -> bool:
            assert self.proc.poll() is None, f"server exited:\n{self.log.read_text()}"
            got = self.health()
            return got is not None and got[1]["status"] == status

        wait_for(reached, timeout, f"{self.url} to be {status}")
        return time.monotonic() - started

    def metric(self, name: str) -> float:
        """The value of sample ``name`` (no labels) on ``/metrics``."""
        text = httpx.get(f"{self.url}/metrics", timeout=5.0, trust_env=False).text
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self) -> None:
        """SIGTERM, and SIGKILL if it has not exited within 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused server must see the SIGTERM
            stop_process(self.proc, timeout=30)
