"""What the drills share: the ``--data`` option and the two rich consoles."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:  # rich loads when a drill runs, not with every txnstream command
    from rich.console import Console
    from rich.text import Text

DataOption = Annotated[
    Path,
    typer.Option(
        "--data",
        help="Data directory. replay/snapshot: one no server is using.",
        file_okay=False,
    ),
]


def consoles() -> tuple[Console, Console]:
    """stdout for results (wide when not a terminal, so tables do not fold), stderr for bars."""
    from rich.console import Console

    out = Console(highlight=False)
    if not out.is_terminal:
        out = Console(highlight=False, width=max(out.width, 160))
    return out, Console(stderr=True, highlight=False)


def yes(ok: bool) -> Text:
    """A table cell: green ``yes`` or red ``NO``."""
    from rich.text import Text

    return Text("yes", style="green") if ok else Text("NO", style="bold red")
