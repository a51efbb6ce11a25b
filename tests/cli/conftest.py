"""Fixtures of the CLI tests: ``cli`` runs the command in this process, ``cli_proc`` as a
subprocess, both against the session server."""

from __future__ import annotations

import pytest
from cli_support import Cli, run_in_process, run_subprocess, runner


@pytest.fixture
def cli(server_url: str) -> Cli:
    """Run ``txnstream ARGS`` (in this process) against the session server."""
    return runner(server_url, run_in_process)


@pytest.fixture
def cli_proc(server_url: str) -> Cli:
    """Run ``txnstream ARGS`` as a subprocess against the session server."""
    return runner(server_url, run_subprocess)
