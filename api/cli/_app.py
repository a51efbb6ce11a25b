"""The ``txnstream`` typer app: every command and group, registered in one place."""

from __future__ import annotations

from collections.abc import Sequence

import typer

from ._messages import consume, produce
from ._serve import serve
from ._topics import topics_app
from ._txn import txn_app
from .drills import drill_app

app = typer.Typer(
    name="txnstream",
    help="txnstream: transactional topics. `serve` runs the server; the rest are clients.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(topics_app, name="topics")
app.add_typer(txn_app, name="txn")
app.command()(serve)
app.command()(produce)
app.command()(consume)
app.add_typer(drill_app, name="drill", help="Recovery drills (replay, crash, snapshot).")


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (``txnstream``, ``python -m api``)."""
    app(args=list(argv) if argv is not None else None, prog_name="txnstream")
