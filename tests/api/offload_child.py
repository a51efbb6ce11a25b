"""Child process of the offload crash test (``test_engine_offload_crash.py``); not a test.

Usage: ``python offload_child.py DATA_DIR OFFLOAD_URL MODE``

Opens an engine on DATA_DIR offloading to OFFLOAD_URL (ledgers of 8 entries), creates
topic ``t`` and writes to it, printing one JSON line per step (flushed):

* ``plan`` before a step's sends: its ``fate`` (``plain``, ``commit`` or ``abort``), the
  txn id and the message ids; ``done`` once the step returned (for ``plain`` and
  ``commit`` the messages are then acknowledged);
* ``uploaded`` when an offload's objects are written and verified, before the switch;
  ``offloaded`` after ``engine.offload`` returned.

MODE ``pause``: 40 steps, then one offload that stops for good right after its first
upload (the parent kills the process there, between upload and switch). MODE ``run``:
steps and offloads go on concurrently until the process is killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from txnstream.api import Engine, EngineConfig
from txnstream.ledger import OffloadStore

FATES = ("plain", "commit", "plain", "abort", "commit", "plain")


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def pause_after_upload() -> None:
    upload = OffloadStore.write_ledger

    def paused(self: OffloadStore, topic: str, ledger_id: int, *args: Any) -> Any:
        obj = upload(self, topic, ledger_id, *args)
        emit(event="uploaded", ledger=ledger_id, url=obj.url)
        time.sleep(3600)  # a worker thread; the parent kills the process here
        return obj

    OffloadStore.write_ledger = paused  # type: ignore[method-assign]


async def step(engine: Engine, i: int) -> None:
    fate = FATES[i % len(FATES)]
    ids = [f"m{i}-{k}" for k in range(1 + i % 3)]
    if fate == "plain":
        emit(event="plan", step=i, fate=fate, txn=None, ids=ids)
        await engine.send_many("t", ids)
    else:
        txn = await engine.begin()
        emit(event="plan", step=i, fate=fate, txn=txn.id, ids=ids)
        await txn.send_many("t", ids)
        await (txn.commit() if fate == "commit" else txn.abort())
    emit(event="done", step=i)


async def main(data: str, url: str, mode: str) -> None:
    config = EngineConfig(offload_url=url, ledger_max_entries=8, min_free_bytes=0)
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        emit(event="ready")
        if mode == "pause":
            for i in range(40):
                await step(engine, i)
            pause_after_upload()
            await engine.offload("t")
            return

        async def writer() -> None:
            i = 0
            while True:
                await step(engine, i)
                i += 1

        async def offloader() -> None:
            while True:
                for ledger in await engine.offload("t"):
                    emit(event="offloaded", ledger=ledger)
                await asyncio.sleep(0.01)

        await asyncio.gather(writer(), offloader())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))  # a directory or a URL
