"""``txnstream serve`` as a real subprocess: restart on the same data, SIGTERM under load."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest


async def test_restart_keeps_topics_subscriptions_and_data(serve_process: Any) -> None:
    first: Any = serve_process()
    with first:
        async with httpx.AsyncClient(base_url=first.url, timeout=30) as client:
            assert (await client.put("/v1/topics/orders")).status_code == 201
            r = await client.put("/v1/topics/orders/subscriptions/billing", json={"type": "shared"})
            assert r.status_code == 201
            r = await client.post(
                "/v1/topics/orders/messages",
                json={"messages": [{"value": {"n": 1}}, {"value_b64": "AAE="}]},
            )
            positions = r.json()["positions"]
            txn = (await client.post("/v1/transactions", json={})).json()["txn"]
            await client.post(
                "/v1/topics/orders/messages", json={"messages": [{"value": "t"}], "txn": txn}
            )
            assert (await client.post(f"/v1/transactions/{txn}/commit")).status_code == 200
            got = (await client.get("/v1/topics/orders/subscriptions/billing/messages")).json()
            first_pos = got["messages"][0]["position"]
            r = await client.post(
                "/v1/topics/orders/subscriptions/billing/ack", json={"positions": [first_pos]}
            )
            assert r.status_code == 200
        status = first.terminate()
        assert status in (0, -signal.SIGTERM), first.log()

    second: Any = serve_process(first.data)
    with second:
        async with httpx.AsyncClient(base_url=second.url, timeout=30) as client:
            assert (await client.get("/v1/topics")).json()["topics"] == ["orders"]
            stats = (await client.get("/v1/topics/orders/stats")).json()
            assert stats["subscriptions"]["billing"]["type"] == "shared"
            assert stats["subscriptions"]["billing"]["backlog"] == 2
            got = (
                await client.get(
                    "/v1/topics/orders/subscriptions/billing/messages", params={"wait_ms": 2000}
                )
            ).json()["messages"]
            values = sorted((m["position"], m.get("value"), m.get("value_b64")) for m in got)
            assert values[0] == (positions[1], None, "AAE=")
            assert values[1][1] == "t"
            assert (await client.get(f"/v1/transactions/{txn}")).json()["state"] == "committed"
        assert second.terminate() in (0, -signal.SIGTERM)


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [
        pytest.param(signal.SIGTERM, False, id="sigterm"),
        # Ctrl-C in a terminal: SIGINT to the whole process group, the writer process
        # included, which must keep applying flushes until the server closes it.
        pytest.param(signal.SIGINT, True, id="ctrl-c-to-group"),
    ],
)
async def test_sigterm_under_load_loses_no_acknowledged_message(
    serve_process: Any, tmp_path: Path, signum: int, to_group: bool
) -> None:
    server: Any = serve_process()
    server.start()
    acked: dict[str, str] = {}  # value -> position, for every 200
    dropped: list[str] = []  # requests sent that got no answer (must stay empty)
    enough = asyncio.Event()
    stop = asyncio.Event()

    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        assert (await client.put("/v1/topics/load")).status_code == 201
        # A long poll in flight must not hold the shutdown up.
        assert (await client.put("/v1/topics/load/subscriptions/watch")).status_code == 201
        await client.post("/v1/topics/load/subscriptions/watch/seek", json={"position": "latest"})

        async def poller() -> int:
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as own:
                try:
                    r = await own.get(
                        "/v1/topics/load/subscriptions/watch/messages",
                        params={"wait_ms": 30000, "consumer": "watcher", "max": 1},
                    )
                except httpx.TransportError as exc:
                    dropped.append(f"long poll: {exc!r}")
                    return -1
                return r.status_code

        async def producer(worker: int) -> None:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as own:
                n = 0
                while not stop.is_set():
                    value = f"w{worker}-{n}"
                    n += 1
                    try:
                        r = await own.post(
                            "/v1/topics/load/messages", json={"messages": [{"value": value}]}
                        )
                    except httpx.ConnectError:
                        return  # refused: the server stopped listening, nothing was sent
                    except httpx.TransportError as exc:  # sent, and no answer came back
                        dropped.append(f"{value}: {exc!r}")
                        return
                    if r.status_code == 503:  # arrived during the shutdown: refused cleanly
                        assert r.json()["error"]["code"] == "unavailable"
                        return
                    assert r.status_code == 200, r.text
                    acked[value] = r.json()["positions"][0]
                    if len(acked) >= 200:
                        enough.set()

        # The watcher's long poll is in flight before the load starts.
        watch = asyncio.create_task(poller())
        workers = [asyncio.create_task(producer(i)) for i in range(16)]
        await asyncio.wait_for(enough.wait(), timeout=60)
        assert server.proc is not None
        if to_group:
            os.killpg(server.proc.pid, signum)
            status = await asyncio.to_thread(server.proc.wait, 40)
        else:
            server.proc.send_signal(signum)
            status = await asyncio.to_thread(server.terminate, 40)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*workers), timeout=30)
        watch_status = await asyncio.wait_for(watch, timeout=30)
    assert status in (0, -signum, 128 + signum), server.log()  # (130: a shell's Ctrl-C code)
    assert watch_status == 200
    assert not dropped, dropped
    assert "engine closed" in server.log()

    restarted: Any = serve_process(server.data)
    with restarted:
        async with httpx.AsyncClient(base_url=restarted.url, timeout=30) as client:
            stored: dict[str, str] = {}
            start = "earliest"
            while True:
                page = (
                    await client.get("/v1/topics/load/fetch", params={"from": start, "max": 10000})
                ).json()
                for entry in page["entries"]:
                    stored[entry["value"]] = entry["position"]
                if not page["entries"]:
                    break
                start = page["next"]
    missing = {v: p for v, p in acked.items() if stored.get(v) != p}
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {list(missing)[:5]}"
    assert len(acked) >= 200
