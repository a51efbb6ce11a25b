"""``txnstream drill crash``: kill a real server under load, then check the history.

The drill owns its ``serve`` children (``_server``: one over a data directory, or
several on one PostgreSQL store, where each kill is a failover) and kills them on the
way out, whatever happens; the workload (``_workload``) records into a ``History`` and
``_history`` checks it. This module runs the pieces in order and prints the report.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import signal
import tempfile
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from txnstream.api.support import TopicReplay, replay_check

from ._console import consoles, yes
from ._errors import DrillError
from ._history import History, check_history
from ._server import DrillServers, ServerChild, ServerFleet
from ._workload import Workload


class _CrashDrill:
    """One run of ``drill crash``: server child, workload, replay check and report."""

    def __init__(
        self,
        location: Path | str,
        servers: DrillServers,
        *,
        duration: float,
        kills: int,
        seed: int,
        topics: int,
        producers: int,
        out: Console,
        err: Console,
        disk_full: int = 0,
        stops: int = 0,
    ) -> None:
        self.location = location
        self.duration = duration
        self.kill_count = kills
        self.spell_count = disk_full
        self.stop_count = stops
        self.seed = seed
        self.producer_count = producers
        self.out, self.err = out, err
        self.run = f"drill-{secrets.token_hex(3)}"
        self.topics = [f"{self.run}-{i}" for i in range(topics)]
        self.child = servers
        self.history = History()
        self.replay: list[TopicReplay] = []
        self.stop_status: int | None = None

    async def execute(self, report_path: Path | None) -> int:
        """Run the whole drill; returns the exit status (0 when every check passed).

        SIGTERM and SIGHUP cancel it like Ctrl-C does; either way the server child is
        killed before this returns.
        """
        if isinstance(self.location, Path):
            self.location.mkdir(parents=True, exist_ok=True)
        budget = (
            self.duration + 240 + 50 * self.kill_count + 60 * self.spell_count + 5 * self.stop_count
        )
        loop, me = asyncio.get_running_loop(), asyncio.current_task()
        signals: list[str] = []

        def interrupt(sig: signal.Signals) -> None:
            signals.append(sig.name)
            if me is not None:
                me.cancel()

        for sig in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(sig, interrupt, sig)
        workload = Workload(
            self.child,
            self.history,
            run=self.run,
            topics=self.topics,
            seed=self.seed,
            duration=self.duration,
            kills=self.kill_count,
            producers=self.producer_count,
            err=self.err,
            disk_full=self.spell_count,
            stops=self.stop_count,
        )
        try:
            async with asyncio.timeout(budget):
                await self.child.start()
                await workload.setup()
                await workload.drive()
                self.stop_status = await self.child.stop()
        except TimeoutError:
            raise DrillError(f"the drill overran its time budget of {budget:.0f} s") from None
        except asyncio.CancelledError:
            if not signals:
                raise
            raise DrillError(f"stopped by {signals[0]}") from None
        finally:
            if self.child.alive():
                self.child.kill()
            await self.child.close_clients()
            for sig in (signal.SIGTERM, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        with self.err.status("comparing snapshot recovery with a full replay"):
            self.replay = await replay_check(self.location)
        return self.report(report_path)

    def _counts(self) -> list[tuple[str, str]]:
        h = self.history
        outcomes = Counter(t.outcome for t in h.txns)
        reasons = Counter(t.reason for t in h.txns if t.outcome == "abandoned")
        redeliveries = len(h.deliveries) - len({d.id for d in h.deliveries})
        restart = (
            f" (restart {min(h.restart_seconds):.1f}-{max(h.restart_seconds):.1f} s)"
            if h.restart_seconds
            else ""
        )
        stop = {0: "clean", -signal.SIGTERM: "clean (SIGTERM)"}.get(
            self.stop_status if self.stop_status is not None else 1, f"status {self.stop_status}"
        )
        rows = [
            ("kills (SIGKILL)", f"{h.kills}{restart}"),
            *self._failover_rows(),
            ("topics / txn producers", f"{len(self.topics)} / {self.producer_count}"),
            ("txns committed", str(outcomes["committed"])),
            ("txns aborted", str(outcomes["aborted"])),
            (
                "txns abandoned",
                f"{outcomes['abandoned']} ("
                + ", ".join(f"{n} {r}" for r, n in reasons.most_common())
                + ")"
                if reasons
                else "0",
            ),
            ("txns in doubt (commit answer lost or 503)", str(outcomes["unknown"])),
            ("begins lost with the server", str(h.begin_failures)),
            ("messages produced", str(len(h.messages))),
            ("messages committed", str(h.committed_count())),
            (
                "idempotent batches / resent / answered duplicate",
                f"{h.idem_batches} / {h.idem_retries} / {h.idem_duplicates}",
            ),
            ("deliveries", str(len(h.deliveries))),
            ("redeliveries (at-least-once)", str(redeliveries)),
            ("consumer sessions", str(len({(d.topic, d.session) for d in h.deliveries}))),
            ("entries in final fetch", str(sum(len(v) for v in h.log_entries.values()))),
            ("server stop", stop),
        ]
        if self.stop_count:
            rows.append(("pauses (SIGSTOP)", str(h.stops)))
        if self.spell_count:
            rows.append(("disk-full spells", str(len(h.spells))))
            rows += [(f"  spell {i + 1}", spell) for i, spell in enumerate(h.spells)]
        return rows

    def _failover_rows(self) -> list[tuple[str, str]]:
        """With several servers: how many took over, how long each took."""
        if not isinstance(self.child, ServerFleet):
            return []
        took = [f.seconds for f in self.history.failovers]
        span = f" ({min(took):.1f}-{max(took):.1f} s)" if took else ""
        rows = [
            (
                "servers / lease timeout",
                f"{len(self.child.members)} / {self.child.lease_timeout:g} s",
            )
        ]
        rows.append(("failovers", f"{len(took)}{span}"))
        rows += [
            (f"  failover {i + 1}", f"{f.killed} killed, {f.active} active in {f.seconds:.2f} s")
            for i, f in enumerate(self.history.failovers)
        ]
        return rows

    def report(self, path: Path | None = None) -> int:
        """Print the counts and the checks (and write them to ``path`` as JSON).

        Returns the exit status.
        """
        rows = self._counts()
        counts = Table(title=f"crash drill {self.run} (seed {self.seed})", show_header=False)
        counts.add_column("what")
        counts.add_column("count", justify="right")
        for name, value in rows:
            counts.add_row(name, value)
        self.out.print(counts)
        checks = check_history(self.history, self.replay)
        table = Table(title="checks")
        table.add_column("check")
        table.add_column("ok", justify="center")
        table.add_column("detail")
        for check in checks:
            table.add_row(check.name, yes(check.ok), Text(check.detail))
        self.out.print(table)
        failed = [c.name for c in checks if not c.ok]
        if path is not None:
            document = {
                "run": self.run,
                "seed": self.seed,
                "passed": not failed,
                "counts": dict(rows),
                "failovers": [
                    {"killed": f.killed, "active": f.active, "seconds": round(f.seconds, 3)}
                    for f in self.history.failovers
                ],
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
            }
            path.write_text(json.dumps(document, indent=2) + "\n")
        if failed:
            self.out.print(
                f"result: FAILED {len(failed)} of {len(checks)} checks (seed {self.seed};"
                f" server log {self.child.log_path})",
                markup=False,
            )
            return 1
        self.out.print(f"result: passed all {len(checks)} checks", markup=False)
        return 0


def run(
    data: Path | None,
    duration: float,
    kills: int,
    seed: int | None,
    topics: int,
    producers: int,
    report: Path | None,
    disk_full: int = 0,
    stops: int = 0,
    *,
    store: str | None = None,
    servers: int = 1,
    lease_timeout: float = 2.0,
) -> None:
    """``drill crash`` (the command, its options and help are in ``_group``)."""
    out, err = consoles()
    try:
        location, children = _servers(data, store, servers, lease_timeout, disk_full, stops)
    except DrillError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    chosen = seed if seed is not None else random.SystemRandom().randrange(1 << 31)
    drill = _CrashDrill(
        location,
        children,
        duration=duration,
        kills=kills,
        seed=chosen,
        topics=topics,
        producers=producers,
        out=out,
        err=err,
        disk_full=disk_full,
        stops=stops,
    )
    where = f"data {location}"
    if isinstance(children, ServerFleet):
        where = (
            f"{servers} server(s), lease timeout {lease_timeout:g} s,"
            f" server logs {children.log_path}"
        )
    err.print(
        f"crash drill: {duration:g} s, {kills} kill(s), {stops} pause(s), {disk_full} disk-full"
        f" spell(s), seed {chosen}, {where}",
        markup=False,
    )
    try:
        status = asyncio.run(drill.execute(report))
    except DrillError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(2) from None
    if status:
        raise typer.Exit(status)


def _servers(
    data: Path | None,
    store: str | None,
    count: int,
    lease_timeout: float,
    disk_full: int,
    stops: int,
) -> tuple[Path | str, DrillServers]:
    """The drill's store and its server children, from the checked options."""
    if data is not None and store is not None:
        raise DrillError("--data and --store are exclusive: give a data directory or a store URL")
    if store is None:
        if count > 1:
            raise DrillError(
                f"--servers {count} needs a store the servers share: --store postgresql://..."
            )
        if data is None:
            raise DrillError("give --data DIR (or --store postgresql://...)")
        return data, ServerChild(data, data / "drill-serve.log")
    if not store.startswith(("postgresql://", "postgres://")):
        raise DrillError(f"--store {store}: not a postgresql:// URL")
    if disk_full or stops:
        raise DrillError("--disk-full and --sigstops need --data (a server of its own)")
    logs = Path(tempfile.mkdtemp(prefix="txnstream-drill-"))
    fleet = ServerFleet(
        store,
        count,
        logs,
        lease_timeout=lease_timeout,
        failover_timeout=lease_timeout + 40.0,
    )
    return store, fleet
