"""How the commands print: listings as tab-separated lines under a header line (none with
``--no-header``), or JSON Lines with ``--json`` (one object per line, one per item of a
listing); messages also as ``--format`` templates.

``--format`` follows kcat's ``-f``: a template of ``%`` tokens and backslash escapes,
printed as is for every message (nothing added, so end it with ``\\n``):

=====  ==============================================================================
``%v``  the value: text as is, other JSON values as JSON, bytes raw (not base64)
``%k``  the key (empty if none)
``%p``  the position ``L:E``
``%t``  the topic
``%T``  the publish time (ISO 8601, UTC)
``%x``  the transaction id (empty if none)
``%h``  the properties as ``name=value`` joined by ``,``
``%r``  the redelivery count (empty outside a subscription)
``%S``  the value's size in bytes
``%%``  a percent sign
=====  ==============================================================================

Escapes: ``\\n`` newline, ``\\t`` tab, ``\\r``, ``\\0`` (a NUL byte), ``\\\\`` a backslash.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

from ._common import dash, print_json, usage, write_bytes

Message = dict[str, Any]

_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\"}


def value_bytes(message: Message) -> bytes:
    """The value as bytes: raw for ``value_b64``, UTF-8 text for strings, JSON otherwise."""
    if "value_b64" in message:
        return base64.b64decode(message["value_b64"])
    value = message.get("value")
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def _text(value: Any) -> bytes:
    return b"" if value is None else str(value).encode("utf-8", "surrogateescape")


def _properties(message: Message) -> bytes:
    props = message.get("properties") or {}
    return _text(",".join(f"{name}={value}" for name, value in props.items()))


_TOKENS: dict[str, Callable[[Message, str], bytes]] = {
    "v": lambda m, _t: value_bytes(m),
    "k": lambda m, _t: _text(m.get("key")),
    "p": lambda m, _t: _text(m.get("position")),
    "t": lambda _m, topic: _text(topic),
    "T": lambda m, _t: _text(m.get("publish_time")),
    "x": lambda m, _t: _text(m.get("txn")),
    "h": lambda m, _t: _properties(m),
    "r": lambda m, _t: _text(m.get("redelivery_count")),
    "S": lambda m, _t: _text(len(value_bytes(m))),
}


def compile_format(spec: str) -> list[bytes | str]:
    """``spec`` as literal byte strings and token letters; a bad token is a usage error.

    >>> compile_format("%k=%v\\\\n")
    ['k', b'=', 'v', b'\\n']
    """
    parts: list[bytes | str] = []
    literal = bytearray()
    chars = iter(spec)
    for char in chars:
        if char == "%":
            token = next(chars, "")
            if token == "%":
                literal += b"%"
                continue
            if token not in _TOKENS:
                known = " ".join(f"%{t}" for t in _TOKENS)
                usage(f"--format: unknown token %{token} (known: {known} %%)")
            if literal:
                parts.append(bytes(literal))
                literal.clear()
            parts.append(token)
        elif char == "\\":
            escape = next(chars, "")
            if escape not in _ESCAPES:
                usage(f"--format: unknown escape \\{escape} (known: \\n \\t \\r \\0 \\\\)")
            literal += _ESCAPES[escape]
        else:
            literal += char.encode("utf-8", "surrogateescape")
    if literal:
        parts.append(bytes(literal))
    return parts


def human_value(message: Message) -> str:
    """The value as the default line shows it: JSON, or ``base64:...`` for bytes."""
    if "value_b64" in message:
        return f"base64:{message['value_b64']}"
    return json.dumps(message.get("value"), ensure_ascii=False)


@dataclass(slots=True)
class Table:
    """Tab-separated rows, the ``columns`` header line before the first (unless not
    ``header``), as ``ps`` and ``kubectl get`` print; a cell that is None prints ``-``."""

    columns: tuple[str, ...]
    header: bool = True

    def row(self, *cells: Any) -> None:
        """Print one row (and the header line first, once)."""
        if self.header:
            typer.echo("\t".join(self.columns))
            self.header = False
        typer.echo("\t".join(dash(cell) for cell in cells))


MESSAGE_COLUMNS = ("POSITION", "KEY", "VALUE")


@dataclass(slots=True)
class Printer:
    """Prints messages of ``topic`` as ``--json``, ``--format`` or the default line."""

    topic: str
    as_json: bool = False
    template: list[bytes | str] | None = None
    table: Table | None = None

    @classmethod
    def of(cls, topic: str, as_json: bool, fmt: str | None, header: bool = True) -> Printer:
        """The printer the options ask for (``--json`` and ``--format`` exclude each other)."""
        if as_json and fmt is not None:
            usage("--json and --format exclude each other")
        template = None if fmt is None else compile_format(fmt)
        return cls(topic, as_json, template, Table(MESSAGE_COLUMNS, header))

    def show(self, message: Message) -> None:
        """Print one message (``position``, ``key``, ``value``/``value_b64``, ...)."""
        if self.template is not None:
            out = b"".join(
                part if isinstance(part, bytes) else _TOKENS[part](message, self.topic)
                for part in self.template
            )
            write_bytes(out)
        elif self.as_json:
            print_json(message)
        else:
            table = self.table or Table(MESSAGE_COLUMNS, header=False)
            table.row(message.get("position"), message.get("key"), human_value(message))
