"""``txnstream drill snapshot``: take a snapshot of one topic now and show what it holds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from txnstream.api import Engine
from txnstream.api.support import DB_FILE

from ._console import consoles


def run(data: Path, topic: str) -> None:
    """``drill snapshot`` (the command, its options and help are in ``_group``)."""
    out, err = consoles()
    if not (data / DB_FILE).is_file():
        err.print(f"error: no txnstream database at {data / DB_FILE}", markup=False)
        raise typer.Exit(2)

    async def run() -> dict[str, Any]:
        async with Engine.open(data) as engine:
            held = await engine.take_snapshot(topic)
            held["stats"] = await engine.stats(topic)
            return held

    try:
        with err.status(f"opening {data} and snapshotting {topic}"):
            held = asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - any engine error is reported, exit 1
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None
    table = Table(title=f"snapshot of {topic}", show_header=False)
    table.add_column("field")
    table.add_column("value")
    open_txns: dict[str, str] = held["open_txns"]
    shown = ", ".join(f"{t} from {p}" for t, p in list(open_txns.items())[:10])
    if len(open_txns) > 10:
        shown += f", ... ({len(open_txns) - 10} more)"
    rows = [
        ("position", held["position"]),
        ("stable position", held["stable_position"]),
        ("open txns", f"{len(open_txns)}" + (f" ({shown})" if shown else "")),
        ("aborted txns", held["aborted_txns"]),
        ("segments", held["segments"]),
        ("bytes written", held["bytes_written"]),
        ("snapshot bytes", held["snapshot_bytes"]),
        ("ledgers", held["stats"]["ledgers"]),
        ("entries", held["stats"]["entries"]),
    ]
    for name, value in rows:
        table.add_row(name, Text("-" if value is None else str(value)))
    out.print(table)
