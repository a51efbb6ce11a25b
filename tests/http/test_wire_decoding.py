"""Produce and batch bodies are decoded by their one declaration (``_wire``): whatever
the decoder accepts, the schema ``/openapi.json`` publishes accepts too, and whatever it
refuses is a 400 (or a 413), never another error; values alone take the no-message path."""

from __future__ import annotations

import base64
import itertools
import json
import re
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txnstream.api import InvalidArgumentError, Position, TooLargeError
from txnstream.api.http._json import positions_json
from txnstream.api.http._messages import _decode
from txnstream.api.http._wire import (
    BASE64_PATTERN,
    REF,
    BatchRequest,
    ProduceRequest,
    openapi_components,
)

pytestmark = pytest.mark.timeout(120)

MAX_MESSAGES = 5
MAX_BYTES = 8
COMPONENTS = openapi_components()

texts = st.text(max_size=6) | st.sampled_from(["\ud800", "a\nb", "é", ""])
json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
b64_texts = (
    st.binary(max_size=12).map(lambda b: base64.b64encode(b).decode())
    | st.sampled_from(
        [base64.b64encode(bytes(n)).decode() for n in range(MAX_BYTES - 2, MAX_BYTES + 3)]
    )
    | st.sampled_from(["AAAA====", "A===", "AA=A", "AAA", "=AAA", "AA==\n", "not base64", ""])
)
message_fields = {
    "value": json_values,
    "value_b64": b64_texts | json_values,
    "key": texts | json_values,
    "properties": st.dictionaries(texts, texts, max_size=2) | json_values,
    "deliver_after_ms": st.sampled_from([0, 1000, -1, None, "1"]),
    "deliver_at": st.sampled_from(["2026-11-27T04:00:00Z", "tomorrow", "9999-01-01", None]),
    "extra": json_values,
}
messages = st.fixed_dictionaries({}, optional=message_fields)
bodies = st.fixed_dictionaries(
    {"messages": st.lists(messages, max_size=MAX_MESSAGES + 1) | json_values},
    optional={
        "txn": st.sampled_from(["txn-1", "x" * 200, "x" * 201]) | json_values,
        "producer": st.sampled_from(["p", ""]),
        "sequence": st.integers(min_value=-1, max_value=3) | st.just(2**63 - 1),
    },
)
topics = st.sampled_from(["orders", "a.b-c_d", "_x", "__internal", "orders\n", "", "x" * 201])
batch_bodies = st.fixed_dictionaries(
    {
        "messages": st.lists(
            st.fixed_dictionaries({"topic": topics | json_values}, optional=message_fields)
            | messages,
            max_size=MAX_MESSAGES + 1,
        )
        | json_values
    },
    optional={"txn": st.just("txn-1"), "extra": json_values},
)


def schema_of(shape: type[Any]) -> jsonschema.Draft202012Validator:
    """A validator of ``shape``'s schema as the OpenAPI document publishes it."""
    root = {"components": {"schemas": COMPONENTS}, "$ref": REF.format(name=shape.__name__)}
    return jsonschema.Draft202012Validator(root)


def accepted_bodies_are_documented(body: dict[str, Any], shape: type[Any]) -> None:
    raw = json.dumps(body).encode()
    try:
        decoded, parsed = _decode(raw, shape, MAX_MESSAGES, MAX_BYTES)
    except (InvalidArgumentError, TooLargeError):
        return
    schema_of(shape).validate(body)
    assert len(parsed.raw) == len(body["messages"])
    if parsed.values is not None:  # values alone: only when that is what they are
        assert shape is ProduceRequest
        assert all(not m.key and not m.properties for m in decoded.messages)


@settings(max_examples=400)
@given(bodies)
def test_an_accepted_produce_body_is_valid_by_the_published_schema(body: dict[str, Any]) -> None:
    accepted_bodies_are_documented(body, ProduceRequest)


@settings(max_examples=400)
@given(batch_bodies)
def test_an_accepted_batch_body_is_valid_by_the_published_schema(body: dict[str, Any]) -> None:
    accepted_bodies_are_documented(body, BatchRequest)


def test_the_common_bodies_decode_to_their_messages() -> None:
    raw = json.dumps(
        {
            "messages": [
                {"value_b64": base64.b64encode(b"\x00\x01").decode(), "key": "k"},
                {"value_b64": "NaN1e5AA"},  # base64 that looks like a non-finite number
                {"value": {"a": [1, 2.5, None]}, "properties": {"p": "q"}},
            ],
            "txn": "txn-3",
        }
    ).encode()
    body, parsed = _decode(raw, ProduceRequest, MAX_MESSAGES, MAX_BYTES)
    assert parsed.values is None  # (a key and properties: messages)
    assert [(m.value, m.key, m.properties) for m in parsed.messages(body.messages)] == [
        (b"\x00\x01", "k", {}),
        (base64.b64decode("NaN1e5AA"), None, {}),
        ({"a": [1, 2.5, None]}, None, {"p": "q"}),
    ]
    assert body.txn == "txn-3"
    raw = b'{"messages": [{"topic": "orders", "value": 1}, {"topic": "a.b", "value_b64": "AA=="}]}'
    body, parsed = _decode(raw, BatchRequest, MAX_MESSAGES, MAX_BYTES)
    assert [(m.topic, v) for m, v in zip(body.messages, parsed.raw, strict=True)] == [
        ("orders", 1),
        ("a.b", b"\x00"),
    ]


