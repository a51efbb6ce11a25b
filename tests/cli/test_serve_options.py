"""``serve``'s options (issue 31, items 7 and 8): each has help, choices where there are
some, a default and an environment variable; ``--config FILE`` (TOML) sets any of them,
below flags and environment variables; a start that fails is one line and exit 3."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import typer
from support import ServeSubprocess, free_port, run_serve

from txnstream.api.cli import app

REPO = Path(__file__).resolve().parents[2]


def test_every_serve_option_has_help_a_default_and_an_environment_variable() -> None:
    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    options = [p for p in serve.params if p.opts[0] != "--help"]
    assert len(options) > 30
    for option in options:
        assert option.help, option.opts
        assert str(option.envvar).startswith("TXNSTREAM_"), option.opts
        assert option.show_envvar, option.opts
        assert option.show_default or option.is_flag or "[default:" in option.help, option.opts
    envvars = [o.envvar for o in options]
    assert len(set(envvars)) == len(envvars)
    text = subprocess.run(
        [sys.executable, "-m", "txnstream", "serve", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=60,
        check=True,
    ).stdout
    text = " ".join(text.split())  # as wrapped to any width
    for shown in (
        "--data DIR",
        "env var: TXNSTREAM_DATA",
        "env var: TXNSTREAM_PORT; default: 8080",
        "--log-level <critical|error|warning|info|debug>",
        "--log-format <text|json>",
        "--durability <full|normal>",
        "--writer <thread|process>",
        "env var: TXNSTREAM_AUTH_FILE",
        "--config FILE",
    ):
        assert shown in text, shown


def test_a_config_file_sets_options_below_flags_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "txnstream.toml"
    config.write_text(
        f'data = "{tmp_path / "from-file"}"\n'
        f"port = {free_port()}\n"  # the flag wins
        'log-format = "json"\n'
        "max-messages-per-request = 3\n"  # the environment wins
        "gc_freeze = false\n"  # underscores work too
        'durability = "normal"\n'
    )
    os.environ["TXNSTREAM_MAX_MESSAGES_PER_REQUEST"] = "5"
    try:
        server = ServeSubprocess(tmp_path / "from-flag", tmp_path / "log", "--config", str(config))
        with server:
            topic = f"{server.url}/v1/topics/t"
            assert httpx.put(topic, timeout=10).status_code == 201
            five = {"messages": [{"value": i} for i in range(5)]}
            assert httpx.post(f"{topic}/messages", json=five, timeout=10).status_code == 200
            six = {"messages": [{"value": i} for i in range(6)]}
            assert httpx.post(f"{topic}/messages", json=six, timeout=10).status_code == 413
    finally:
        del os.environ["TXNSTREAM_MAX_MESSAGES_PER_REQUEST"]
    assert (tmp_path / "from-flag").is_dir()
    assert not (tmp_path / "from-file").exists()
    lines = server.log().splitlines()
    assert lines
    assert all(line.startswith("{") for line in lines), lines[:3]  # log-format from the file


def test_a_bad_config_file_is_one_line(tmp_path: Path) -> None:
    for text, says in (
        ("colour = 'blue'\n", "unknown setting 'colour'"),
        ("port = [\n", "not valid TOML"),
        ("[port]\nhttp = 1\n", "must be a value, not a table"),
        ("log-level = 'loud'\n", "--log-level"),
    ):
        config = tmp_path / "bad.toml"
        config.write_text(text)
        done = run_serve("--data", str(tmp_path / "d"), "--config", str(config))
        assert done.returncode == 2, (text, done.stderr)
        assert says in done.stderr, (text, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "d").exists()


def test_a_port_in_use_is_one_line_before_anything_else(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_serve("--data", str(tmp_path / "d"), "--port", str(port))  # the last wins
    assert done.returncode == 3
    assert done.stderr.strip() == (
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ), done.stderr
    assert done.stdout == ""


def test_a_locked_data_directory_is_one_line(tmp_path: Path) -> None:
    with ServeSubprocess(tmp_path / "data", tmp_path / "first.log") as first:
        done = run_serve("--data", str(first.data))
    assert done.returncode == 3
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot open {first.data}: ")
    assert "locked" in line
    assert f"pid {first.proc.pid}" in line
    assert "serving" not in done.stdout + done.stderr
