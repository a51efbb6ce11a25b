"""One value model for every client (issue 31 item 1): what the engine stores is what
every reader gets back; anything else is ``InvalidArgumentError`` at the call, saying
where in the value and what is wrong, and nothing is stored.

The property test sends arbitrary Python values (NaN, tuples, int keys, nested bytes,
sets, huge ints, lone surrogates among them) through the embedded API and reads every
accepted one back through embedded ``receive``, embedded ``fetch`` and HTTP (the real
application over an in-process transport, on the same engine), and produces it over HTTP
too. Which values are accepted is checked against an independent oracle: a JSON round
trip that gives back the same types, or bytes as the whole value.
"""

from __future__ import annotations

import base64
import enum
import json
import math
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import drain, values

from txnstream.api import Engine, EngineConfig, InvalidArgumentError, OutgoingMessage
from txnstream.api.http import create_app

pytestmark = pytest.mark.timeout(300)

MAX_DEPTH = 500  # the documented nesting limit (docs/embedded-api.md, "Values")


def nested(depth: int, leaf: Any = 1) -> Any:
    """``leaf`` inside ``depth`` levels of lists and dicts, alternating."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (1 is not 1.0 nor True; -0.0 is not
    0.0; a tuple is not a list). Iterative: values nest 500 deep."""
    pairs = [(a, b)]
    while pairs:
        x, y = pairs.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if x.keys() != y.keys():
                return False
            pairs.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            pairs.extend(zip(x, y, strict=True))
        elif repr(x) != repr(y) if isinstance(x, float) else x != y:
            return False
    return True


def depth_of(value: Any) -> int:
    if isinstance(value, dict | list | tuple | set | frozenset):
        items = value.values() if isinstance(value, dict) else value
        return 1 + max(map(depth_of, items), default=0)
    return 0


def in_model(value: Any) -> bool:
    """The oracle: bytes as the whole value, or a value a JSON round trip gives back with
    the same types, whose ints fit msgpack (-2**63 .. 2**64-1) and whose text is UTF-8."""
    if type(value) is bytes:
        return True
    try:
        text = json.dumps(value, allow_nan=False)
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # no lone surrogate
    except (TypeError, ValueError):
        return False
    ints = [v for v in _leaves(value) if type(v) is int]
    return (
        same(json.loads(text), value)
        and all(-(2**63) <= v < 2**64 for v in ints)
        and depth_of(value) <= MAX_DEPTH
    )


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


texts = st.text(max_size=4) | st.sampled_from(["\ud800", "é", "a\x00b", ""])
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**63 - 1, -(2**63), 2**64 - 1, 2**64, -(2**63) - 1, 2**70])
    | st.floats()  # NaN and ±Infinity included
    | texts
)
any_values: st.SearchStrategy[Any] = st.recursive(
    scalars | st.binary(max_size=3),  # bytes at the leaves: nested ones are refused
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=2).map(tuple)
        | st.dictionaries(texts, inner, max_size=3)
        | st.dictionaries(st.integers(0, 3) | st.booleans() | st.none(), inner, max_size=2)
        | st.frozensets(st.integers(0, 9), max_size=2)
    ),
    max_leaves=8,
)


def b64(value: Any) -> dict[str, Any]:
    """A message's value as HTTP writes it."""
    if isinstance(value, bytes):
        return {"value_b64": base64.b64encode(value).decode()}
    return {"value": value}


def from_http(item: dict[str, Any]) -> Any:
    """A value as HTTP gives it back."""
    if "value_b64" in item:
        return base64.b64decode(item["value_b64"])
    return item["value"]


@pytest.fixture
async def served() -> AsyncIterator[tuple[Engine, httpx.AsyncClient]]:
    with tempfile.TemporaryDirectory() as tmp:
        async with Engine.open(tmp, EngineConfig(durability="normal")) as engine:
            transport = httpx.ASGITransport(app=create_app(engine))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                yield engine, http


