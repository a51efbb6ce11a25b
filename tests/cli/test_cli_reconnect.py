"""``consume --follow`` rides out a server restart: a real ``txnstream serve`` process is
killed (SIGKILL) and started again on the same port and data, and both kinds of follower
(through a subscription, and ``--from`` with no subscription) reconnect and resume with
nothing lost and nothing printed twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx
from cli_support import REPO, cli_env, run_in_process
from support import free_port, wait_for


@contextmanager
def _serve(data: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m txnstream serve`` on ``port``; killed by pid on the way out."""
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
            "--log-level",
            "warning",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _healthy(port) or proc.poll() is not None, 30, "the server to start")
        assert proc.poll() is None, "the server exited at start"
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


class _Follower:
    """A ``consume ... --follow`` child whose stdout and stderr lines are collected."""

    def __init__(self, url: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txnstream", "consume", *args, "--follow", "--format", "%v\\n"],
            cwd=REPO,
            env=cli_env(url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        assert self.proc.stdout is not None
        assert self.proc.stderr is not None
        self.pumps = [
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True)
            for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for pump in self.pumps:
            pump.start()

    @staticmethod
    def _pump(stream: IO[bytes], lines: list[str]) -> None:
        for line in stream:
            lines.append(line.decode().rstrip("\n"))

    def wait_for_values(self, values: list[str]) -> None:
        wait_for(lambda: self.out == values, 30, f"the follower to print {values} ({self.out})")

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # (never leave it behind)
            self.proc.wait(timeout=10)
            raise
        for pump in self.pumps:
            pump.join(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code


def test_follow_reconnects_after_a_restart(tmp_path: Path) -> None:
    data, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"

    def cli(*args: str) -> str:
        ran = run_in_process(args, url, None)
        assert ran.returncode == 0, ran.stderr
        return ran.stdout

    followers: list[_Follower] = []
    try:
        with _serve(data, port):
            cli("topics", "create", "orders")
            cli("produce", "orders", "a")
            followers = [_Follower(url, "orders", "billing"), _Follower(url, "orders", "-o", "0:0")]
            for follower in followers:
                follower.wait_for_values(["a"])
            # The subscription's ack of "a" is in before the kill.
            wait_for(
                lambda: '"backlog": 0' in cli("sub", "list", "orders", "--json"),
                10,
                "the ack of a",
            )
        for follower in followers:
            wait_for(lambda f=follower: f.err, 15, "the follower to notice")
            assert follower.err[0].startswith("lost the server: cannot reach the server")
            assert follower.proc.poll() is None  # still there, retrying
        time.sleep(0.5)  # a few failed attempts while the server is down
        with _serve(data, port):
            cli("produce", "orders", "b", "c")
            for follower in followers:
                follower.wait_for_values(["a", "b", "c"])
                wait_for(lambda f=follower: len(f.err) > 1, 10, "the reconnected line")
                assert follower.err[1:] == ["reconnected; resuming"], follower.err
    finally:
        codes = [follower.stop() for follower in followers]
    assert codes == [130, 130]
