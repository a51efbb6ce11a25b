"""One term of serving, swapped whole: what recovery rebuilds is one runtime object that
the engine replaces in one step, so no call sees a new store beside old topics; and the
messages it hands out are plain immutable values."""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

import pytest
from support import wait_until

import txnstream.api._lifecycle as lifecycle_module
from txnstream.api import (
    Engine,
    EngineConfig,
    EngineFailedError,
    Message,
    PartitionMessage,
)

pytestmark = pytest.mark.timeout(60)


async def _healthy(engine: Engine) -> bool:
    return engine.health().status == "ok"


async def test_an_in_place_recovery_swaps_the_whole_term_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a recovery rebuilds, the engine holds no part of either term (calls answer
    "recovering"); once it is done every part is the new store's, the old store is
    closed, and what was acknowledged before is all there."""
    engine = await Engine.open(tmp_path / "data", EngineConfig(min_free_bytes=0))
    try:
        await engine.create_topic("t")
        await engine.create_topic("p", partitions=2)
        await engine.set_ttl("t", 60_000)
        sent = await engine.send_many("t", [1, 2, 3])
        async with engine.transaction() as txn:
            await txn.send("p", "in a txn")
        old = engine._core.runtime
        assert old is not None

        loading = asyncio.Event()
        go_on = asyncio.Event()
        load_runtime = lifecycle_module.load_runtime

        async def held_load(*args: object, **kwargs: object) -> object:
            loading.set()
            await go_on.wait()
            return await load_runtime(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(lifecycle_module, "load_runtime", held_load)
        engine._lifecycle.fail(RuntimeError("a background task failed"))  # recovery starts now
        await asyncio.wait_for(loading.wait(), 10)
        assert engine._core.runtime is None  # the old term is gone whole, the new not yet in
        assert old.store.closed
        with pytest.raises(EngineFailedError, match="recovering"):
            await engine.stats("t")
        assert engine.partitions_of("p") is None
        go_on.set()
        await wait_until(lambda: _healthy(engine), 10, "recovered")

        new = engine._core.runtime
        assert new is not None
        assert new is not old
        assert not new.store.closed
        for topic in new.topics.values():  # every part was built from the new store
            assert topic.ledger.store is new.store
            assert new.coordinator._resolve_topic(topic.name) is topic
        assert sorted(new.topics) == ["p-partition-0", "p-partition-1", "t"]
        assert new.partitioned.keys() == {"p"}
        assert new.ttl == {"t": 60_000}
        sub = await engine.subscribe("t", "s")
        assert [m.position for m in await sub.receive(max=10, timeout=1)] == sent
        assert (await engine.stats("p"))["entries"] == 2  # the message and its commit
    finally:
        await engine.close()


async def test_messages_are_immutable_values_not_tuples(engine: Engine) -> None:
    await engine.create_topic("t")
    await engine.create_topic("p", partitions=2)
    await engine.send("t", {"id": 1}, key="k", properties={"a": "b"})
    await engine.send("p", "x", key="k")
    message = (await (await engine.subscribe("t", "s")).receive(timeout=1))[0]
    partitioned = (await (await engine.subscribe("p", "s")).receive(timeout=1))[0]
    assert isinstance(partitioned, PartitionMessage)
    for m in (message, partitioned):
        assert isinstance(m, Message)
        assert not isinstance(m, tuple)
        with pytest.raises(TypeError):
            len(m)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            m[0]  # type: ignore[index]
        with pytest.raises(AttributeError):
            m.value = "changed"  # type: ignore[misc]
        again = pickle.loads(pickle.dumps(m))  # (what Spark does with what it ships)
        assert again == m
        assert type(again) is type(m)
        assert repr(again) == repr(m)
    assert message.value == {"id": 1}
    assert message.key == "k"
    assert message.properties == {"a": "b"}
    assert repr(message).startswith(f"Message(position={message.position!r}, value={{'id': 1}}")
    assert partitioned.topic == f"p-partition-{partitioned.partition}"
    assert str(partitioned.position).endswith(f":{partitioned.partition}")
    assert message != partitioned
