"""``txnstream serve --offload-url URL --ledger-max-entries N``: a real server offloads;
kill -9 it while writes and offloads run over HTTP, restart it, read everything back."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import free_port, run_serve, start_in_repo, stop_process, wait_for

from txnstream.ledger import OffloadStore, sidecar_url

pytestmark = pytest.mark.timeout(120)


class Server:
    """``python -m txnstream serve`` with tiers, on a free loopback port; stopped by pid."""

    def __init__(self, data: Path, url: str, log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        args = [
            sys.executable,
            "-m",
            "txnstream",
            "serve",
            "--data",
            str(data),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--offload-url",
            url,
            "--ledger-max-entries",
            "5",
            "--log-level",
            "warning",
        ]
        self.proc = start_in_repo(args, log)
        wait_for(lambda: self.proc.poll() is not None or self._up(), 30, "the server to start")
        assert self.proc.poll() is None, log.read_text()

    def _up(self) -> bool:
        try:
            return httpx.get(f"{self.base}/v1/health", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> None:
        stop_process(self.proc, sig=sig)


def write_and_offload(base: str, stop: threading.Event, log: dict[str, Any]) -> None:
    """Plain batches, committed and aborted transactions; then offload runs, forever."""
    with httpx.Client(base_url=base, timeout=10.0) as http:
        i = 0
        while not stop.is_set():
            ids = [f"m{i}-{k}" for k in range(1 + i % 3)]
            messages = {"messages": [{"value": v} for v in ids]}
            fate = ("plain", "commit", "abort", "plain")[i % 4]
            try:
                if fate == "plain":
                    http.post("/v1/topics/t/messages", json=messages).raise_for_status()
                    log["acked"] += ids
                else:
                    txn = http.post("/v1/transactions", json={}).json()["txn"]
                    log["txn of"].update(dict.fromkeys(ids, txn))
                    if fate == "abort":
                        log["aborted"] |= set(ids)
                    body = {**messages, "txn": txn}
                    http.post("/v1/topics/t/messages", json=body).raise_for_status()
                    http.post(f"/v1/transactions/{txn}/{fate}").raise_for_status()
                    if fate == "commit":
                        log["acked"] += ids
                if i % 5 == 4:
                    ran = http.post("/v1/topics/t/offload/run")
                    ran.raise_for_status()
                    log["offloaded"] += ran.json()["offloaded"]
            except httpx.HTTPError:
                return  # the server is gone
            i += 1


def test_kill_a_serving_server_mid_offload_then_recover(tmp_path: Path) -> None:
    data, url = tmp_path / "data", (tmp_path / "objects").as_uri()
    server = Server(data, url, tmp_path / "server.log")
    log: dict[str, Any] = {"acked": [], "aborted": set(), "txn of": {}, "offloaded": []}
    stop = threading.Event()
    try:
        httpx.put(f"{server.base}/v1/topics/t").raise_for_status()
        worker = threading.Thread(target=write_and_offload, args=(server.base, stop, log))
        worker.start()
        wait_for(lambda: len(log["offloaded"]) >= 8, 60, "eight ledgers offloaded")
        time.sleep(0.05)
        server.stop(signal.SIGKILL)
    finally:
        stop.set()
        server.stop(signal.SIGKILL)
    worker.join(timeout=30)

    server = Server(data, url, tmp_path / "server.log")
    try:
        with httpx.Client(base_url=server.base, timeout=30.0) as http:
            for txn in http.get("/v1/transactions", params={"state": "open"}).json()[
                "transactions"
            ]:  # left open by the kill: they would time out
                http.post(f"/v1/transactions/{txn['txn']}/abort")
            http.put("/v1/topics/t/subscriptions/check").raise_for_status()
            got: list[str] = []
            while batch := http.get(
                "/v1/topics/t/subscriptions/check/messages", params={"max": 1000}
            ).json()["messages"]:
                got += [m["value"] for m in batch]
            assert len(got) == len(set(got)), "a message was delivered twice"
            assert not log["aborted"] & set(got), "aborted data is visible"
            order = {v: n for n, v in enumerate(got)}
            missing = [v for v in log["acked"] if v not in order]
            assert not missing, f"acknowledged messages lost: {missing[:5]}"
            assert [order[v] for v in log["acked"]] == sorted(order[v] for v in log["acked"])

            http.post("/v1/topics/t/offload/run").raise_for_status()
            listing = http.get("/v1/topics/t/ledgers").json()["ledgers"]
            remote = [i for i in listing if i["location"] == "remote"]
            assert len(remote) >= 8
            expected = {i["url"] for i in remote}
            expected |= {sidecar_url(i["url"]) for i in remote if i["has_aborts"]}
            assert set(OffloadStore(url).list_topic("t")) == expected  # no orphan left
            stats = http.get("/v1/topics/t/stats").json()
            assert stats["offloaded_ledgers"] == len(remote)
            http.put("/v1/topics/t/subscriptions/again").raise_for_status()
            again: list[str] = []
            while batch := http.get(
                "/v1/topics/t/subscriptions/again/messages", params={"max": 1000}
            ).json()["messages"]:
                again += [m["value"] for m in batch]
            assert again == got
    finally:
        server.stop()


def test_serve_refuses_a_bad_offload_url(tmp_path: Path) -> None:
    done = run_serve("--data", str(tmp_path / "d"), "--offload-url", "ftp://elsewhere/x")
    assert done.returncode != 0
    assert "offload_url" in done.stderr
    assert not (tmp_path / "d").exists()
