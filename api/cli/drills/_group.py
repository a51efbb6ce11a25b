"""The ``txnstream drill`` command group: each drill's command and options, registered here.

A drill's code (rich, the engine, the HTTP client) loads when the drill runs, so the
other ``txnstream`` commands start without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ._console import DataOption

drill_app = typer.Typer(
    help="Recovery drills: snapshot vs full replay, crash under load, snapshot now.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@drill_app.command("replay")
def replay_command(data: DataOption) -> None:
    """Compare snapshot recovery with a full replay for every topic of DATA.

    Run it on a data directory no server is using: it opens the store (and, like every
    open, starts a new ledger per topic). Exits 1 if any topic's states differ.
    """
    from ._replay import run

    run(data)


@drill_app.command("snapshot")
def snapshot_command(
    data: DataOption,
    topic: Annotated[str, typer.Option("--topic", help="The topic to snapshot.")],
) -> None:
    """Take a snapshot of TOPIC now and show what it holds.

    Opens the engine on DATA (recovery and reconciliation included): run it on a data
    directory no server is using.
    """
    from ._snapshot import run

    run(data, topic)


@drill_app.command("crash")
def crash_command(
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Data directory of the server.", file_okay=False),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            metavar="URL",
            help="A PostgreSQL store (postgresql://user@host:port/db) instead of --data.",
        ),
    ] = None,
    servers: Annotated[
        int,
        typer.Option(
            min=1,
            max=8,
            help="Servers on the --store: one active, the others standbys; each kill is"
            " then a failover.",
        ),
    ] = 1,
    lease_timeout: Annotated[
        float,
        typer.Option(min=0.5, max=60.0, help="The servers' --lease-timeout (s) with --store."),
    ] = 2.0,
    duration: Annotated[
        float, typer.Option(min=1.0, max=3600.0, help="Seconds of workload.")
    ] = 30.0,
    kills: Annotated[int, typer.Option(min=0, max=1000, help="SIGKILLs over the run.")] = 5,
    seed: Annotated[
        int | None, typer.Option(help="RNG seed (workload and kill schedule); default random.")
    ] = None,
    topics: Annotated[int, typer.Option(min=1, max=20, help="Topics.")] = 3,
    producers: Annotated[int, typer.Option(min=1, max=32, help="Transactional producers.")] = 4,
    report: Annotated[
        Path | None, typer.Option(help="Also write the counts and checks here as JSON.")
    ] = None,
    sigstops: Annotated[
        int, typer.Option(min=0, max=100, help="SIGSTOP pauses (1-2.5 s each) after the kills.")
    ] = 0,
    disk_full: Annotated[
        int,
        typer.Option(
            min=0,
            max=100,
            help="Disk-full spells after the pauses: DATA's file system (at most 4 GiB: a"
            " tmpfs of its own) filled to the last byte for 1-2 s, alternately with the"
            " server's default reserve and with --min-free-bytes 0.",
        ),
    ] = 0,
) -> None:
    """Kill a real server under a transactional workload and check the recorded history.

    Starts ``txnstream serve`` on a free loopback port over DATA (its log goes to
    DATA/drill-serve.log), drives transactions (commit ~70%, abort ~20%, abandoned ~10%),
    an idempotent producer and acking consumers over HTTP, SIGKILLs and restarts the
    server KILLS times, then checks that nothing committed was lost, nothing aborted or
    abandoned was delivered, nothing was redelivered after its ack, and order was kept.
    With --sigstops and --disk-full, the server is then paused with SIGSTOP, and the
    disk filled and freed, under the same workload and the same checks; after each
    spell health must be ok again within 30 s, without a restart.

    With --store URL --servers N (N >= 2), N servers serve one PostgreSQL database (their
    logs go to a new temporary directory the drill names): the client follows the
    active, each kill is a kill -9 of the active, a standby takes over, and the killed
    server comes back as a standby. The report lists each failover and its duration.
    Exits 1 if any check fails, 2 if the drill could not run.
    """
    from ._crash import run

    run(
        data,
        duration,
        kills,
        seed,
        topics,
        producers,
        report,
        disk_full,
        sigstops,
        store=store,
        servers=servers,
        lease_timeout=lease_timeout,
    )
