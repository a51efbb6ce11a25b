"""The README's command-line examples run as printed, right after its curl walkthrough.

Both ``sh`` blocks are taken from README.md itself ("The same over HTTP", then "Command
line") and run by bash with ``set -euo pipefail`` against a fresh server: only the
server's address is changed (``$B``, ``TXNSTREAM_URL`` and the address the CLI block
names). The CLI block ends with a ``consume ... --follow``, which is stopped with Ctrl-C
(SIGINT) once it has printed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

from cli_support import REPO
from support import running_server, wait_for

README = REPO / "README.md"
MARKER = "--- the --follow line ---"


def _block(readme: str, heading: str) -> str:
    """The first ```sh block after the ``## heading`` line."""
    start = readme.find(f"\n## {heading}\n")
    assert start >= 0, f"README.md has no '## {heading}' section"
    found = re.search(r"```sh\n(.*?)```", readme[start:], re.S)
    assert found, f"README.md's '## {heading}' section has no sh block"
    return found.group(1)


def _pump(stream: IO[str], lines: list[str]) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))


def test_readme_cli_examples_run_as_printed(tmp_path: Path) -> None:
    readme = README.read_text(encoding="utf-8")
    walkthrough = _block(readme, "The same over HTTP")
    commands = _block(readme, "Command line").replace("http://127.0.0.1:8080", "$TXNSTREAM_URL")
    commands = commands.rstrip("\n").split("\n")
    assert "--follow" in commands[-1], "the CLI block should end with its --follow line"
    with running_server(tmp_path / "data") as url:
        script = "\n".join(
            [
                "set -euo pipefail",
                walkthrough.replace("http://127.0.0.1:8080", url),
                *commands[:-1],
                f"echo '{MARKER}'",
                commands[-1],
            ]
        )
        env = {
            **os.environ,
            "TXNSTREAM_URL": url,
            # The README puts .venv/bin first; this venv's bin is the fallback.
            "PATH": f"{os.environ.get('PATH', '')}:{Path(sys.executable).parent}",
        }
        out: list[str] = []
        err: list[str] = []
        with subprocess.Popen(
            ["bash", "-c", script],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        ) as shell:
            assert shell.stdout is not None
            assert shell.stderr is not None
            pumps = [
                threading.Thread(target=_pump, args=(stream, lines), daemon=True)
                for stream, lines in ((shell.stdout, out), (shell.stderr, err))
            ]
            for pump in pumps:
                pump.start()
            try:

                def followed() -> bool:
                    if shell.poll() is not None:
                        raise AssertionError(f"exited {shell.returncode}: {out} {err}")
                    return MARKER in out and any(
                        line.startswith("0:2\tk2\t") for line in out[out.index(MARKER) :]
                    )

                wait_for(followed, 90, "the README's --follow line to print")
            finally:
                if shell.poll() is None:
                    os.killpg(shell.pid, signal.SIGINT)  # Ctrl-C, as the comment says
                try:
                    code = shell.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(shell.pid, signal.SIGKILL)  # (else leaving `with` waits forever)
                    raise
                finally:
                    for pump in pumps:
                        pump.join(timeout=10)
    assert code == 130, (code, out, err)
    assert not any("Traceback" in line or line.startswith("error:") for line in err), err
    assert any(line.startswith("waiting: open transaction") for line in err), err
