"""The ``txnstream drill`` command group: each drill's command, registered here."""

from __future__ import annotations

import typer

from ._crash import crash_command
from ._replay import replay_command
from ._snapshot import snapshot_command

drill_app = typer.Typer(
    help="Recovery drills: snapshot vs full replay, crash under load, snapshot now.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
drill_app.command("replay")(replay_command)
drill_app.command("snapshot")(snapshot_command)
drill_app.command("crash")(crash_command)
