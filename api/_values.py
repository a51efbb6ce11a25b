"""The value model: what a message value may be, checked where values enter the engine.

What the engine stores is what every reader gets back, as it was sent: embedded
``receive`` and ``fetch``, HTTP (JSON ``value``, or ``value_b64`` for bytes), the Kafka
listener and the Spark source. So a value is either

* bytes (``bytes``, ``bytearray`` or ``memoryview``; read back as ``bytes``), as the
  whole value, or
* a JSON value: ``None``, ``bool``, ``int`` (in msgpack's range ``-2**63 .. 2**64-1``),
  a finite ``float``, ``str``, and ``list`` and ``dict`` with ``str`` keys of these,
  nested at most :data:`MAX_DEPTH` deep. Subclasses (an ``IntEnum``, an ``OrderedDict``)
  are stored as their base type, an equal value.

Anything else is :class:`~txnstream.ledger.InvalidArgumentError` at the call, naming
where in the value and what is wrong, and nothing is stored: NaN and ±Infinity (JSON has
none: HTTP would give back ``null``), a key that is not a string (``{1: ...}`` would come
back as ``{"1": ...}``), bytes inside a list or dict (HTTP would give back base64 text),
a tuple (it would come back as a list), a set or any other object.

The check runs fused with the packing each produce path does anyway: a screen of the
values' types by C calls (bytes, text and numbers, the usual values, need nothing more),
a walk only of lists and dicts, and the reason is worked out only for a value refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

from txnstream.ledger import PACK_ERRORS, InvalidArgumentError, value_packer

MAX_DEPTH = 500
"""How deep lists and dicts may nest in a value (a list of lists is 2 deep). Below what
every reader handles: msgpack packs 1,024 levels, JSON readers recurse once per level."""

_PLAIN = frozenset({str, int, bool, type(None)})
"""Exact types that are always in the model (an int's range is msgpack's to check)."""
_PLAIN_TOP = _PLAIN | {bytes}
"""... and as a whole value."""
_BYTES = (bytes, bytearray, memoryview)
_INT_MIN, _INT_END = -(1 << 63), 1 << 64
_isfinite = math.isfinite


def pack_value(value: Any, pack: Callable[[Any], bytes] | None = None) -> bytes:
    """``value`` checked against the model and packed (msgpack), or
    :class:`InvalidArgumentError` saying where and what is wrong. ``pack``: the calling
    thread's :func:`~txnstream.ledger.value_packer`, if the caller keeps one."""
    if type(value) not in _PLAIN_TOP and not _fits(value, MAX_DEPTH):
        _refuse(value)
    try:
        return (pack or value_packer())(value)
    except PACK_ERRORS as exc:  # an int out of range, a lone surrogate: say where
        raise InvalidArgumentError(problem(value) or f"value cannot be encoded: {exc}") from None


def pack_values(values: Sequence[Any]) -> list[bytes] | None:
    """The packed forms of ``values``, or None if any is refused (the caller then checks
    them one by one, to say the first error in order). Types are screened by C calls,
    and only lists, dicts and floats are looked into."""
    if not _PLAIN_TOP.issuperset(map(type, values)) and not all(
        map(_fits, values, repeat(MAX_DEPTH))
    ):
        return None
    try:
        return list(map(value_packer(), values))  # this thread's packer, mapped in C
    except PACK_ERRORS:
        return None


def fits(value: Any) -> bool:
    """Whether ``value`` is in the model, by exact types (a subclass is False here: the
    full check, :func:`pack_value`, accepts it); a fast path's guard."""
    return type(value) in _PLAIN_TOP or _fits(value, MAX_DEPTH)


def _fits(value: Any, depth: int) -> bool:
    """Whether ``value`` is in the model, by exact types; ``depth``: how many more levels
    of lists and dicts may nest here (bytes only at the top: ``MAX_DEPTH``). A loop with
    the common cases inline: a generator in ``all()``, ``frozenset.issuperset`` or a call
    per item all cost more for the small values usual here."""
    kind = type(value)
    if kind is dict:
        for key in value:
            if type(key) is not str:
                return False
        items: Any = value.values()
    elif kind is list:
        items = value
    elif kind is float:
        return _isfinite(value)
    else:
        return kind in _PLAIN or (kind is bytes and depth == MAX_DEPTH)
    if not depth:
        return False
    depth -= 1
    plain = _PLAIN
    for item in items:
        kind = type(item)
        if kind in plain:
            continue
        if kind is float:
            if not _isfinite(item):
                return False
        elif not _fits(item, depth):
            return False
    return True


def _refuse(value: Any) -> None:
    """Raise :class:`InvalidArgumentError` if ``value`` is not in the model (a subclass of
    a model type passes: the screens above only know exact types)."""
    if not isinstance(value, _BYTES):
        reason = problem(value)
        if reason is not None:
            raise InvalidArgumentError(reason)


def problem(value: Any, where: str = "value") -> str | None:
    """Why ``value`` is not in the model (``where`` names it), or None if it is."""
    if isinstance(value, _BYTES):
        return None
    return _problem(value, where, MAX_DEPTH)


def _problem(value: Any, where: str, depth: int) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if not _INT_MIN <= value < _INT_END:
            return f"{where} is {_short(value)}: an integer must lie in -2**63 .. 2**64-1"
        return None
    if isinstance(value, float):
        if not _isfinite(value):
            return f"{where} is {value!r}: a number must be finite (JSON has no NaN or Infinity)"
        return None
    if isinstance(value, str):
        return _text_problem(value, where)
    if isinstance(value, _BYTES):
        return (
            f"{where} is bytes: bytes are a value only as a whole (JSON has no bytes; inside"
            " a list or dict use text, e.g. base64)"
        )
    if isinstance(value, tuple):
        return f"{where} is a tuple: send a list (a tuple would be read back as a list)"
    if isinstance(value, dict):
        if not depth:
            return _too_deep(where)
        for key, item in value.items():
            if not isinstance(key, str):
                return (
                    f"{where} has the key {_short(key)} ({type(key).__name__}): the keys of"
                    " a dict must be strings (JSON's are)"
                )
            reason = _text_problem(key, f"a key of {where}") or _problem(
                item, f"{where}[{key!r}]", depth - 1
            )
            if reason is not None:
                return reason
        return None
    if isinstance(value, list):
        if not depth:
            return _too_deep(where)
        for index, item in enumerate(value):
            reason = _problem(item, f"{where}[{index}]", depth - 1)
            if reason is not None:
                return reason
        return None
    return (
        f"{where} has type {type(value).__name__}: a value is bytes, or JSON (None, bool,"
        " int, float, str, list, dict with str keys)"
    )


def _too_deep(where: str) -> str:
    root = where.partition("[")[0]  # (the full path would be hundreds of [0]s long)
    return f"{root} nests lists and dicts more than {MAX_DEPTH} deep"


def _text_problem(text: str, where: str) -> str | None:
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return f"{where} is not valid text (a lone surrogate)"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
