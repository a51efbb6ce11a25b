"""Run the txnstream benchmarks: ``make bench`` (or ``make bench QUICK=1``).

Usage: ``.venv/bin/python benchmarks/run.py [--quick] [--only B1,B3] [--runs N]
[--output PATH]``. Prints a table of every figure (median of the runs, ratio to its
baseline, spread of the runs, the issue's target) and writes ``bench-results.json`` at
the repository root::

    {"figures": [{"id": "B1-txn10", "value": 41000.0, "unit": "msg/s",
                  "baseline": "B1-ceiling", "ratio": 0.86}, ...],
     "samples": {"B1-txn10": [...], ...}, "meta": {...}}

Progress goes to stderr. Figure groups register themselves in :mod:`benchmarks.core`;
:data:`GROUP_MODULES` lists the modules that hold them.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import importlib
import json
import os
import platform
import sqlite3
import subprocess
import time
from datetime import UTC, datetime
from typing import Any

from benchmarks.core import (
    REPO_ROOT,
    STALLS,
    Figure,
    Settings,
    Skipped,
    Target,
    format_table,
    install_stall_watch,
    progress,
    registry,
    resolve,
    stall_phase,
)

GROUP_MODULES = (
    "benchmarks.b1_produce",
    "benchmarks.b2_consume",
    "benchmarks.b3_latency",
    "benchmarks.b4_memory",
    "benchmarks.x1_scale",
    "benchmarks.extra_groups",
    "benchmarks.m_soak",
    "benchmarks.t_tiers",
    "benchmarks.k_kafka",
    "benchmarks.p_postgres",
    "benchmarks.f_failover",
)
"""Modules whose import registers figure groups (later issues append theirs)."""


def git_state() -> dict[str, Any]:
    """The commit measured and whether tracked files differed from it (None: unknown)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return None
        return done.stdout.strip()

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description="txnstream benchmarks")
    parser.add_argument("--quick", action="store_true", help="smaller workloads (< 1 minute)")
    parser.add_argument(
        "--only", default="", help="comma-separated groups to run, e.g. B1,B3 (default: all)"
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median; >= 1)")
    parser.add_argument(
        "--output",
        type=Path,
        default=REPO_ROOT / "bench-results.json",
        help="where to write the JSON results",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the selected groups, print the table, write the JSON; 0 on success."""
    args = parse_args(argv)
    for module in GROUP_MODULES:
        importlib.import_module(module)
    groups = registry()
    wanted = [name.strip() for name in args.only.split(",") if name.strip()] or list(groups)
    unknown = [name for name in wanted if name not in groups]
    if unknown:
        print(f"unknown group(s) {', '.join(unknown)}; known: {', '.join(groups)}", file=sys.stderr)
        return 2
    settings = Settings(quick=args.quick, runs=args.runs)
    progress(
        f"running {', '.join(wanted)} ({'quick' if args.quick else 'full'},"
        f" {args.runs} run(s) per figure)"
    )
    git = git_state()  # before running: other work may commit meanwhile
    install_stall_watch()  # every asyncio.run below records its loop's longest steps
    started = time.perf_counter()
    figures: list[Figure] = []
    skipped: dict[str, str] = {}
    for name in wanted:
        bench = groups[name]
        progress(f"{name}: {bench.title}")
        try:
            with stall_phase(name):
                produced = bench.run(settings)
        except Skipped as why:
            skipped[name] = str(why)
            progress(f"{name}: skipped: {why}")
            continue
        ids = [f.id for f in produced]
        if not bench.figure_ids:  # a group whose figures depend on its sizes: keep its order
            figures.extend(produced)
            continue
        if sorted(ids) != sorted(bench.figure_ids):
            raise RuntimeError(f"group {name} returned {ids}, declared {list(bench.figure_ids)}")
        order = {figure_id: i for i, figure_id in enumerate(bench.figure_ids)}
        figures.extend(sorted(produced, key=lambda f: order[f.id]))
    duration = time.perf_counter() - started
    if STALLS.worst:
        worst = STALLS.worst[0][0]
        figures.append(
            Figure("L1-stall-ms", worst * 1000, "ms", None, Target("<=", 50.0), (worst * 1000,))
        )
        progress(
            "L1 longest event-loop steps: "
            + ", ".join(f"{s * 1000:.1f} ms ({phase})" for s, phase in STALLS.worst)
        )

    rows = resolve(figures)
    print()
    print(f"txnstream benchmarks ({'quick' if args.quick else 'full'}, median of {args.runs})")
    print(format_table(rows))
    print()
    for name, why in skipped.items():
        print(f"{name} skipped: {why}")
    print(f"{len(rows)} figures in {duration:.0f} s; results written to {args.output}")

    document: dict[str, Any] = {
        "figures": [row.as_json() for row in rows],
        "samples": {f.id: list(f.samples) for f in figures},
        "meta": {
            "quick": args.quick,
            "runs": args.runs,
            "groups": wanted,
            "duration_s": round(duration, 1),
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "git": git,
            "stalls_ms": [[round(s * 1000, 2), phase] for s, phase in STALLS.worst],
            "skipped": skipped,
        },
    }
    args.output.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
