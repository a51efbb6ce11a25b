"""What the client commands share: the ``--url``/``--json`` options, output, error exits."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn

import typer

from api import TxnStreamHttpError, TxnStreamTransportError
from api.client import Client

UrlOption = Annotated[
    str,
    typer.Option("--url", envvar="TXNSTREAM_URL", help="Server URL.", show_envvar=True),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
DEFAULT_URL = "http://127.0.0.1:8080"


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: MESSAGE`` to stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextmanager
def connect(url: str) -> Iterator[Client]:
    """A :class:`Client` of ``url``; an error answer or no answer prints it and exits 1."""
    try:
        with Client(url) as client:
            yield client
    except TxnStreamTransportError as exc:
        fail(exc.message)
    except TxnStreamHttpError as exc:
        if exc.code == "unknown":  # not the contract's error envelope
            fail(f"HTTP {exc.status}: {exc.message}")
        fail(f"{exc.message} ({exc.code}, HTTP {exc.status})")


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False))


def dash(value: Any) -> str:
    return "-" if value is None else str(value)
