"""``txnstream produce`` and ``txnstream consume``."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Annotated, Any

import typer

from api.client import wire_message

from ._common import DEFAULT_URL, JsonOption, UrlOption, connect, dash, fail, print_json


def _parse_value(text: str) -> Any:
    """JSON if ``text`` parses as JSON (NaN and Infinity excluded), else the string itself."""

    def reject(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(text, parse_constant=reject)
    except ValueError:
        return text


def _show_value(message: dict[str, Any]) -> str:
    if "value_b64" in message:
        return f"base64:{message['value_b64']}"
    return json.dumps(message.get("value"), ensure_ascii=False)


def _stdin_values() -> Iterator[str]:
    for line in sys.stdin:
        text = line.rstrip("\r\n")
        if text:
            yield text


def _batches(values: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for value in values:
        batch.append(value)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def produce(
    topic: str,
    values: Annotated[
        list[str] | None,
        typer.Argument(help="Values (JSON if they parse, else strings); default: stdin lines."),
    ] = None,
    txn: Annotated[str | None, typer.Option(help="Send inside this transaction.")] = None,
    key: Annotated[str | None, typer.Option(help="Key of every message.")] = None,
    prop: Annotated[
        list[str] | None, typer.Option("--property", "-p", help="A property NAME=VALUE.")
    ] = None,
    batch_size: Annotated[
        int, typer.Option(min=1, max=10_000, help="Messages per request (stdin input).")
    ] = 100,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Produce VALUES (or stdin lines) to TOPIC; prints each message's position."""
    properties: dict[str, str] = {}
    for item in prop or []:
        name, sep, text = item.partition("=")
        if not sep:
            fail(f"--property wants NAME=VALUE, got {item!r}")
        properties[name] = text
    source: Iterable[str] = values if values else _stdin_values()
    size = len(values) if values else batch_size
    positions: list[str] = []
    duplicate = False
    with connect(url) as client:
        for batch in _batches(source, max(size, 1)):
            messages = [
                wire_message(_parse_value(text), key=key, properties=properties) for text in batch
            ]
            data = client.produce(topic, messages, txn=txn)
            positions.extend(data["positions"])
            duplicate = duplicate or bool(data.get("duplicate"))
            if not as_json:
                for position in data["positions"]:
                    typer.echo(position)
    if as_json:
        print_json({"positions": positions, "duplicate": duplicate})


def consume(
    topic: str,
    sub: str,
    sub_type: Annotated[
        str, typer.Option("--type", help="exclusive, failover, shared or key_shared.")
    ] = "exclusive",
    isolation: Annotated[
        str, typer.Option(help="read_committed or read_uncommitted.")
    ] = "read_committed",
    initial_position: Annotated[str, typer.Option(help="earliest or latest.")] = "earliest",
    consumer: Annotated[str, typer.Option(help="Consumer name.")] = "default",
    max_messages: Annotated[
        int | None,
        typer.Option(
            "--max", min=1, help="Stop after this many messages (default 100; --follow: no limit)."
        ),
    ] = None,
    wait_ms: Annotated[
        int, typer.Option(min=0, max=30_000, help="Wait this long for the first message.")
    ] = 1000,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep receiving.")] = False,
    no_ack: Annotated[bool, typer.Option("--no-ack", help="Do not acknowledge.")] = False,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Receive from subscription SUB of TOPIC (created if missing) and acknowledge."""
    limit = max_messages if max_messages is not None else (None if follow else 100)
    received = 0
    try:
        with connect(url) as client:
            client.create_subscription(
                topic, sub, type=sub_type, initial_position=initial_position, isolation=isolation
            )
            while limit is None or received < limit:
                want = 1000 if limit is None else min(1000, limit - received)
                wait = max(wait_ms, 5000) if follow else wait_ms
                messages = client.receive(topic, sub, consumer=consumer, max=want, wait_ms=wait)
                for message in messages:
                    if as_json:
                        print_json(message)
                    else:
                        key = dash(message.get("key"))
                        typer.echo(f"{message['position']}\t{key}\t{_show_value(message)}")
                received += len(messages)
                if messages and not no_ack:
                    client.ack(topic, sub, [m["position"] for m in messages])
                if not follow:
                    break
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
