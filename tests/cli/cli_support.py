"""Running the ``txnstream`` command in tests: in this process (fast, the same ``main``,
a real stdin pipe) or as a real subprocess (what a shell does)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from txnstream.api.cli import main

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Ran:
    """What a run of the command left: exit code, stdout (text and bytes), stderr."""

    returncode: int
    stdout_bytes: bytes
    stderr: str

    @property
    def stdout(self) -> str:
        return self.stdout_bytes.decode("utf-8", "replace")


Cli = Callable[..., Ran]


def json_lines(text: str) -> list[Any]:
    """The objects of ``--json`` output: JSON Lines, one object per line."""
    return [json.loads(line) for line in text.splitlines()]


def subscriptions(cli: Cli, topic: str) -> dict[str, Any]:
    """``sub list TOPIC --json`` as ``{name: settings}``."""
    return {
        sub.pop("subscription"): sub
        for sub in json_lines(cli("sub", "list", topic, "--json").stdout)
    }


def cli_env(url: str) -> dict[str, str]:
    """The environment of a subprocess run against ``url``."""
    return {**os.environ, "TXNSTREAM_URL": url, "PYTHONPATH": str(REPO)}


def run_in_process(args: tuple[str, ...], url: str, stdin: bytes | str | None) -> Ran:
    """``main(args)`` with stdin a real pipe holding ``stdin`` and stdout/stderr captured."""
    data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    read_fd, write_fd = os.pipe()
    # The pipe buffer (64 KiB) holds what the tests send; more would block here.
    assert len(data) < 60_000
    os.write(write_fd, data)
    os.close(write_fd)
    stdin_file = io.TextIOWrapper(open(read_fd, "rb"), encoding="utf-8")  # noqa: SIM115
    out, err = io.BytesIO(), io.BytesIO()
    saved = sys.stdin, sys.stdout, sys.stderr, os.environ.get("TXNSTREAM_URL")
    out_text = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    err_text = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    sys.stdin, sys.stdout, sys.stderr = stdin_file, out_text, err_text
    os.environ["TXNSTREAM_URL"] = url
    code: object = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.stdin, sys.stdout, sys.stderr, previous = saved
        out_text.flush()
        err_text.flush()
        if previous is None:
            os.environ.pop("TXNSTREAM_URL", None)
        else:
            os.environ["TXNSTREAM_URL"] = previous
        if not stdin_file.closed:
            stdin_file.close()
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    ran = Ran(returncode, out.getvalue(), err.getvalue().decode("utf-8", "replace"))
    out_text.detach()  # leaves the BytesIO open; nothing to close
    err_text.detach()
    return ran


def run_subprocess(args: tuple[str, ...], url: str, stdin: bytes | str | None) -> Ran:
    """``python -m txnstream ARGS`` as a child process."""
    data = stdin.encode() if isinstance(stdin, str) else stdin
    proc = subprocess.run(
        [sys.executable, "-m", "txnstream", *args],
        input=data,
        capture_output=True,
        env=cli_env(url),
        cwd=REPO,
        timeout=60,
        check=False,
    )
    return Ran(proc.returncode, proc.stdout, proc.stderr.decode("utf-8", "replace"))


def runner(url: str, run: Callable[[tuple[str, ...], str, bytes | str | None], Ran]) -> Cli:
    def cli(*args: str, stdin: bytes | str | None = None, ok: bool = True) -> Ran:
        ran = run(args, url, stdin)
        if ok:
            assert ran.returncode == 0, (ran.returncode, ran.stdout, ran.stderr)
        assert "Traceback" not in ran.stderr, ran.stderr
        return ran

    return cli
