"""K: the Kafka listener against the embedded engine, for the same shapes (issue 29).

Each workload runs in a fresh data directory with an engine and a Kafka listener in this
process; the Kafka client (confluent-kafka, i.e. librdkafka) runs in a child process so
that it does not share this process's GIL with the listener. 100-byte values.

* ``K1``: one idempotent producer, ``linger.ms=5``, ``acks=all``, until every message is
  acknowledged, timed from its first acknowledged message (as K2 is from
  ``init_transactions``: librdkafka takes ~1 s to connect and get its producer id, which
  would otherwise be most of a quick run); ``K1-embedded``: the engine's idempotent
  produce of batches of 100 (``produce_values`` with a producer name and sequence
  numbers).
* ``K2``: one transactional producer (``transactional.id``), 10 messages per
  transaction; ``K2-embedded``: ``begin(transactional_id=...)``, 10 ``txn.send``,
  ``commit``.
* ``K3``: a read_committed consumer (``assign`` from offset 0) draining the K1 topic;
  ``K3-embedded``: a read_committed subscription draining it (``receive(max=1000)`` and a
  cumulative ack per batch).

Targets: K1 >= 0.7 x K1-embedded, K2 >= 0.7 x K2-embedded, K3 >= 0.5 x K3-embedded.
The workloads are interleaved run by run.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from txnstream.api import Engine, EngineConfig
from txnstream.api.kafka import KafkaListener

from .core import (
    VALUE_SIZE,
    Figure,
    Samples,
    Settings,
    Target,
    collect_garbage,
    fresh_dir,
    group,
    progress,
)

TOPIC = "bench"

_PRODUCER = """
import os, sys, time
from confluent_kafka import Producer
bootstrap, count, size, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
value = os.urandom(size)
if mode == "idempotent":
    config = {"enable.idempotence": True, "linger.ms": 5, "acks": "all"}
else:
    config = {"transactional.id": "k2-bench", "linger.ms": 5}
producer = Producer({"bootstrap.servers": bootstrap, **config})
if mode == "transactional":
    producer.init_transactions(30)
else:  # connected and holding a producer id first, as init_transactions does for K2
    producer.produce("bench", value)
    assert producer.flush(30) == 0
started = time.perf_counter()
if mode == "idempotent":
    for _ in range(count):
        while True:
            try:
                producer.produce("bench", value)
                break
            except BufferError:
                producer.poll(0.005)
    assert producer.flush(120) == 0
else:
    for _ in range(count // 10):
        producer.begin_transaction()
        for _ in range(10):
            producer.produce("bench", value)
        producer.commit_transaction(30)
print(count / (time.perf_counter() - started))
"""

_CONSUMER = """
import sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, count = sys.argv[1], int(sys.argv[2])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "k3",
                     "isolation.level": "read_committed", "enable.auto.commit": False})
consumer.assign([TopicPartition("bench", 0, 0)])
started = time.perf_counter()
seen = 0
while seen < count:
    seen += sum(1 for m in consumer.consume(10000, 1.0) if m.error() is None)
print(count / (time.perf_counter() - started))
consumer.close()
"""


async def _client(script: str, *args: str) -> float:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, *args, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(child.communicate(), 600)
    if child.returncode != 0:
        raise AssertionError(f"the Kafka client failed ({child.returncode})")
    return float(out.decode().strip())


async def _kafka(path: Path, count: int) -> tuple[float, float, float]:
    """K1 (into ``bench``), K3 (draining it) and K2 (into a fresh topic) over Kafka."""
    async with Engine.open(path, EngineConfig()) as engine:
        await engine.create_topic(TOPIC)
        listener = KafkaListener(engine, "127.0.0.1", 0)
        await listener.start()
        bootstrap = f"127.0.0.1:{listener.port}"
        try:
            collect_garbage()
            k1 = await _client(_PRODUCER, bootstrap, str(count), str(VALUE_SIZE), "idempotent")
            k3 = await _client(_CONSUMER, bootstrap, str(count))
            await engine.delete_topic(TOPIC)
            await engine.create_topic(TOPIC)
            k2 = await _client(_PRODUCER, bootstrap, str(count), str(VALUE_SIZE), "transactional")
            stats = await engine.stats(TOPIC)
        finally:
            await listener.stop()
    if stats["entries"] != count + count // 10 or stats["open_txns"]:
        raise AssertionError(f"K2: expected {count} messages in transactions of 10: {stats}")
    return k1, k2, k3


async def _embedded(path: Path, count: int) -> tuple[float, float, float]:
    """The same three shapes on the embedded engine."""
    value = b"\x00" * VALUE_SIZE
    async with Engine.open(path, EngineConfig()) as engine:
        await engine.create_topic(TOPIC)
        collect_garbage()
        started = time.perf_counter()
        for sequence in range(0, count, 100):
            await engine.produce_values(
                TOPIC, [value] * 100, producer="k1-bench", sequence=sequence
            )
        k1 = count / (time.perf_counter() - started)
        sub = await engine.subscribe(TOPIC, "k3", isolation="read_committed")
        started = time.perf_counter()
        seen = 0
        while seen < count:
            messages = await sub.receive(max=1000, timeout=1.0)
            seen += len(messages)
            await sub.ack(messages[-1].position, cumulative=True)
        k3 = count / (time.perf_counter() - started)
        await engine.create_topic("bench-txn")
        started = time.perf_counter()
        for _ in range(count // 10):
            txn = await engine.begin(transactional_id="k2-bench")
            for _ in range(10):
                await txn.send("bench-txn", value)
            await txn.commit()
        k2 = count / (time.perf_counter() - started)
    return k1, k2, k3


@group(
    "K",
    "Kafka listener (confluent-kafka) vs the embedded engine, same shapes",
    ["K1", "K1-embedded", "K2", "K2-embedded", "K3", "K3-embedded"],
)
def kafka(settings: Settings) -> list[Figure]:
    """K figures: messages/s over the Kafka listener and embedded."""
    count = settings.size(200_000, 10_000)
    count -= count % 100
    samples = Samples()
    for run in range(settings.runs):
        passes = [("kafka", _kafka, ("K1", "K2", "K3")), ("embedded", _embedded, ())]
        if run % 2:
            passes.reverse()
        for tag, workload, ids in passes:
            with fresh_dir(f"k-{tag}") as path:
                rates = asyncio.run(workload(path, count))
            names = ids or ("K1-embedded", "K2-embedded", "K3-embedded")
            for figure_id, rate in zip(names, rates, strict=True):
                samples.add(figure_id, rate)
                progress(f"K run {run + 1}/{settings.runs} {figure_id}: {rate:,.0f} msg/s")
    figures = []
    for figure_id, ratio in (("K1", 0.7), ("K2", 0.7), ("K3", 0.5)):
        reference = f"{figure_id}-embedded"
        figures.append(
            Figure.of(
                figure_id,
                samples[figure_id],
                "msg/s",
                baseline=reference,
                target=Target(">=", ratio, reference),
            )
        )
        figures.append(Figure.of(reference, samples[reference], "msg/s"))
    return figures
