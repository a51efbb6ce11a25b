"""The ``txnstream`` typer app: every command and group, registered in one place.

:func:`main` runs it so that every failure is one line on stderr and an exit code:
1 for a request that failed, 2 for usage (an unknown option, a bad value), 130 for
Ctrl-C; never a traceback (``TXNSTREAM_DEBUG=1`` shows one for an unexpected error).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup

from ._coercion import install as _install_plain_coercion
from ._common import DEFAULT_URL, RootJsonOption, RootTokenOption, RootUrlOption

_install_plain_coercion()  # before any option is parsed: no pydantic on the way

# Every command, in the order of the help: (module, name in it, help if not its own).
# A command's module is imported, and typer builds its click command, when it is used:
# `topics list` neither imports `serve`'s modules nor builds its 40 options (it built
# every command of the tree, ~200 options, on every call).
COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "serve": ("._serve", "serve", None),
    "produce": ("._produce", "produce", None),
    "consume": ("._consume", "consume", None),
    "topics": ("._topics", "topics_app", None),
    "sub": ("._subs", "sub_app", None),
    "txn": ("._txn", "txn_app", None),
    "drill": (".drills", "drill_app", "Recovery drills (replay, crash, snapshot)."),
    "auth": ("._auth", "auth_app", None),
}


class _LazyCommands(MutableMapping[str, Any]):
    """A group's commands by name: every name known at once, a command built on first
    access (``get``, ``[]``); iterating the names (a typo's suggestions) builds none."""

    def __init__(self, names: Sequence[str]) -> None:
        self._names = list(names)
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in self._names:
                raise KeyError(name)
            self._built[name] = _build(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command
        if name not in self._names:
            self._names.append(name)

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._built.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


class _LazyGroup(TyperGroup):
    """The root group, its commands loaded as they are used (see :data:`COMMANDS`)."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.commands = _LazyCommands(list(COMMANDS))


def _build(name: str) -> Any:
    """The click command of ``name``: what ``app.command()``/``app.add_typer()`` of the
    root would have built."""
    module, attribute, help_text = COMMANDS[name]
    target = getattr(importlib.import_module(module, __package__), attribute)
    holder = typer.Typer(rich_markup_mode=None)
    if isinstance(target, typer.Typer):
        if help_text is None:
            holder.add_typer(target, name=name)
        else:
            holder.add_typer(target, name=name, help=help_text)
        return typer.main.get_group_from_info(
            holder.registered_groups[0],
            pretty_exceptions_short=app.pretty_exceptions_short,
            suggest_commands=True,
            rich_markup_mode=None,
        )
    holder.command(name)(target)
    return typer.main.get_command_from_info(
        holder.registered_commands[0],
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=None,
    )


app = typer.Typer(
    cls=_LazyGroup,
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
    # httpx's own command line (httpx._main) imports click, rich and pygments whenever they
    # are installed, as they are beside typer and uvicorn: ~50 ms of every client
    # command's start, for a module this process never runs. A None entry makes httpx
    # skip it (its `httpx.main` then says the CLI is not installed).
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
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
