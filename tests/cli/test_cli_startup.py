"""The command line starts quickly: ``--version``, ``--help`` and the client commands load
neither the server (FastAPI, uvicorn) nor the engine (SQLite, Parquet); issue 31, item 3.

What a command imports is checked exactly; how long it takes is checked as a ratio to
``python -c pass`` in CPU time, best of several runs (so that a loaded machine does not
decide), with a generous bound.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
from cli_support import REPO

HEAVY = ("fastapi", "uvicorn", "starlette", "pyarrow", "aiosqlite", "pyroaring", "rich")
ENGINE = ("txnstream.api._engine", "txnstream.ledger._store", "txnstream.dispatcher")

_REPORT = """
import json, sys
from txnstream.api.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _env(url: str) -> dict[str, str]:
    env = {**os.environ, "TXNSTREAM_URL": url, "PYTHONPATH": str(REPO)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: compiled once, then cached
    return env


def _modules(url: str, *args: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _REPORT, *args],
        capture_output=True,
        text=True,
        env=_env(url),
        cwd=REPO,
        timeout=60,
        check=True,
    )
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "args",
    [("--version",), ("--help",), ("topics", "list"), ("consume", "nope", "--from", "earliest")],
)
def test_the_cli_does_not_load_the_server_or_the_engine(server_url: str, args: tuple[str]) -> None:
    loaded = _modules(server_url, *args)
    assert "txnstream.api.cli" in loaded
    assert not [m for m in loaded if m.split(".")[0] in HEAVY], args
    assert not [m for m in loaded if m.startswith(ENGINE)], args
    if args[0] in ("--version", "--help"):
        assert "httpx" not in loaded  # nothing to send


def _cpu_seconds(command: list[str], env: dict[str, str]) -> float:
    """The child's user + system CPU time of the best of 5 runs."""
    best = float("inf")
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, env=env, cwd=REPO, capture_output=True, timeout=60, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, used)
    return best


def test_version_and_a_client_command_start_within_a_few_interpreter_starts(
    server_url: str,
) -> None:
    env = _env(server_url)
    floor = _cpu_seconds([sys.executable, "-c", "pass"], env)
    version = _cpu_seconds([sys.executable, "-m", "txnstream", "--version"], env)
    listing = _cpu_seconds([sys.executable, "-m", "txnstream", "topics", "list"], env)
    # ~0.9 s (35-50x) when every call loaded the server; typer, httpx and pydantic (which
    # typer 0.29 coerces option values with) take ~5-10x of a bare interpreter's start,
    # more on a loaded machine. Generous: what they import is checked exactly above.
    assert version < 20 * floor + 0.1, (version, floor)
    assert listing < 25 * floor + 0.1, (listing, floor)
