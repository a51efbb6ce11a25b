"""The fast path of produce and batch bodies accepts only what the request model accepts,
with the same messages: for any body, it either steps aside (None) or agrees with the
model's own validation (pydantic)."""

from __future__ import annotations

import base64
import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txnstream.api import Position, TooLargeError
from txnstream.api.http._json import positions_json
from txnstream.api.http._messages import _parse_fast, _parse_model
from txnstream.api.http._schemas import BASE64_PATTERN, BatchRequest, ProduceRequest

pytestmark = pytest.mark.timeout(120)

MAX_MESSAGES = 5
MAX_BYTES = 8

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
    "extra": json_values,
}
messages = st.fixed_dictionaries({}, optional=message_fields)
bodies = st.fixed_dictionaries(
    {"messages": st.lists(messages, max_size=MAX_MESSAGES + 1) | json_values},
    optional={
        "txn": st.sampled_from(["txn-1", "x" * 200, "x" * 201]) | json_values,
        "producer": st.just("p"),
        "sequence": st.integers(min_value=-1, max_value=3),
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


def _parse_plain(raw: bytes, max_messages: int, max_message_bytes: int) -> Any:
    return _parse_fast(raw, ProduceRequest, max_messages, max_message_bytes)


def slow(raw: bytes, model: Any = ProduceRequest) -> Any:
    """What the validated model alone makes of ``raw``: txn and messages (with their
    topics), or the error type."""
    try:
        parsed = _parse_model(raw, model, MAX_MESSAGES, MAX_BYTES, nonfinite=True)
    except Exception as exc:  # noqa: BLE001 - the error's type is the result
        return type(exc)
    out = parsed.pairs()
    return getattr(parsed.request, "txn", None), [(t, m.value, m.key, m.properties) for t, m in out]


def agree(raw: bytes, model: Any) -> bool:
    """The fast path steps aside or agrees with the model; True if it took the body."""
    expected = slow(raw, model)
    try:
        fast = _parse_fast(raw, model, MAX_MESSAGES, MAX_BYTES)
    except TooLargeError:
        assert expected is TooLargeError
        return True
    if fast is None:
        return False
    got_body, out = fast.request, fast.pairs()
    if fast.values is not None:  # taken as values alone: only when that is what they are
        assert model is ProduceRequest
        assert all(m.key is None and not m.properties for _, m in out)
    got = getattr(got_body, "txn", None), [(t, m.value, m.key, m.properties) for t, m in out]
    assert got == expected
    if model is ProduceRequest:
        assert (got_body.producer, got_body.sequence) == (None, None)
    return True


@settings(max_examples=600)
@given(bodies)
def test_the_fast_path_agrees_with_the_model_or_steps_aside(body: dict[str, Any]) -> None:
    agree(json.dumps(body).encode(), ProduceRequest)


@settings(max_examples=600)
@given(batch_bodies)
def test_the_batch_fast_path_agrees_with_the_model_or_steps_aside(body: dict[str, Any]) -> None:
    agree(json.dumps(body).encode(), BatchRequest)


def test_common_batch_bodies_take_the_fast_path() -> None:
    raw = json.dumps(
        {
            "messages": [
                {"topic": "orders", "value": {"id": 1}},
                {"topic": "audit", "value_b64": "AAE="},
            ]
        }
    ).encode()
    assert agree(raw, BatchRequest)
    assert not agree(b'{"messages": [{"topic": "orders\\n", "value": 1}]}', BatchRequest)


def test_the_common_bodies_take_the_fast_path() -> None:
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
    fast = _parse_plain(raw, MAX_MESSAGES, MAX_BYTES)
    assert fast is not None
    assert fast.values is None  # (a key and properties: messages)
    assert [(m.value, m.key, m.properties) for _, m in fast.messages] == [
        (b"\x00\x01", "k", {}),
        (base64.b64decode("NaN1e5AA"), None, {}),
        ({"a": [1, 2.5, None]}, None, {"p": "q"}),
    ]
    assert fast.request.txn == "txn-3"


def test_values_alone_are_parsed_as_values() -> None:
    raw = b'{"messages": [{"value_b64": "AAE="}, {"value": [1]}, {"value": 2, "properties": {}}]}'
    fast = _parse_plain(raw, MAX_MESSAGES, MAX_BYTES)
    assert fast is not None
    assert fast.values == [b"\x00\x01", [1], 2]


@pytest.mark.parametrize("size", range(MAX_BYTES - 3, MAX_BYTES + 4))
def test_values_near_the_size_limit(size: int) -> None:
    raw = json.dumps({"messages": [{"value_b64": base64.b64encode(bytes(size)).decode()}]})
    expected = slow(raw.encode())
    assert (expected is TooLargeError) == (size > MAX_BYTES)
    fast = _parse_plain(raw.encode(), MAX_MESSAGES, MAX_BYTES)
    if size > MAX_BYTES:
        assert fast is None, "the model path gives the 413"
    elif fast is not None:
        assert fast.values == [bytes(size)]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"messages": [{"value": "\\ud800"}]}',  # a lone surrogate: not JSON
        b'\xef\xbb\xbf{"messages": [{"value": 1}]}',  # a byte-order mark
        b'{"messages": [{"value": 1}], "producer": "p", "sequence": 1}',
        b'{"messages": [{"value": 1, "value_b64": "AA=="}]}',
        b'{"messages": [{"value_b64": "AAAA===="}]}',
        b'{"messages": [{"value": NaN}]}',
        b'{"messages": [{"value": [1, -Infinity]}]}',
        b'{"messages": [{"value": {"a": 1e400}}]}',
        b'{"messages": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
        b'{"messages": [{"value": ' + b"[" * 5000 + b"]" * 5000 + b"}]}",  # too deep to parse
    ],
)
def test_unusual_bodies_go_to_the_model(raw: bytes) -> None:
    assert _parse_plain(raw, MAX_MESSAGES, MAX_BYTES) is None


def test_base64_is_checked_exactly_as_the_schema_pattern() -> None:
    """Every text of up to 5 characters over a small alphabet, and some longer ones."""
    pattern = re.compile(BASE64_PATTERN)
    texts = ["".join(c) for n in range(6) for c in itertools.product("A/+=\né", repeat=n)]
    texts += ["AAAAAA==", "AAAAAAA=", "AAAAAAAA", "AAAA====", "AAAAA===", "AAAA\nAAA="]
    for text in texts:
        raw = json.dumps({"messages": [{"value_b64": text}]}).encode()
        fast = _parse_plain(raw, MAX_MESSAGES, 1 << 20)
        assert (fast is not None) == bool(pattern.fullmatch(text)), text


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
