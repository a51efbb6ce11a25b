"""The ``txnstream`` typer app: every command and group, registered in one place.

:func:`main` runs it so that every failure is one line on stderr and an exit code:
1 for a request that failed, 2 for usage (an unknown option, a bad value), 130 for
Ctrl-C; never a traceback (``TXNSTREAM_DEBUG=1`` shows one for an unexpected error).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Annotated

import typer

from ._auth import auth_app
from ._common import DEFAULT_URL, RootJsonOption, RootTokenOption, RootUrlOption
from ._consume import consume
from ._produce import produce
from ._serve import serve
from ._subs import sub_app
from ._topics import topics_app
from ._txn import txn_app
from .drills import drill_app

app = typer.Typer(
    name="txnstream",
    help="txnstream: transactional topics. `serve` runs the server; the rest are its clients "
    "(--url or TXNSTREAM_URL; --json for scripts).",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    # click's plain help: typer's rich panels print "<bool>" after every flag (as if
    # --json took a value) and are slower to import.
    rich_markup_mode=None,
)
app.add_typer(topics_app, name="topics")
app.add_typer(sub_app, name="sub")
app.add_typer(txn_app, name="txn")
app.command()(serve)
app.command()(produce)
app.command()(consume)
app.add_typer(drill_app, name="drill", help="Recovery drills (replay, crash, snapshot).")
app.add_typer(auth_app, name="auth")


def version() -> str:
    """The installed txnstream's version."""
    from importlib import metadata  # ~20 ms: only for --version

    try:
        return metadata.version("txnstream")
    except metadata.PackageNotFoundError:  # run from a source tree that is not installed
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"txnstream {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
    url: RootUrlOption = DEFAULT_URL,
    token: RootTokenOption = None,
    as_json: RootJsonOption = False,
) -> None:
    """The root: ``--version``, typer's completion options, and the client commands'
    ``--url``, ``--token`` and ``--json``, which may come before the command too (each
    command reads them from here when not given after it)."""


def _usage_line(exc: typer.TyperException) -> str:
    """A usage error as one line, with where to look for help."""
    message = exc.format_message().strip().replace("\n", " ")
    ctx = getattr(exc, "ctx", None)
    command = "txnstream" if ctx is None else ctx.command_path
    return f"error: {message} (see '{command} --help')"


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``txnstream``, ``python -m txnstream``)."""
    args = list(argv) if argv is not None else None
    try:
        code = app(args=args, prog_name="txnstream", standalone_mode=False)
    except typer.TyperException as exc:  # click's usage and file errors
        if exc.exit_code == 2 and exc.format_message().startswith("Usage:"):
            typer.echo(exc.format_message(), err=True)  # a group without a command: its help
        else:
            typer.echo(_usage_line(exc), err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("error: aborted", err=True)
        sys.exit(1)
    except Exception as exc:  # a bug: say it in one line, not a traceback
        if os.environ.get("TXNSTREAM_DEBUG"):
            raise
        typer.echo(f"error: unexpected {type(exc).__name__}: {exc}", err=True)
        typer.echo("(TXNSTREAM_DEBUG=1 shows the traceback)", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
