"""Child process for the SIGKILL test (``test_engine_crash.py``); not a test module.

Usage: ``python crash_child.py DATA_DIR TXN_TIMEOUT WORKERS SNAPSHOT_EVERY SNAPSHOT_INTERVAL
WRITER``

Opens an engine on DATA_DIR (with that snapshot policy and writer), creates topics ``alpha`` and
``beta`` with a read_committed subscription ``audit`` each, prints ``{"event": "ready"}``,
then runs WORKERS concurrent loops of transactions over both topics until it is killed.
Every step prints one JSON line to stdout, flushed:

* ``plan``: before any send of a step: the step's fate (``commit``, ``abort``, ``open``
  = never ended, ``plain`` = a non-transactional batch), its txn id (if any), and the
  message ids it will send per topic;
* ``committed`` / ``aborted``: after ``commit()`` / ``abort()`` returned;
* ``sent``: after a non-transactional ``send_many`` returned;
* ``snapshot``: once per topic, when the engine's stats first show a snapshot of it (the
  parent of a frequent-snapshot run kills only after both, so recovery has one to use).

A message value is ``{"id": str, "w": worker, "i": step, "k": index in the step}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from txnstream.api import Engine, EngineConfig

TOPICS = ("alpha", "beta")
# Step 0 of every worker is left open, so open transactions exist from the start.
FATES = ("open", "commit", "commit", "abort", "commit", "plain", "commit", "open", "abort")


def emit(**event: Any) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


async def worker(engine: Engine, w: int, timeout: float) -> None:
    i = 0
    while True:
        fate = FATES[i % len(FATES)]
        counts = {"alpha": 1 + (i + w) % 3, "beta": 1 + i % 2}
        ids = {t: [f"w{w}-{i}-{t}-{k}" for k in range(n)] for t, n in counts.items()}
        vals = {
            t: [{"id": mid, "w": w, "i": i, "k": k} for k, mid in enumerate(ids[t])] for t in TOPICS
        }
        if fate == "plain":
            emit(event="plan", fate=fate, txn=None, ids={"alpha": ids["alpha"]})
            await engine.send_many("alpha", vals["alpha"])
            emit(event="sent", ids=ids["alpha"])
        else:
            txn = await engine.begin(timeout=timeout)
            emit(event="plan", fate=fate, txn=txn.id, ids=ids)
            await asyncio.gather(*(txn.send_many(t, vals[t]) for t in TOPICS))
            if fate == "commit":
                await txn.commit()
                emit(event="committed", txn=txn.id)
            elif fate == "abort":
                await txn.abort()
                emit(event="aborted", txn=txn.id)
        i += 1


async def watch_snapshots(engine: Engine) -> None:
    pending = set(TOPICS)
    while pending:
        for topic in sorted(pending):
            if (await engine.stats(topic))["snapshot"] is not None:
                pending.discard(topic)
                emit(event="snapshot", topic=topic)
        await asyncio.sleep(0.005)


async def main(
    data: str, timeout: float, workers: int, every: int, interval: float, writer: Any
) -> None:
    config = EngineConfig(
        default_txn_timeout=timeout,
        snapshot_every=every,
        snapshot_interval=interval,
        writer=writer,
    )
    async with Engine.open(data, config) as engine:
        for topic in TOPICS:
            await engine.create_topic(topic)
            await engine.create_subscription(topic, "audit")
        emit(event="ready")
        workers_and_watcher = [worker(engine, w, timeout) for w in range(workers)]
        await asyncio.gather(watch_snapshots(engine), *workers_and_watcher)


if __name__ == "__main__":
    data, timeout, workers, every, interval, writer = sys.argv[1:7]
    asyncio.run(main(data, float(timeout), int(workers), int(every), float(interval), writer))
