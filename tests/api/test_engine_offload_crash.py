"""kill -9 in the middle of an offload, then recovery (a real child process).

The child (``offload_child.py``) writes plain batches, committed and aborted
transactions to a topic of small ledgers and offloads them. The parent SIGKILLs it
between an upload and its switch (``pause``), or at an arbitrary moment while writes and
offloads run together (``run``), reopens the data directory in-process and checks:
every acknowledged message is readable exactly once, in order; nothing of an aborted
transaction is visible; a commit in flight is all or nothing; every remote ledger's
object is there; and the next pass leaves exactly the remote ledgers' objects (the
orphan of the interrupted upload replaced or removed).
"""

from __future__ import annotations

import json
import queue
import time
from pathlib import Path
from typing import Any

import pytest
from support import ChildLines, drain, open_after_kill

from txnstream.api import EngineConfig
from txnstream.ledger import OffloadStore, sidecar_url

pytestmark = pytest.mark.timeout(120)

CHILD = Path(__file__).with_name("offload_child.py")
REPO = Path(__file__).resolve().parents[2]


def run_child(data: Path, url: str, mode: str, log: Path) -> list[dict[str, Any]]:
    """Run the child until its kill point, SIGKILL it, return its events."""
    child = ChildLines([str(CHILD), str(data), url, mode], log, "offload-child-stdout")
    lines = child.lines
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    offloaded = 0
    try:
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            event = json.loads(line)
            events.append(event)
            if mode == "pause" and event["event"] == "uploaded":
                break
            if mode == "run" and event["event"] == "offloaded":
                offloaded += 1
                if offloaded == 6:
                    time.sleep(0.013)  # somewhere inside the next steps and offloads
                    break
        else:
            raise AssertionError("the child did not reach its kill point in time")
    finally:
        child.kill()
    assert events, log.read_text()
    return events


async def test_kill_between_upload_and_switch(
    data_dir: Path, tmp_path: Path, offload_url: str
) -> None:
    await recover_and_check(data_dir, tmp_path, offload_url, "pause")


@pytest.mark.postgresql_in_full_run  # (a child run and a lease expiry: the test above covers it)
async def test_kill_while_writing_and_offloading(data_dir: Path, tmp_path: Path) -> None:
    await recover_and_check(data_dir, tmp_path, (tmp_path / "objects").as_uri(), "run")


async def recover_and_check(data: Path, tmp_path: Path, offload_url: str, mode: str) -> None:
    events = run_child(data, offload_url, mode, tmp_path / "child.log")
    plans = {e["step"]: e for e in events if e["event"] == "plan"}
    done = {e["step"] for e in events if e["event"] == "done"}
    acked = [i for p, e in plans.items() if p in done and e["fate"] != "abort" for i in e["ids"]]
    aborted = {i for e in plans.values() if e["fate"] == "abort" for i in e["ids"]}
    in_flight = [e for p, e in plans.items() if p not in done and e["fate"] == "commit"]
    assert len(acked) > 20

    config = EngineConfig(offload_url=offload_url, ledger_max_entries=8, min_free_bytes=0)
    async with await open_after_kill(data, config) as engine:
        store = OffloadStore()

        async def check() -> list[str]:
            sub = await engine.subscribe("t", f"check-{time.monotonic_ns()}")
            got = [m.value for m in await drain(sub, idle=0.1)]
            assert len(got) == len(set(got)), "a message was delivered twice"
            assert not aborted & set(got), "aborted data is visible"
            delivered = set(got)
            assert set(acked) <= delivered, "an acknowledged message is missing"
            for plan in in_flight:  # a commit in flight at the kill: all or nothing
                present = [i in delivered for i in plan["ids"]]
                assert all(present) or not any(present)
            order = {i: n for n, i in enumerate(got)}
            assert [order[i] for i in acked] == sorted(order[i] for i in acked)
            return got

        before = await check()
        listing = await engine.list_ledgers("t")
        remote = [i for i in listing if i["location"] == "remote"]
        for info in remote:  # every remote ledger's object is complete and readable
            assert (
                len(store.read_entries(info["ledger"], info["url"], 0, 1 << 30))
                == (info["entries"])
            )
        if mode == "pause":
            uploaded = events[-1]
            assert uploaded["event"] == "uploaded"
            paused = next(i for i in listing if i["ledger"] == uploaded["ledger"])
            assert paused["location"] == "local"  # the switch never happened
        for txn in await engine.transactions(state="open"):  # open at the kill: time out
            await engine.abort(txn.txn)
        offloaded = await engine.offload("t")
        assert offloaded
        listing = await engine.list_ledgers("t")
        expected = set()
        for info in listing:
            if info["location"] == "remote":
                expected.add(info["url"])
                if info["has_aborts"]:
                    expected.add(sidecar_url(info["url"]))
        assert set(OffloadStore(offload_url).list_topic("t")) == expected
        assert await check() == before
