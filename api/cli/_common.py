"""What the client commands share: ``--url``/``--json``/``--format``, output, errors, retries.

Exit codes: 0 done, 1 the request failed (an error answer or no answer), 2 usage (a bad
option or argument, unusable input), 130 interrupted. Errors are one line on stderr.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from txnstream.api import Position
from txnstream.api.client import TxnStreamHttpError, TxnStreamTransportError

if TYPE_CHECKING:
    from txnstream.api.client import Client


def _given_before(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    """A connection option not given after the command takes what the root has: the same
    option given before the command (``txnstream --url URL topics list``, as in rpk and
    kubectl), else its environment variable, else its default."""
    source = ctx.get_parameter_source(param.name or "")
    if source is not None and source.name == "COMMANDLINE":
        return value
    return ctx.find_root().params.get(param.name or "", value)


def _client_option(flag: str, root: bool, **settings: Any) -> Any:
    """One connection option: on the root as given, on a command reading the root's."""
    return typer.Option(flag, callback=None if root else _given_before, **settings)


def _url(root: bool) -> Any:
    return _client_option(
        "--url",
        root,
        envvar="TXNSTREAM_URL",
        metavar="URL",
        show_envvar=True,
        help="Server URL; several, comma-separated (a,b,c), to follow the active one.",
    )


def _token(root: bool) -> Any:
    return _client_option(
        "--token",
        root,
        envvar="TXNSTREAM_TOKEN",
        metavar="TOKEN",
        show_envvar=True,
        help="Bearer token for a server run with --auth.",
    )


def _json(root: bool) -> Any:
    # A flag: no value after it (typer's rich help would print "<bool>" for it, which read
    # as if it took one; the app uses click's plain help, which shows flags bare).
    return _client_option(
        "--json", root, help="Print JSON Lines: one object per line (a listing: one per item)."
    )


# The connection options of every client command; the root takes them too (RootUrlOption,
# ...), so they may come before the command or after it (after wins).
UrlOption = Annotated[str, _url(root=False)]
TokenOption = Annotated[str | None, _token(root=False)]
JsonOption = Annotated[bool, _json(root=False)]
RootUrlOption = Annotated[str, _url(root=True)]
RootTokenOption = Annotated[str | None, _token(root=True)]
RootJsonOption = Annotated[bool, _json(root=True)]
NoHeaderOption = Annotated[
    bool, typer.Option("--no-header", help="Leave out the header line of the listing.")
]
FormatOption = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="Print each message as FMT: %v value, %k key, %p position, %t topic, %T publish "
        "time, %x txn, %h properties, %r redeliveries, %S value bytes, %% a percent sign; "
        "\\n \\t \\\\ escapes. Nothing is added: end FMT with \\n for one message a line.",
        metavar="FMT",
    ),
]
TopicArg = Annotated[str, typer.Argument(metavar="TOPIC", show_default=False)]
SubArg = Annotated[str, typer.Argument(metavar="SUB", show_default=False)]
TxnArg = Annotated[str, typer.Argument(metavar="TXN", show_default=False)]
DEFAULT_URL = "http://127.0.0.1:8080"

# Answers worth retrying in --follow: the server is restarting or a proxy lost it.
RETRIABLE_STATUSES = frozenset({502, 503, 504})


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: MESSAGE`` to stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def usage(message: str) -> NoReturn:
    """A usage error: exit 2 with ``error: MESSAGE``."""
    fail(message, 2)


def note(message: str) -> None:
    """One line for the person at the terminal, on stderr (stdout stays data only)."""
    typer.echo(message, err=True)


def describe(exc: TxnStreamHttpError | TxnStreamTransportError) -> str:
    """The one-line text of a request error."""
    if isinstance(exc, TxnStreamTransportError):
        return exc.message
    if exc.code == "unknown":  # not the contract's error envelope
        return f"HTTP {exc.status}: {exc.message}"
    if exc.status == 401:
        return f"{exc.message} (unauthorized, HTTP 401): pass --token or set TXNSTREAM_TOKEN"
    return f"{exc.message} ({exc.code}, HTTP {exc.status})"


