"""``txnstream produce``: values from arguments, lines of stdin or a file, or raw bytes.

Lines are sent as they come: a request goes out when ``--batch-size`` lines are waiting
or when the input has nothing more ready (so an interactive ``produce`` sends each line
at once, and a pipe of a million lines goes in large atomic batches).
"""

from __future__ import annotations

import json
import os
import select
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer

from ._common import (
    DEFAULT_URL,
    FormatOption,
    JsonOption,
    TokenOption,
    TopicArg,
    UrlOption,
    connect,
    note,
    print_json,
    usage,
)
from ._format import Printer

_IDLE = None  # what _lines yields when the input has nothing more ready right now


def _parse_value(text: str, raw: bool) -> Any:
    """JSON if ``text`` parses as JSON (NaN and Infinity excluded) unless ``raw``; else
    the string itself."""
    if raw:
        return text

    def reject(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(text, parse_constant=reject)
    except ValueError:
        return text


def _ready(fd: int) -> bool:
    """Whether reading ``fd`` would not block (regular files always are)."""
    try:
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError):  # not selectable: behave as a file
        return True
    return bool(readable)


def _lines(stream: BinaryIO) -> Iterator[bytes | None]:
    """The non-empty lines of ``stream`` (without line ends), and ``None`` whenever what
    was read so far is all there is for now."""
    fd = stream.fileno()
    pending = b""
    while True:
        *lines, pending = pending.split(b"\n")
        for line in lines:
            line = line.rstrip(b"\r")
            if line:
                yield line
        if not _ready(fd):
            yield _IDLE
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        pending += chunk
    pending = pending.rstrip(b"\r")
    if pending:
        yield pending


def _decode(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        usage("the input is not UTF-8 text; use --binary to send raw bytes")


def _check_text(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        usage(f"{text!r} is not valid UTF-8 text")
    return text


def _properties(items: list[str]) -> dict[str, str]:
    properties: dict[str, str] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            usage(f"--property wants NAME=VALUE, got {item!r}")
        properties[_check_text(name)] = _check_text(text)
    return properties


def _open_input(file: Path | None) -> BinaryIO:
    if file is None or str(file) == "-":
        return sys.stdin.buffer
    try:
        return file.open("rb")
    except OSError as exc:
        usage(f"cannot read {file}: {exc.strerror or exc}")


ValuesArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="VALUES",
        help="Values (JSON if they parse, else strings); default: lines of stdin or --file.",
    ),
]
TxnOption = Annotated[str | None, typer.Option(metavar="TXN", help="Send inside this transaction.")]
KeyOption = Annotated[
    str | None, typer.Option("--key", "-k", metavar="KEY", help="Key of every message.")
]
KeySeparatorOption = Annotated[
    str | None,
    typer.Option(
        "--key-separator",
        "-K",
        metavar="SEP",
        help="Each line is KEY SEP VALUE (split at the first SEP; a line without SEP has no key).",
    ),
]
PropertyOption = Annotated[
    list[str] | None,
    typer.Option("--property", "-p", metavar="NAME=VALUE", help="A property (repeatable)."),
]
FileOption = Annotated[
    Path | None,
    typer.Option(
        "--file", metavar="FILE", help="Read the lines (or with --binary, the bytes) from FILE."
    ),
]
BinaryOption = Annotated[
    bool,
    typer.Option("--binary", help="Send the whole input (stdin or --file) as one raw value."),
]
RawOption = Annotated[
    bool, typer.Option("--raw", help="Send values as text: do not parse them as JSON.")
]
ProducerOption = Annotated[
    str | None, typer.Option(metavar="NAME", help="Idempotent producer name (with --sequence).")
]
SequenceOption = Annotated[
    int | None,
    typer.Option(
        min=0,
        metavar="N",
        help="Sequence number of the first message (with --producer); counts up.",
    ),
]
BatchSizeOption = Annotated[
    int,
    typer.Option(min=1, max=10_000, metavar="N", help="At most this many lines per request."),
]

