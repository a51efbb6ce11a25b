"""Entry payload encoding: one format-version byte, then a msgpack array.

This is the only module that imports msgpack for entries. ``bytes`` stays ``bytes`` and
``str`` stays ``str`` (``use_bin_type``), so a value comes back as it was sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import is_, itemgetter
from typing import Any

import msgpack

from ._errors import CorruptEntryError, InvalidArgumentError

FORMAT_VERSION = 2  # 2: one msgpack array [key, properties, publish_time, value]
_VERSION_BYTE = bytes([FORMAT_VERSION])
_ARRAY4 = b"\x94"  # msgpack fixarray header for 4 elements


PACK_ERRORS = (TypeError, ValueError, OverflowError)
"""What msgpack raises for a value it cannot encode (see :func:`value_packer`)."""


def encode_value(value: Any) -> bytes:
    """Encode a message value alone; raises :class:`InvalidArgumentError` if msgpack cannot."""
    try:
        packed: bytes = _packer().pack(value)
    except PACK_ERRORS as exc:
        raise InvalidArgumentError(f"value cannot be encoded: {exc}") from exc
    return packed


# ``msgpack.packb`` builds a Packer per call (~0.5 us, most of a 100-byte value's cost);
# a kept one packs in ~0.1 us. One per thread: a Packer has a buffer of its own, and
# large batches are encoded in worker threads beside the loop. ``pack`` resets that
# buffer after a failure too, so a refused value leaves nothing behind.
_packers = threading.local()


def _packer() -> msgpack.Packer:
    try:
        packer: msgpack.Packer = _packers.packer
    except AttributeError:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    return packer


def value_packer() -> Callable[[Any], bytes]:
    """The calling thread's msgpack ``pack`` for values: :func:`encode_value` without a
    call of its own and without the error mapping, for a hot path that maps the errors
    itself (:data:`PACK_ERRORS`: the value cannot be encoded). Use it on the thread that
    asked for it only."""
    pack: Callable[[Any], bytes] = _packer().pack
    return pack


def encode_payload(
    key: str | None, packed_value: bytes, properties: dict[str, str], publish_time: int
) -> bytes:
    """Build the stored payload from an already-encoded value (see :func:`encode_value`).

    The body is one msgpack array ``[key, properties, publish_time, value]``: the head is
    packed as a 3-array whose header byte becomes a 4-array's, then the packed value is
    appended, so encoding never re-packs the value and decoding is one ``unpackb``.
    """
    global _plain_head
    if key is None and not properties and _UINT64_MIN <= publish_time < _UINT64_END:
        # the common head (no key, no properties), as msgpack packs it, made once per ms
        cached = _plain_head  # one tuple: a worker thread encoding beside us sees a pair
        if cached[0] != publish_time:
            cached = _plain_head = (publish_time, _PLAIN_HEAD + publish_time.to_bytes(8, "big"))
        return cached[1] + packed_value
    head: bytes = _packer().pack([key, properties, publish_time])
    return _VERSION_BYTE + _ARRAY4 + head[1:] + packed_value


def encode_payloads(
    messages: Sequence[tuple[str | None, bytes, dict[str, str]]], publish_time: int
) -> list[bytes]:
    """:func:`encode_payload` of each ``(key, packed value, properties)``; a batch of
    values alone (the common one) is joined to the one head by C calls, not a Python
    call per message."""
    if (
        messages
        and all(map(is_, repeat(None), map(_KEY, messages)))
        and not any(map(_PROPERTIES, messages))
    ):
        return encode_value_payloads(list(map(_PACKED, messages)), publish_time)
    return [encode_payload(key, value, props, publish_time) for key, value, props in messages]


def encode_value_payloads(packed_values: Sequence[bytes], publish_time: int) -> list[bytes]:
    """The payloads of values alone (no key, no properties), from their packed forms:
    the one head joined to each by C calls."""
    return list(map(encode_payload(None, b"", {}, publish_time).__add__, packed_values))


_KEY, _PACKED, _PROPERTIES = itemgetter(0), itemgetter(1), itemgetter(2)
_PLAIN_HEAD = _VERSION_BYTE + _ARRAY4 + b"\xc0\x80\xcf"  # nil key, empty map, uint64 time
_UINT64_MIN, _UINT64_END = 1 << 32, 1 << 64  # times packed as 0xcf + 8 bytes (ms since 1970)
_plain_head: tuple[int, bytes] = (-1, b"")


def decode_payload(data: bytes) -> tuple[str | None, Any, dict[str, str], int]:
    """Return ``(key, value, properties, publish_time)``; raises :class:`CorruptEntryError`."""
    if not data or data[0] != FORMAT_VERSION:
        version = data[0] if data else None
        raise CorruptEntryError(f"unknown entry format version {version!r}")
    try:
        key, properties, publish_time, value = msgpack.unpackb(
            memoryview(data)[1:], raw=False, strict_map_key=False
        )
    except Exception as exc:  # any decode failure means a damaged entry
        raise CorruptEntryError(f"damaged entry: {exc}") from exc
    return key, value, properties, publish_time


def decode_payloads(payloads: Sequence[bytes]) -> list[Body]:
    """Decode many payloads in one pass: a ``(key, properties, publish_time, value)``
    :data:`Body` each, ``properties`` as ``(name, value)`` pairs (``dict()`` of them is
    the mapping).

    The payloads are joined behind one msgpack array header (each one's format-version
    byte is itself a msgpack integer) and unpacked by a single C call, checked to come
    out as version/body pairs; if anything does not, each payload is decoded alone so the
    damaged one raises :class:`CorruptEntryError` as :func:`decode_payload` does.

    Why tuples and pairs: a delivered message holds its body for as long as a consumer
    holds the message, and a tuple of atomic things (no list, no dict; a dict always
    counts, even an empty one) is untracked by the cyclic collector the first time it
    looks at it. 100,000 held messages then cost a full collection a quarter of what
    list bodies with a dict each did. Values that are themselves arrays or maps (rare:
    most are ``bytes`` or ``str``) would come out as tuples too, so a batch holding any
    is decoded again the ordinary way: lists stay lists and maps stay dicts.
    """
    count = len(payloads)
    if not count:
        return []
    joined = _array_header(2 * count) + b"".join(payloads)
    try:
        items = msgpack.unpackb(
            joined, raw=False, strict_map_key=False, use_list=False, object_pairs_hook=tuple
        )
        bodies: list[Body] = list(items[1::2])
        if _well_formed(items, bodies, tuple, count):
            if tuple not in set(map(type, map(_VALUE, bodies))):
                return bodies
            items = msgpack.unpackb(joined, raw=False, strict_map_key=False)
            if _well_formed(items, items[1::2], list, count):
                return list(map(tuple, items[1::2]))
    except Exception:  # noqa: BLE001 - look at each payload below
        pass
    out: list[Body] = []
    for payload in payloads:
        key, value, properties, publish_time = decode_payload(payload)
        out.append((key, properties, publish_time, value))
    return out


Body = tuple[str | None, "tuple[tuple[str, str], ...] | dict[str, str]", int, Any]
"""A decoded payload as :func:`decode_payloads` returns it."""

_VALUE = itemgetter(3)


def _well_formed(items: Sequence[Any], bodies: Sequence[Any], kind: type, count: int) -> bool:
    """Version/body pairs, each body a ``kind`` of 4."""
    return (
        items[0::2].count(FORMAT_VERSION) == count
        and set(map(type, bodies)) == {kind}
        and set(map(len, bodies)) == {4}
    )


def _array_header(size: int) -> bytes:
    if size < 16:
        return bytes([0x90 | size])
    if size < 1 << 16:
        return b"\xdc" + size.to_bytes(2, "big")
    return b"\xdd" + size.to_bytes(4, "big")


def pack(obj: Any) -> bytes:
    """msgpack for engine metadata (cursors, transaction topics, producer state)."""
    packed: bytes = _packer().pack(obj)
    return packed


def unpack(data: bytes) -> Any:
    """Inverse of :func:`pack`."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def plain_payload_layout() -> tuple[bytes, int] | None:
    """The fixed prefix of a payload with no key, no properties and a bytes value, and
    the offset of its value's msgpack tag, derived from :func:`encode_payload` and
    checked against :func:`decode_payload`; None if the format changed shape (a
    vectorized reader then has no fast path and decodes each payload)."""
    publish = 1 << 40  # a current time in ms: packed as uint64 (0xcf + 8 bytes)
    value = b"x" * 300
    sample = encode_payload(None, encode_value(value), {}, publish)
    tag_at = len(sample) - len(encode_value(value))
    if (
        tag_at != 13
        or sample[4] != 0xCF
        or int.from_bytes(sample[5:13], "big") != publish
        or decode_payload(sample) != (None, value, {}, publish)
    ):
        return None
    return sample[:5], tag_at
