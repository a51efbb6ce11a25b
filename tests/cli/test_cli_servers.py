"""``--url a,b,c`` and ``TXNSTREAM_URL`` with commas: the CLI follows the server that answers."""

from __future__ import annotations

import pytest
from cli_support import run_in_process, run_subprocess, runner
from support import free_port

pytestmark = pytest.mark.timeout(120)


def test_a_list_of_urls_reaches_the_live_server(server_url: str, name: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    for run in (run_in_process, run_subprocess):
        cli = runner(f"{dead},{server_url}", run)  # TXNSTREAM_URL with a comma
        cli("topics", "create", f"{name}-{run.__name__}")
        listed = cli("topics", "list", "--url", f"{dead}, {server_url}")
        assert f"{name}-{run.__name__}" in listed.stdout.split()


def test_a_bad_url_in_the_list_is_a_usage_error(server_url: str) -> None:
    cli = runner(server_url, run_in_process)
    ran = cli("topics", "list", "--url", f"{server_url},ftp://elsewhere", ok=False)
    assert ran.returncode == 2
    assert ran.stderr.strip() == "error: --url: not an http(s) server URL: 'ftp://elsewhere'"
