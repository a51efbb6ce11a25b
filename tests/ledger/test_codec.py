from __future__ import annotations

import gc
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnstream.ledger import (
    CorruptEntryError,
    InvalidArgumentError,
    decode_payload,
    decode_payloads,
    encode_payload,
    encode_payloads,
    encode_value,
)

json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(
    st.none() | st.text(max_size=20),
    json_like,
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    st.integers(min_value=0, max_value=2**53),
)
def test_payload_round_trip_keeps_bytes_and_str_apart(
    key: str | None, value: Any, properties: dict[str, str], publish_time: int
) -> None:
    data = encode_payload(key, encode_value(value), properties, publish_time)
    assert decode_payload(data) == (key, value, properties, publish_time)


def test_unencodable_value_is_an_invalid_argument() -> None:
    with pytest.raises(InvalidArgumentError):
        encode_value(object())
    with pytest.raises(InvalidArgumentError):
        encode_value(2**70)


@given(st.lists(json_like | st.just(object()) | st.just([1, {"a": 2**70}]), max_size=6))
def test_a_refused_value_leaves_nothing_in_the_next_encoding(values: list[Any]) -> None:
    # encode_value keeps one msgpack Packer per thread: a failure half-way through a
    # value must not leave bytes that the next value's encoding would carry
    for value in values:
        try:
            packed = encode_value(value)
        except InvalidArgumentError:
            continue
        assert packed == msgpack.packb(value, use_bin_type=True)


def test_threads_encode_side_by_side_without_mixing_values() -> None:
    values = [bytes([i]) * (i + 1) * 50 for i in range(8)]

    def encode_many(value: bytes) -> bool:
        return all(msgpack.unpackb(encode_value(value)) == value for _ in range(2_000))

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(encode_many, values))


@given(
    st.lists(
        st.tuples(
            st.none() | st.sampled_from(["", "k"]),
            st.binary(max_size=5).map(encode_value),
            st.sampled_from([{}, {"a": "b"}]),
        ),
        max_size=5,
    )
    | st.lists(st.binary(max_size=5), max_size=5).map(
        lambda values: [(None, encode_value(v), {}) for v in values]
    ),
    st.sampled_from([0, 2**32 - 1, 2**32, 1_764_000_000_000, 2**64 - 1]),
)
def test_a_batch_encodes_as_each_message_alone(
    messages: list[tuple[str | None, bytes, dict[str, str]]], publish_time: int
) -> None:
    # (values alone take a shortcut: one head joined to each value; an empty key or one
    # message with properties must not)
    expected = [encode_payload(k, v, p, publish_time) for k, v, p in messages]
    assert encode_payloads(messages, publish_time) == expected


@pytest.mark.parametrize("data", [b"", b"\x09abc", b"\x01\xc1"])
def test_damaged_payload_is_reported(data: bytes) -> None:
    with pytest.raises(CorruptEntryError):
        decode_payload(data)


@given(
    key=st.none() | st.text(max_size=5),
    properties=st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
    publish_time=st.sampled_from([0, 1, 2**32 - 1, 2**32, 1_764_000_000_000, 2**64 - 1])
    | st.integers(0, 2**64 - 1),
    value=st.binary(max_size=20) | st.text(max_size=5) | st.integers(-5, 5),
)
def test_the_payload_is_one_msgpack_array_whatever_shortcut_made_it(
    key: str | None, properties: dict[str, str], publish_time: int, value: object
) -> None:
    expected = bytes([2]) + msgpack.packb(  # format version 2
        [key, properties, publish_time, value], use_bin_type=True
    )
    assert encode_payload(key, encode_value(value), properties, publish_time) == expected
    assert encode_payload(key, encode_value(value), properties, publish_time) == expected  # cached


messages = st.lists(
    st.tuples(
        st.none() | st.text(max_size=5),
        json_like,
        st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
        st.integers(min_value=0, max_value=2**64 - 1),
    ),
    max_size=6,
)


@given(messages)
def test_a_batch_decodes_as_each_payload_alone_container_values_included(
    batch: list[tuple[str | None, Any, dict[str, str], int]],
) -> None:
    payloads = [encode_payload(k, encode_value(v), p, t) for k, v, p, t in batch]
    bodies = decode_payloads(payloads)
    assert len(bodies) == len(batch)
    for (key, properties, publish_time, value), payload in zip(bodies, payloads, strict=True):
        alone = decode_payload(payload)
        assert (key, value, dict(properties), publish_time) == alone
        assert type(value) is type(alone[1])  # a list stays a list, a map a dict


@given(messages, st.integers(min_value=0, max_value=6), st.sampled_from([b"", b"\x09abc"]))
def test_one_damaged_payload_in_a_batch_is_reported(
    batch: list[tuple[str | None, Any, dict[str, str], int]], at: int, damaged: bytes
) -> None:
    payloads = [encode_payload(k, encode_value(v), p, t) for k, v, p, t in batch]
    payloads.insert(min(at, len(payloads)), damaged)
    with pytest.raises(CorruptEntryError):
        decode_payloads(payloads)


def test_plain_bodies_leave_the_cyclic_collector_nothing_to_walk() -> None:
    """Bodies of bytes/str values with or without properties are untracked once the
    collector has seen them: a consumer holding many messages keeps full collections
    short."""
    payloads = [
        encode_payload(None, encode_value(b"v"), {}, 1_764_000_000_000),
        encode_payload("k", encode_value("text"), {"a": "b"}, 1_764_000_000_001),
    ]
    bodies = decode_payloads(payloads)
    for _ in range(3):  # one look per level of nesting at most (pairs, properties, body)
        gc.collect()
    assert [gc.is_tracked(body) for body in bodies] == [False, False]
    bodies = decode_payloads([encode_payload(None, encode_value([1, 2]), {}, 5)])
    gc.collect()
    assert bodies[0][3] == [1, 2]
    assert gc.is_tracked(bodies[0])  # it holds a list: the collector must see it
