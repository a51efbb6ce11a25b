"""The client commands against a server run with ``--auth``: ``--token`` and
``TXNSTREAM_TOKEN``; ``txnstream auth token`` makes tokens the server accepts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import AUTH_TOKENS, running_server, write_auth_file

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def auth_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("cli-auth")
    with running_server(root / "data", write_auth_file(root / "principals.json")) as url:
        yield url


def txnstream(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TXNSTREAM_TOKEN", None)
    if token is not None:
        env["TXNSTREAM_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "txnstream", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def test_client_commands_send_the_token(auth_url: str) -> None:
    alice = AUTH_TOKENS["alice"]
    refused = txnstream("topics", "create", "a-cli", "--url", auth_url)
    assert refused.returncode == 1
    assert "HTTP 401" in refused.stderr
    assert "--token" in refused.stderr
    done = txnstream("topics", "create", "a-cli", "--url", auth_url, "--token", alice)
    assert done.returncode == 0, done.stderr
    begun = txnstream("txn", "begin", "--url", auth_url, "--json", token=alice)  # from the env
    txn = json.loads(begun.stdout)["txn"]
    shown = txnstream("txn", "show", txn, "--url", auth_url, token=alice).stdout
    assert "owner: alice" in shown
    theirs = txnstream("txn", "commit", txn, "--url", auth_url, "--token", AUTH_TOKENS["bob"])
    assert theirs.returncode == 1
    assert "forbidden" in theirs.stderr
    denied = txnstream("produce", "a-cli", "1", "--url", auth_url, token=AUTH_TOKENS["bob"])
    assert denied.returncode == 1
    assert "HTTP 403" in denied.stderr


def test_a_token_made_by_the_cli_is_accepted(auth_url: str, tmp_path: Path) -> None:
    made = txnstream("auth", "token", "--json")
    assert made.returncode == 0, made.stderr
    pair: dict[str, Any] = json.loads(made.stdout)
    token, line = pair["token"], pair["sha256"]
    assert line.startswith("sha256:")
    assert len(line) == len("sha256:") + 64
    human = txnstream("auth", "token").stdout.split()
    assert len(human) == 2
    assert human[1].startswith("sha256:")

    auth_file = tmp_path / "principals.json"
    auth_file.write_text(
        json.dumps({"principals": [{"name": "new", "token": line, "admin": True}]})
    )
    with running_server(tmp_path / "data", auth_file) as url:
        assert txnstream("topics", "create", "x", "--url", url, "--token", token).returncode == 0
        assert txnstream("topics", "list", "--url", url, "--token", line).returncode == 1


@pytest.mark.parametrize(
    ("host", "auth", "insecure", "refused"),
    [
        ("127.0.0.1", False, False, False),
        ("127.0.0.2", False, False, False),
        ("::1", False, False, False),
        ("localhost", False, False, False),
        ("0.0.0.0", False, False, True),
        ("::", False, False, True),
        ("192.168.1.10", False, False, True),
        ("my-host.example", False, False, True),
        ("0.0.0.0", True, False, False),
        ("0.0.0.0", False, True, False),
    ],
)
def test_which_binds_need_auth(host: str, auth: bool, insecure: bool, refused: bool) -> None:
    from txnstream.api.cli._serve import check_bind

    assert (check_bind(host, auth=auth, insecure=insecure) is not None) is refused


def test_url_token_and_json_work_before_the_command(auth_url: str) -> None:
    """Issue 31 item 4: ``txnstream --url URL --token T --json topics list``, as in rpk and
    kubectl; given after the command too, the later one wins."""
    alice = AUTH_TOKENS["alice"]
    assert (
        txnstream("--url", auth_url, "--token", alice, "topics", "create", "a-before").returncode
        == 0
    )
    listed = txnstream("--url", auth_url, "--token", alice, "--json", "topics", "list")
    assert listed.returncode == 0, listed.stderr
    assert {"topic": "a-before"} in [json.loads(line) for line in listed.stdout.splitlines()]
    # Before the command beats the environment; after the command beats before it.
    env_token = txnstream("--url", auth_url, "--token", alice, "topics", "list", token="wrong")
    assert env_token.returncode == 0, env_token.stderr
    wrong_then_right = txnstream(
        "--url", "http://127.0.0.1:9", "topics", "list", "--url", auth_url, "--token", alice
    )
    assert wrong_then_right.returncode == 0, wrong_then_right.stderr
    nowhere = txnstream("--url", "http://127.0.0.1:9", "--token", alice, "topics", "list")
    assert nowhere.returncode == 1
    assert "cannot reach the server at http://127.0.0.1:9" in nowhere.stderr
