"""Bad input gets a distinct, clear error, and nothing of the failed call is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import drain, make_topics, values

from txnstream.api import (
    ClosedError,
    Engine,
    EngineConfig,
    InvalidArgumentError,
    NotFoundError,
    OutgoingMessage,
    SubscriptionNotFoundError,
    TooLargeError,
    TopicNotFoundError,
)

BAD_NAMES: list[Any] = [
    "",
    "has space",
    "slash/name",
    "x" * 201,
    "ünïcode",
    "a:b",
    ".",
    "..",
    5,
    None,
]
RESERVED = ["__internal", "__"]


@pytest.mark.parametrize("name", BAD_NAMES + RESERVED)
async def test_invalid_or_reserved_topic_name_is_an_invalid_argument(
    engine: Engine, name: Any
) -> None:
    with pytest.raises(InvalidArgumentError):
        await engine.create_topic(name)
    with pytest.raises(ValueError):  # noqa: PT011 - the builtin a caller may catch
        await engine.create_topic(name)
    with pytest.raises(InvalidArgumentError):
        await engine.send(name, "v")
    assert await engine.list_topics() == []


@pytest.mark.parametrize("name", BAD_NAMES + RESERVED)
async def test_invalid_or_reserved_subscription_name_is_an_invalid_argument(
    engine: Engine, name: Any
) -> None:
    await make_topics(engine, "t")
    before = await engine.stats("t")
    with pytest.raises(InvalidArgumentError):
        await engine.subscribe("t", name)
    with pytest.raises(ValueError):  # noqa: PT011
        await engine.create_subscription("t", name)
    assert await engine.stats("t") == before


async def test_longest_valid_names_are_accepted(engine: Engine) -> None:
    name = "a" * 200
    assert await engine.create_topic(name) is True
    await engine.subscribe(name, "Sub-1.x_y")
    assert await engine.list_topics() == [name]


async def test_unknown_topic_and_subscription_are_not_found(engine: Engine) -> None:
    with pytest.raises(TopicNotFoundError):
        await engine.send("missing", 1)
    with pytest.raises(TopicNotFoundError):
        await engine.subscribe("missing", "s")
    with pytest.raises(TopicNotFoundError):
        await engine.stats("missing")
    with pytest.raises(TopicNotFoundError):
        await engine.delete_topic("missing")
    txn = await engine.begin()
    with pytest.raises(TopicNotFoundError):
        await txn.send("missing", 1)
    assert (await engine.get_transaction(txn.id)).topics == []

    await make_topics(engine, "t")
    with pytest.raises(SubscriptionNotFoundError):
        await engine.receive("t", "missing", timeout=0)
    with pytest.raises(SubscriptionNotFoundError):
        await engine.ack("t", "missing", ["0:0"])
    with pytest.raises(SubscriptionNotFoundError):
        await engine.seek("t", "missing", "earliest")
    with pytest.raises(NotFoundError):
        await engine.delete_subscription("t", "missing")


@pytest.mark.parametrize("value", [object(), {1, 2}, 2**70, {"nested": object()}])
async def test_value_msgpack_cannot_encode_is_rejected_and_nothing_stored(
    engine: Engine, value: Any
) -> None:
    await make_topics(engine, "t")
    await engine.send("t", "ok")
    before = await engine.stats("t")
    txn = await engine.begin()

    with pytest.raises(InvalidArgumentError):
        await engine.send("t", value)
    with pytest.raises(TypeError):
        await engine.send("t", value)
    with pytest.raises(InvalidArgumentError):
        await engine.send_many("t", ["fine", value, "fine too"])
    with pytest.raises(InvalidArgumentError):
        await txn.send("t", value)
    with pytest.raises(InvalidArgumentError):
        await txn.send_many("t", ["fine", value])

    assert await engine.stats("t") == before
    assert (await engine.get_transaction(txn.id)).topics == []
    await txn.commit()
    assert values(await drain(await engine.subscribe("t", "s"))) == ["ok"]


@pytest.mark.parametrize(
    "message",
    [
        OutgoingMessage("v", key=5),  # type: ignore[arg-type]
        OutgoingMessage("v", properties={"k": 1}),  # type: ignore[dict-item]
        OutgoingMessage("v", properties={1: "v"}),  # type: ignore[dict-item]
    ],
)
async def test_bad_key_or_properties_are_rejected(engine: Engine, message: Any) -> None:
    await make_topics(engine, "t")
    with pytest.raises(InvalidArgumentError):
        await engine.produce("t", [message])
    assert (await engine.stats("t"))["entries"] == 0


@pytest.mark.parametrize("messages", [[], "abc", b"abc", OutgoingMessage("v"), ["not a message"]])
async def test_malformed_message_lists_are_rejected(engine: Engine, messages: Any) -> None:
    await make_topics(engine, "t")
    with pytest.raises(InvalidArgumentError):
        await engine.produce("t", messages)
    assert (await engine.stats("t"))["entries"] == 0


async def test_send_many_requires_a_list(engine: Engine) -> None:
    await make_topics(engine, "t")
    for bad in ("abc", b"abc", {"a": 1}, 5):
        with pytest.raises(InvalidArgumentError):
            await engine.send_many("t", bad)  # type: ignore[arg-type]
    assert (await engine.stats("t"))["entries"] == 0


async def test_value_over_the_size_limit_is_too_large_and_nothing_stored(
    data_dir: Path,
) -> None:
    async with Engine.open(data_dir, EngineConfig(max_message_bytes=1024)) as engine:
        await make_topics(engine, "t")
        await engine.send("t", b"x" * 1000)  # fits (1003 encoded bytes)
        before = await engine.stats("t")
        txn = await engine.begin()

        with pytest.raises(TooLargeError):
            await engine.send("t", b"x" * 2000)
        with pytest.raises(TooLargeError):
            await engine.send_many("t", ["small", "y" * 5000])
        with pytest.raises(TooLargeError):
            await txn.send("t", {"blob": "z" * 4096})

        assert await engine.stats("t") == before
        assert (await engine.get_transaction(txn.id)).state == "open"
        assert (await engine.get_transaction(txn.id)).topics == []
        await txn.commit()
        got = await drain(await engine.subscribe("t", "s"))
        assert values(got) == [b"x" * 1000]


async def test_default_size_limit_is_five_mib(engine: Engine) -> None:
    await make_topics(engine, "t")
    with pytest.raises(TooLargeError):
        await engine.send("t", b"x" * (5 * 1024 * 1024 + 1))
    assert (await engine.stats("t"))["entries"] == 0
    await engine.send("t", b"x" * (5 * 1024 * 1024 - 16))
    assert (await engine.stats("t"))["entries"] == 1


@pytest.mark.parametrize(
    ("kwargs"),
    [
        {"type": "bogus"},
        {"isolation": "serializable"},
        {"initial_position": "middle"},
        {"initial_position": "0:0"},
    ],
)
async def test_bad_subscription_settings_are_rejected(
    engine: Engine, kwargs: dict[str, str]
) -> None:
    await make_topics(engine, "t")
    with pytest.raises(InvalidArgumentError):
        await engine.subscribe("t", "s", **kwargs)
    assert (await engine.stats("t"))["subscriptions"] == {}


@pytest.mark.parametrize("position", ["", "1", "a:b", "-1:0", "1:2:3"])
async def test_malformed_positions_are_rejected(engine: Engine, position: str) -> None:
    await make_topics(engine, "t")
    await engine.send("t", "v")
    sub = await engine.subscribe("t", "s")
    before = await engine.stats("t")
    with pytest.raises(InvalidArgumentError):
        await sub.ack(position)
    with pytest.raises(InvalidArgumentError):
        await sub.seek(position)
    with pytest.raises(InvalidArgumentError):
        await sub.nack([position])
    assert await engine.stats("t") == before


async def test_ack_beyond_the_last_entry_is_rejected(engine: Engine) -> None:
    await make_topics(engine, "t")
    pos = await engine.send("t", "v")
    sub = await engine.subscribe("t", "s")
    with pytest.raises(InvalidArgumentError):
        await sub.ack(f"{pos.ledger_id}:{pos.entry_id + 5}")
    assert (await engine.stats("t"))["subscriptions"]["s"]["mark_delete"] is None


@pytest.mark.parametrize("kwargs", [{"max": 0}, {"max": 10_001}, {"timeout": -1}])
async def test_bad_receive_arguments_are_rejected(engine: Engine, kwargs: dict[str, Any]) -> None:
    await make_topics(engine, "t")
    sub = await engine.subscribe("t", "s")
    with pytest.raises(InvalidArgumentError):
        await sub.receive(**kwargs)


async def test_calls_after_close_raise_closed_error(data_dir: Path) -> None:
    engine = await Engine.open(data_dir)
    await make_topics(engine, "t")
    await engine.close()
    await engine.close()  # idempotent
    with pytest.raises(ClosedError):
        await engine.send("t", 1)
    with pytest.raises(ClosedError):
        await engine.begin()


async def test_a_batch_of_values_reports_its_first_bad_value(data_dir: Path) -> None:
    # produce_values packs every value before it checks sizes: the error must still be
    # the first bad value's, as for a batch of messages
    async with Engine.open(data_dir, EngineConfig(max_message_bytes=64)) as engine:
        await make_topics(engine, "t")
        with pytest.raises(TooLargeError):
            await engine.produce_values("t", ["ok", b"x" * 100, object()])
        with pytest.raises(InvalidArgumentError):
            await engine.produce_values("t", ["ok", object(), b"x" * 100])
        for bad in ([], "abc", b"abc", {"a": 1}):
            with pytest.raises(InvalidArgumentError):
                await engine.produce_values("t", bad)
        assert (await engine.stats("t"))["entries"] == 0


async def test_values_alone_are_stored_as_the_same_messages_would_be(engine: Engine) -> None:
    await make_topics(engine, "a", "b")
    batch: list[Any] = [b"\x00", "text", {"k": [1, 2.5, None]}, 7, None, True]
    plain = await engine.produce_values("a", batch, producer="p", sequence=0)
    again = await engine.produce_values("a", batch, producer="p", sequence=0)
    messages = await engine.produce("b", [OutgoingMessage(v) for v in batch])
    assert again.duplicate
    assert again.positions == plain.positions == messages.positions
    got_a = await drain(await engine.subscribe("a", "s"))
    got_b = await drain(await engine.subscribe("b", "s"))
    assert values(got_a) == values(got_b) == batch
    assert [(m.key, m.properties) for m in got_a] == [(None, {})] * len(batch)