Wire = dict[str, Any]
"""A message as the client sends it (see ``txnstream.api.client.wire_message``)."""


def produce(
    topic: TopicArg,
    values: ValuesArg = None,
    txn: TxnOption = None,
    key: KeyOption = None,
    key_separator: KeySeparatorOption = None,
    prop: PropertyOption = None,
    file: FileOption = None,
    binary: BinaryOption = False,
    raw: RawOption = False,
    producer: ProducerOption = None,
    sequence: SequenceOption = None,
    batch_size: BatchSizeOption = 100,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
    fmt: FormatOption = None,
) -> None:
    """Produce VALUES, the lines of stdin (or --file), or raw bytes to TOPIC.

    Prints each message's position (or --format per message; --json: one
    {"position", "duplicate"} per message).
    Every request is appended atomically; with --producer/--sequence a repeated batch is
    stored once.
    """
    _check_flags(values, key, key_separator, file, binary, producer, sequence)
    printer = Printer.of(topic, as_json, fmt)
    properties = _properties(prop or [])
    if key is not None:
        _check_text(key)
    from txnstream.api.client import wire_message  # with httpx: only commands that talk

    def message(value: Any, message_key: str | None) -> Wire:
        return wire_message(value, key=message_key, properties=properties)

    batches: Iterable[list[Wire]]
    if values:
        texts = [_check_text(v) for v in values]
        batches = [[message(_parse_value(t, raw), key) for t in texts]]
    elif binary:
        with _open_input(file) as stream:
            batches = [[message(stream.read(), key)]]
    else:
        batches = _line_batches(_open_input(file), batch_size, key, key_separator, raw, message)
    with connect(url, token) as client:
        for batch in batches:
            data = client.produce(topic, batch, txn=txn, producer=producer, sequence=sequence)
            if sequence is not None:
                sequence += len(batch)
            _print_positions(batch, data, txn, printer, as_json, fmt)


def _check_flags(
    values: list[str] | None,
    key: str | None,
    key_separator: str | None,
    file: Path | None,
    binary: bool,
    producer: str | None,
    sequence: int | None,
) -> None:
    """A usage error for options that do not go together."""
    if (producer is None) != (sequence is None):
        usage("--producer and --sequence go together")
    if key is not None and key_separator is not None:
        usage("--key and -K/--key-separator exclude each other")
    if key_separator == "":
        usage("-K/--key-separator must not be empty")
    if values and (file is not None or binary):
        usage("give VALUES, or --file/--binary, not both")
    if binary and key_separator is not None:
        usage("--binary sends one raw value: -K does not apply")


def _print_positions(
    batch: list[Wire],
    data: dict[str, Any],
    txn: str | None,
    printer: Printer,
    as_json: bool,
    fmt: str | None,
) -> None:
    """One line per message of a produced ``batch`` (``data``: the server's answer)."""
    duplicate = bool(data.get("duplicate"))
    if duplicate:
        note(f"duplicate: the server already had this batch of {len(batch)} (not stored)")
    for item, position in zip(batch, data["positions"], strict=False):
        if as_json:
            print_json({"position": position, "duplicate": duplicate})
        elif fmt is None:
            typer.echo(position)
        else:
            printer.show({"position": position, "txn": txn, **item})


def _line_batches(
    stream: BinaryIO,
    size: int,
    key: str | None,
    separator: str | None,
    raw: bool,
    message: Callable[[Any, str | None], Wire],
) -> Iterator[list[Wire]]:
    """Batches of messages from the lines of ``stream``, cut at ``size`` or when idle."""
    batch: list[Wire] = []
    with stream:
        for line in _lines(stream):
            if line is not _IDLE:
                text = _decode(line)
                line_key = key
                if separator is not None and separator in text:
                    line_key, text = text.split(separator, 1)
                batch.append(message(_parse_value(text, raw), line_key))
            if batch and (line is _IDLE or len(batch) >= size):
                yield batch
                batch = []
    if batch:
        yield batch