@settings(max_examples=50)
@given(sent=st.lists(any_values, min_size=1, max_size=6))
async def test_a_value_is_refused_and_not_stored_or_read_back_the_same_everywhere(
    sent: list[Any],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with Engine.open(tmp, EngineConfig(durability="normal")) as engine:
            transport = httpx.ASGITransport(app=create_app(engine))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                await _round_trips(engine, http, sent)


async def _round_trips(engine: Engine, http: httpx.AsyncClient, sent: list[Any]) -> None:
    await engine.create_topic("t")
    sub = await engine.subscribe("t", "s")
    kept = []
    for value in sent:
        before = (await engine.stats("t"))["entries"]
        if not in_model(value):
            with pytest.raises(InvalidArgumentError):
                await engine.send("t", value)
            assert (await engine.stats("t"))["entries"] == before
            continue
        await engine.send("t", value)
        kept.append(value)
    # over HTTP, produced: what JSON can say of the accepted values
    if kept:
        answer = await http.post("/v1/topics/t/messages", json={"messages": list(map(b64, kept))})
        assert answer.status_code == 200, answer.text
    expected = kept + kept
    got = values(await drain(sub, idle=0.05))
    assert len(got) == len(expected)
    assert all(map(same, got, expected)), (got, expected)
    fetched = await engine.fetch("t", "earliest")
    assert all(map(same, [e.value for e in fetched.entries], expected))
    answer = await http.get("/v1/topics/t/fetch", params={"from": "earliest"})
    entries = answer.json()["entries"]
    assert all(map(same, map(from_http, entries), expected)), (entries, expected)


class Level(enum.IntEnum):
    LOW = 1


REFUSED: list[tuple[Any, str]] = [
    (math.nan, "value is nan: a number must be finite"),
    (math.inf, "value is inf: a number must be finite"),
    ({"a": [1, -math.inf]}, "value['a'][1] is -inf: a number must be finite"),
    ({1: "x"}, "value has the key 1 (int): the keys of a dict must be strings"),
    ({"a": {None: 1}}, "value['a'] has the key None (NoneType)"),
    ({"b": b"\x00"}, "value['b'] is bytes: bytes are a value only as a whole"),
    ([1, bytearray(b"x")], "value[1] is bytes"),
    ((1, 2), "value is a tuple: send a list"),
    ({"t": ("a",)}, "value['t'] is a tuple"),
    ({1, 2}, "value has type set"),
    (object(), "value has type object"),
    (nested(MAX_DEPTH + 1), f"value nests lists and dicts more than {MAX_DEPTH} deep"),
    ([2**64], "value[0] is 18446744073709551616: an integer must lie in -2**63 .. 2**64-1"),
    ({"s": "a\ud800"}, "value['s'] is not valid text"),
    ({"\udfff": 1}, "a key of value is not valid text"),
]


@pytest.mark.parametrize(("value", "reason"), REFUSED, ids=lambda v: repr(v)[:30])
async def test_every_produce_path_refuses_with_the_reason_and_stores_nothing(
    engine: Engine, value: Any, reason: str
) -> None:
    await engine.create_topic("t")
    await engine.create_topic("u")
    await engine.create_topic("parts", partitions=3)
    before = {name: await engine.stats(name) for name in ("t", "u")}

    async def in_txn(send_many: bool) -> None:
        txn = await engine.begin()
        await txn.send("t", b"first")  # so that the next send takes the fast path
        try:
            if send_many:
                await txn.send_many("t", [b"ok", value])
            else:
                await txn.send("t", value)
        finally:
            await txn.abort()

    calls = {
        "send": lambda: engine.send("t", value),
        "send with a key": lambda: engine.send("t", value, key="k", properties={"p": "q"}),
        "send_many": lambda: engine.send_many("t", [b"ok", value]),
        "produce": lambda: engine.produce("t", [OutgoingMessage("ok"), OutgoingMessage(value)]),
        "produce_values": lambda: engine.produce_values("t", ["ok", value]),
        "large produce_values": lambda: engine.produce_values("t", ["ok"] * 2500 + [value]),
        "txn.send": lambda: in_txn(False),
        "txn.send_many": lambda: in_txn(True),
        "send_batch": lambda: engine.send_batch([("u", "ok"), ("t", value)]),
        "partitioned send": lambda: engine.send("parts", value, key="k"),
        "partitioned produce": lambda: engine.produce_values("parts", [1, value]),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidArgumentError) as caught:
            await call()
        assert reason in str(caught.value), (name, str(caught.value))
    after = {name: await engine.stats(name) for name in ("t", "u")}
    assert after["u"] == before["u"]
    assert after["t"]["entries"] == 4  # the two aborted transactions' first sends and markers
    for partition in range(3):
        assert (await engine.stats(f"parts-partition-{partition}"))["entries"] == 0


async def test_a_batch_names_the_message_refused(engine: Engine) -> None:
    await engine.create_topic("t")
    with pytest.raises(InvalidArgumentError, match=r"^message 2: value\['x'\] is nan"):
        await engine.send_many("t", [1, 2, {"x": math.nan}, (3,)])
    with pytest.raises(InvalidArgumentError, match=r"^message 1: value is a tuple"):
        await engine.send_batch([("t", 1), ("t", (2,)), ("t", math.nan)])


async def test_what_is_accepted_reads_back_as_sent(
    served: tuple[Engine, httpx.AsyncClient],
) -> None:
    """Top-level bytes stay bytes (bytearray and memoryview are read back as bytes), deep
    nesting up to the limit, msgpack's integer range, and subclasses as their base type."""
    engine, http = served
    await engine.create_topic("t")
    sub = await engine.subscribe("t", "s")
    sent: list[Any] = [
        b"\x00raw",
        bytearray(b"ba"),
        memoryview(b"mv"),
        b"",
        nested(MAX_DEPTH),
        {"n": [-(2**63), 2**64 - 1, -0.0, 1e308, 5e-324]},
        Level.LOW,
        OrderedDict(a=1),
        {"é": "\x00", "": [None, True, False, {}, []]},
    ]
    expected: list[Any] = [
        b"\x00raw",
        b"ba",
        b"mv",
        b"",
        nested(MAX_DEPTH),
        {"n": [-(2**63), 2**64 - 1, -0.0, 1e308, 5e-324]},
        1,
        {"a": 1},
        {"é": "\x00", "": [None, True, False, {}, []]},
    ]
    for value in sent:
        await engine.send("t", value)
    txn = await engine.begin()  # the fast path too
    for value in sent:
        await txn.send("t", value)
    await txn.commit()
    got = values(await drain(sub, idle=0.05))
    assert all(map(same, got, expected + expected)), got
    answer = await http.get("/v1/topics/t/fetch", params={"from": "earliest", "max": 9})
    assert all(map(same, map(from_http, answer.json()["entries"]), expected))


async def test_http_refuses_too_deep_a_value_as_embedded_does(
    served: tuple[Engine, httpx.AsyncClient],
) -> None:
    engine, http = served
    await engine.create_topic("t")
    deep = '{"messages": [{"value": ' + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1) + "}]}"
    answer = await http.post(
        "/v1/topics/t/messages", content=deep, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_request"
    assert f"more than {MAX_DEPTH} deep" in error["message"]
    assert (await engine.stats("t"))["entries"] == 0
    fine = '{"messages": [{"value": ' + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}]}"
    answer = await http.post(
        "/v1/topics/t/messages", content=fine, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 200, answer.text
    answer = await http.get("/v1/topics/t/fetch", params={"from": "earliest"})
    assert answer.json()["entries"][0]["value"] == json.loads(fine)["messages"][0]["value"]