def retriable(exc: Exception) -> bool:
    """Whether a request error may go away by itself (no answer, or 502/503/504)."""
    if isinstance(exc, TxnStreamTransportError):
        return True
    return isinstance(exc, TxnStreamHttpError) and exc.status in RETRIABLE_STATUSES


@contextmanager
def connect(url: str, token: str | None = None) -> Iterator[Client]:
    """A :class:`Client` of ``url`` sending ``token``; an error answer or no answer prints
    it and exits 1."""
    from txnstream.api.client import Client  # httpx loads for the commands that talk

    try:
        client = Client(url, token=token or None)
    except ValueError as exc:
        usage(f"--url: {exc}")
    try:
        with client:
            yield client
    except (TxnStreamTransportError, TxnStreamHttpError) as exc:
        fail(describe(exc))


class Backoff:
    """Exponential backoff with jitter for reconnecting: 0.2 s doubling up to ``cap``."""

    def __init__(self, first: float = 0.2, cap: float = 2.0) -> None:
        self.first = first
        self.cap = cap
        self.delay = first

    def sleep(self) -> None:
        """Sleep the current delay (±20 %), then double it up to the cap."""
        time.sleep(self.delay * random.uniform(0.8, 1.2))
        self.delay = min(self.delay * 2, self.cap)

    def reset(self) -> None:
        """Back to the first delay (after a success)."""
        self.delay = self.first


def print_json(data: Any) -> None:
    """One compact JSON document on a line of stdout."""
    typer.echo(json.dumps(data, ensure_ascii=False))


def print_result(as_json: bool, data: Any, text: str) -> None:
    """A command's one result: ``data`` as a JSON line with --json, else the line ``text``."""
    if as_json:
        print_json(data)
    else:
        typer.echo(text)


def write_bytes(data: bytes) -> None:
    """Raw bytes to stdout, flushed (a --follow reader sees each message at once)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def dash(value: Any) -> str:
    return "-" if value is None else str(value)


def parse_position(text: str, *, option: str, names: tuple[str, ...] = ()) -> str:
    """``text`` if it is ``L:E`` or one of ``names``; else a usage error naming ``option``."""
    if text in names:
        return text
    try:
        return str(Position.parse(text))
    except ValueError:
        choices = ", ".join(("L:E (e.g. 0:15)", *names))
        usage(f"{option} wants {choices}; got {text!r}")


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str, *, option: str) -> int:
    """Milliseconds of a duration like ``500ms``, ``30s``, ``5m``, ``2h``, ``1h30m``, ``1d``.

    A bare number counts as seconds.

    >>> parse_duration_ms("1h30m", option="--x"), parse_duration_ms("45", option="--x")
    (5400000, 45000)
    """
    spec = text.strip().lower()
    if re.fullmatch(r"\d+(?:\.\d+)?", spec):
        return round(float(spec) * 1000)
    parts = _DURATION.findall(spec)
    if not parts or "".join(n + u for n, u in parts) != spec:
        usage(f"{option} wants a duration like 30s, 5m, 2h or 1h30m; got {text!r}")
    return round(sum(float(number) * _UNIT_MS[unit] for number, unit in parts))


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}


def parse_size_bytes(text: str, *, option: str) -> int:
    """Bytes of a size like ``10GiB``, ``500MB``, ``64k`` or ``1024``: ``KiB``... are powers
    of 1024, ``KB``/``k``... of 1000.

    >>> parse_size_bytes("10GiB", option="--x"), parse_size_bytes("1.5k", option="--x")
    (10737418240, 1500)
    """
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        usage(f"{option} wants a size like 500MB, 10GiB or 1024 (bytes); got {text!r}")
    number, unit = found.group(1), (found.group(2) or "").lower()
    base = 1024 if "i" in unit else 1000
    scale = _SIZE_UNITS[unit[:1]] if base == 1000 else base ** ("kmgt".index(unit[0]) + 1)
    return round(float(number) * scale)


def human_duration(seconds: float) -> str:
    """``seconds`` as ``2h05m``, ``5m12s``, ``42s`` (whole seconds, never negative).

    >>> human_duration(7512), human_duration(312.4), human_duration(-3)
    ('2h05m', '5m12s', '0s')
    """
    total = max(int(seconds), 0)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
