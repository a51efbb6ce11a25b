"""``txnstream drill replay``: snapshot recovery vs full replay, per topic, as a table."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from txnstream.api import NotFoundError
from txnstream.api.support import TopicReplay, replay_check

from ._console import consoles, yes


class _ListHandler(logging.Handler):
    """Collects log records (the snapshot fallback warnings) to show under the table."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _replay_table(results: list[TopicReplay]) -> Table:
    table = Table(title="snapshot recovery vs full replay")
    for column in ("topic", "snapshot at", "entries (snapshot)", "entries (full)"):
        table.add_column(column, justify="left" if column == "topic" else "right")
    for column in ("time (snapshot)", "time (full)", "speed-up"):
        table.add_column(column, justify="right")
    for column in ("open", "aborted", "producers"):
        table.add_column(column, justify="right")
    table.add_column("equal", justify="center")
    for r in results:
        table.add_row(
            Text(r.topic),
            str(r.snapshot_position) if r.from_snapshot else "none (full)",
            str(r.snapshot_entries),
            str(r.full_entries),
            f"{r.snapshot_seconds * 1000:.1f} ms",
            f"{r.full_seconds * 1000:.1f} ms",
            f"{r.speedup:.1f}x" if r.from_snapshot else "-",
            str(r.open_txns),
            str(r.aborted_txns),
            str(r.producers),
            yes(r.equal),
        )
    return table


def run(data: Path) -> None:
    """``drill replay`` (the command, its options and help are in ``_group``)."""
    out, err = consoles()
    handler = _ListHandler()
    snapshot_log = logging.getLogger("txnstream.snapshots")
    snapshot_log.addHandler(handler)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )

    async def run() -> list[TopicReplay]:
        task = progress.add_task("opening", total=None)

        def step(what: str) -> None:
            progress.update(task, description=what)
            if what.endswith("full replay"):
                progress.advance(task)

        def total(count: int) -> None:
            progress.update(task, total=count * 2)

        with progress:
            return await replay_check(data, on_topics=total, on_step=step)

    try:
        results = asyncio.run(run())
    except NotFoundError as exc:  # no txnstream database there
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    finally:
        snapshot_log.removeHandler(handler)
    out.print(_replay_table(results))
    for message in handler.messages:
        out.print(f"note: {message}", markup=False)
    bad = [r for r in results if not r.equal]
    for r in bad:
        out.print(f"topic {r.topic}: snapshot recovery differs from full replay:", markup=False)
        for line in r.differences:
            out.print(f"  - {line}", markup=False)
    if not results:
        out.print("result: equal (no topics)")
    elif bad:
        out.print(f"result: MISMATCH in {len(bad)} of {len(results)} topic(s)")
        raise typer.Exit(1)
    else:
        total_snap = sum(r.snapshot_seconds for r in results)
        total_full = sum(r.full_seconds for r in results)
        out.print(
            f"result: equal ({len(results)} topic(s); snapshot recovery"
            f" {total_snap * 1000:.1f} ms vs full replay {total_full * 1000:.1f} ms)"
        )