def test_values_alone_are_decoded_as_values() -> None:
    raw = b'{"messages": [{"value_b64": "AAE="}, {"value": [1]}, {"value": 2, "properties": {}}]}'
    _, parsed = _decode(raw, ProduceRequest, MAX_MESSAGES, MAX_BYTES)
    assert parsed.values == [b"\x00\x01", [1], 2]
    delayed = b'{"messages": [{"value": 1, "deliver_after_ms": 5}]}'
    body, parsed = _decode(delayed, ProduceRequest, MAX_MESSAGES, MAX_BYTES)
    assert parsed.values is None
    assert parsed.messages(body.messages)[0].deliver_at_ms is not None


@pytest.mark.parametrize("size", range(MAX_BYTES - 3, MAX_BYTES + 4))
def test_values_near_the_size_limit(size: int) -> None:
    raw = json.dumps({"messages": [{"value_b64": base64.b64encode(bytes(size)).decode()}]})
    if size > MAX_BYTES:
        with pytest.raises(TooLargeError, match=f"{size} bytes exceeds the limit"):
            _decode(raw.encode(), ProduceRequest, MAX_MESSAGES, MAX_BYTES)
    else:
        assert _decode(raw.encode(), ProduceRequest, MAX_MESSAGES, MAX_BYTES)[1].values == [
            bytes(size)
        ]


def test_more_messages_than_the_limit_are_too_large() -> None:
    raw = json.dumps({"messages": [{"value": i} for i in range(MAX_MESSAGES + 1)]}).encode()
    with pytest.raises(TooLargeError, match="6 messages in one request exceed the limit of 5"):
        _decode(raw, ProduceRequest, MAX_MESSAGES, MAX_BYTES)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'{"messages": [{"value": "\\ud800"}]}', "lone surrogates"),
        (b'\xef\xbb\xbf{"messages": [{"value": 1}]}', "malformed JSON"),  # a byte-order mark
        (b'{"messages": [{"value": 1}], "producer": "p"}', "'producer' and 'sequence'"),
        (b'{"messages": [{"value": 1, "value_b64": "AA=="}]}', "exactly one of 'value'"),
        (b'{"messages": [{"value_b64": "AAAA===="}]}', "base64"),
        (b'{"messages": [{"value": NaN}]}', "NaN"),
        (b'{"messages": [{"value": [1, -Infinity]}]}', "Infinity"),
        (b'{"messages": [{"value": {"a": 1e400}}]}', "out of range"),
        (b'{"messages": [' + b"[" * 5000 + b"]" * 5000 + b"]}", "Expected `object`"),
        (b'{"messages": [{"value": ' + b"[" * 5000 + b"]" * 5000 + b"}]}", "nested too deep"),
        (b'{"messages": [{"value": 1, "deliver_at": "tomorrow"}]}', "not ISO 8601"),
        (b'{"messages": [{"value": 1, "sequence": "1"}]}', "unknown field `sequence`"),
        (b'{"messages": [{"value": 1}], "txn": 7}', "Expected `str | null`, got `int`"),
    ],
)
def test_bodies_the_contract_refuses_are_invalid_requests(raw: bytes, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(says)):
        _decode(raw, ProduceRequest, MAX_MESSAGES, MAX_BYTES)


def test_base64_is_decoded_exactly_as_the_schema_pattern_says() -> None:
    """Every text of up to 5 characters over a small alphabet, and some longer ones."""
    pattern = re.compile(BASE64_PATTERN)
    assert COMPONENTS["MessageIn"]["properties"]["value_b64"]["pattern"] == BASE64_PATTERN
    texts = ["".join(c) for n in range(6) for c in itertools.product("A/+=\né", repeat=n)]
    texts += ["AAAAAA==", "AAAAAAA=", "AAAAAAAA", "AAAA====", "AAAAA===", "AAAA\nAAA="]
    for text in texts:
        raw = json.dumps({"messages": [{"value_b64": text}]}).encode()
        try:
            _decode(raw, ProduceRequest, MAX_MESSAGES, 1 << 20)
        except InvalidArgumentError:
            assert not pattern.fullmatch(text), text
        else:
            assert pattern.fullmatch(text), text


positions = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**40)), max_size=6).map(
    lambda pairs: [Position(*pair) for pair in pairs]
)
runs = st.builds(
    lambda ledger, first, count: [Position(ledger, first + i) for i in range(count)],
    st.integers(0, 2**40),
    st.integers(0, 2**40),
    st.integers(0, 300),
)


@given(positions | runs | st.builds(lambda a, b: a + b, runs, runs))
def test_an_answer_lists_every_position_as_json_does(given_positions: list[Position]) -> None:
    # a run of one ledger is written by one join; anything else position by position
    assert json.loads(positions_json(given_positions)) == [str(p) for p in given_positions]


@given(positions.map(lambda ps: sorted(set(ps))) | runs)
def test_increasing_positions_are_listed_as_json_does(given_positions: list[Position]) -> None:
    expected = [str(p) for p in given_positions]
    assert json.loads(positions_json(given_positions, increasing=True)) == expected


class Opaque:
    def __str__(self) -> str:
        return "opaque"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, b"\x00\x01"], 7: 2.5}, {"a": [1, "AAE="], "7": 2.5}),
        ([float("nan"), float("inf"), 2**80], [None, None, 2**80]),
        ({"text": "a\ud800b", "when": Opaque()}, {"text": "a\ud800b", "when": "opaque"}),
    ],
)
def test_any_stored_value_encodes_as_json(value: Any, expected: Any) -> None:
    """Values the embedded API may have stored (bytes, int keys, non-finite floats, lone
    surrogates, other objects) never fail an answer."""
    from txnstream.api.http._wire import encode

    assert json.loads(encode({"value": value})) == {"value": expected}
