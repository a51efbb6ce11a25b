"""What the README's examples leave behind is git-ignored, ``make serve`` takes PORT and
DATA, and the quickstart does not use ``make serve``'s directory (issue 31, items 9, 12)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def _created_by_the_examples() -> set[str]:
    """Paths in the repository the README's examples write: data directories (Engine.open,
    --data, Spark's path option), files written with ``>`` and the saved example."""
    found = set(re.findall(r'Engine\.open\("\./([^"/]+)"', README))
    found |= set(re.findall(r"--data \./([\w.-]+)", README))
    found |= set(re.findall(r'option\("path", "\./([^"/]+)"\)', README))
    found |= set(re.findall(r"> ([\w.-]+\.json)\b", README))
    found |= set(re.findall(r"Save this as `([\w.-]+)`", README))
    return found


def test_what_the_readme_creates_is_ignored() -> None:
    created = _created_by_the_examples()
    assert {"data", "quickstart-data", "spark-data", "principals.json", "example.py"} <= created
    for name in sorted(created):
        path = name if name.endswith((".json", ".py")) else f"{name}/txnstream.db"  # a dir
        ignored = subprocess.run(
            ["git", "check-ignore", "-q", "--no-index", path], cwd=REPO, timeout=30, check=False
        )
        assert ignored.returncode == 0, f"{name} is not git-ignored"


def test_the_quickstart_does_not_use_make_serves_directory() -> None:
    quickstart = README.split("## Quickstart (embedded)", 1)[1].split("\n## ", 1)[0]
    (directory,) = re.findall(r'Engine\.open\("([^"]+)"', quickstart)
    assert Path(directory) != Path("./data")


def test_make_serve_takes_port_data_and_host() -> None:
    done = subprocess.run(
        ["make", "-n", "serve", "PORT=8081", "DATA=./other", "HOST=::1"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "txnstream serve --data ./other --host ::1 --port 8081" in done.stdout
    default = subprocess.run(
        ["make", "-n", "serve"], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert "txnstream serve --data ./data --host 127.0.0.1 --port 8080" in default.stdout
