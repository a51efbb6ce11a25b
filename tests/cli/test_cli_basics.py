"""The command as a whole: --version, help (flags shown as flags), shell completion, and
errors that are one line with exit code 1 (request) or 2 (usage), never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

from cli_support import REPO, Cli, cli_env


def test_version(cli: Cli, cli_proc: Cli) -> None:
    expected = f"txnstream {metadata.version('txnstream')}\n"
    assert cli("--version").stdout == expected
    assert cli_proc("--version").stdout == expected


def test_help_shows_flags_without_a_value(cli: Cli) -> None:
    for command in (("topics", "list"), ("consume",), ("produce",), ("sub", "peek")):
        text = cli(*command, "--help").stdout
        assert "--json " in text, command
        assert "<bool>" not in text, command
    consume = cli("consume", "--help").stdout
    assert "--from L:E|earliest|latest|-N|@TIME" in consume
    assert "--follow" in consume
    assert "%v value" in cli("consume", "--help").stdout.replace("\n", " ")


def test_shell_completion(server_url: str) -> None:
    def complete(words: str) -> list[str]:
        env = {
            **cli_env(server_url),
            "_TXNSTREAM_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - 1),
        }
        proc = subprocess.run(
            [sys.executable, "-m", "txnstream"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return proc.stdout.split()

    assert complete("txnstream su") == ["sub"]
    assert set(complete("txnstream sub p")) == {"peek"}
    assert "--from" in complete("txnstream consume orders --fr")
    script = subprocess.run(
        [sys.executable, "-m", "txnstream", "--show-completion", "bash"],
        env=cli_env(server_url),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "_TXNSTREAM_COMPLETE" in script


def test_usage_errors_exit_2_in_one_line(cli: Cli, cli_proc: Cli) -> None:
    cases = [
        ("nosuchcommand",),
        ("topics", "create"),
        ("topics", "list", "--jsn"),
        ("consume", "t", "s", "--max", "many"),
        ("consume", "t", "s", "--wait-ms", "40000"),
        ("txn", "begin", "--timeout-ms", "0"),
        ("topics", "list", "--json=yes"),
    ]
    for args in cases:
        failed = cli(*args, ok=False)
        assert failed.returncode == 2, (args, failed.stderr)
        lines = failed.stderr.strip().splitlines()
        assert len(lines) == 1, (args, failed.stderr)
        assert lines[0].startswith("error: "), (args, failed.stderr)
        assert "--help" in lines[0], (args, failed.stderr)
    real = cli_proc("consume", "t", "s", "--max", "many", ok=False)
    assert real.returncode == 2
    assert real.stderr.startswith("error: Invalid value for '--max'")
    # A group without a command prints its help (and is a usage error).
    bare = cli("sub", ok=False)
    assert bare.returncode == 2
    assert "peek" in bare.stderr


def test_request_errors_exit_1_in_one_line(cli: Cli, cli_proc: Cli, name: str) -> None:
    cases = [
        (("topics", "stats", f"{name}-missing"), "(not_found, HTTP 404)"),
        (("topics", "create", "__reserved"), "(invalid_request, HTTP 400)"),
        (("sub", "delete", f"{name}-missing", "s"), "(not_found, HTTP 404)"),
        (("txn", "abort", "txn-never"), "(not_found, HTTP 404)"),
        (("topics", "list", "--url", "http://127.0.0.1:9"), "cannot reach the server"),
        (("consume", "t", "s", "--url", "http://127.0.0.1:9", "--follow"), "cannot reach"),
    ]
    for args, expected in cases:
        for run in (cli, cli_proc) if "--url" in args else (cli,):
            failed = run(*args, ok=False)
            assert failed.returncode == 1, (args, failed.stderr)
            lines = failed.stderr.strip().splitlines()
            assert len(lines) == 1, (args, failed.stderr)
            assert lines[0].startswith("error: "), (args, failed.stderr)
            assert expected in lines[0], (args, failed.stderr)


def test_output_to_a_closed_pipe_is_quiet(server_url: str, cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    cli("produce", name, stdin="".join(f"{i}\n" for i in range(3000)), ok=True)
    env = {**cli_env(server_url), "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    piped = subprocess.run(
        f"{sys.executable} -m txnstream consume {name} --from earliest --max 3000"
        " --no-header | head -n 1",
        shell=True,
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert piped.stdout.split("\t")[2].strip() == "0"
    assert "Traceback" not in piped.stderr
