"""The installed distribution: one import name, beside a service with its own ``api/``.

A service that installs txnstream usually has packages named ``api`` and ``ledger`` of its
own; before txnstream installed under one name, its top-level ``api`` shadowed theirs
(``ImportError: cannot import name 'Engine' from 'api'``). This builds the wheel the way a
user's ``pip install`` does, installs it into a fresh virtual environment and imports both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAYERS = ("api", "ledger", "txn_buffer", "dispatcher", "snapshots")

pytestmark = pytest.mark.timeout(300)


def _copy_tracked(dest: Path) -> None:
    """The tree git keeps (symlinks kept as links), so the build writes nothing in the repo."""
    listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(
        ["git", "-C", str(REPO), *listing], capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source, target = REPO / os.fsdecode(name), dest / os.fsdecode(name)
        if not source.exists() and not source.is_symlink():
            continue  # deleted in the work tree, not yet committed
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding the built wheel; the test venv's site-packages supplies only the
    dependencies (added after the install, so pip never sees the editable install)."""
    root = tmp_path_factory.mktemp("packaging")
    source, env = root / "source", root / "env"
    _copy_tracked(source)
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         str(source)],
        check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env


def test_nothing_but_txnstream_lands_at_the_top_of_site_packages(fresh_env: Path) -> None:
    purelib = next((fresh_env / "lib").glob("python3*/site-packages"))
    top = {p.name for p in purelib.iterdir()}
    assert "txnstream" in top
    assert not top & set(LAYERS), f"top-level layer packages installed: {top & set(LAYERS)}"
    http = purelib / "txnstream" / "api" / "http" / "ui"
    assert any(http.glob("templates/*.html")), "the console's templates are not in the wheel"


def test_a_service_with_its_own_api_and_ledger_imports_both(
    fresh_env: Path, tmp_path: Path
) -> None:
    service = tmp_path / "service"
    for name in ("api", "ledger"):
        (service / name).mkdir(parents=True)
        (service / name / "__init__.py").write_text(f"OWNER = 'service {name}'\n")
    code = (
        "import api, ledger\n"
        "from txnstream import Engine, EngineConfig, Position\n"
        "import txnstream.api, txnstream.ledger, txnstream.txn_buffer\n"
        "import txnstream.dispatcher, txnstream.snapshots\n"
        "assert txnstream.ledger.Position is Position\n"
        "print(api.OWNER, '|', ledger.OWNER, '|', Engine.__module__, EngineConfig.__name__)\n"
    )
    done = subprocess.run(
        [str(fresh_env / "bin" / "python"), "-c", code],
        cwd=service, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("|") == [
        "service api ",
        " service ledger ",
        " txnstream.api._engine EngineConfig\n",
    ]


def test_the_command_and_python_m_txnstream_run_from_the_install(fresh_env: Path) -> None:
    for command in (
        [str(fresh_env / "bin" / "txnstream"), "--help"],
        [str(fresh_env / "bin" / "python"), "-m", "txnstream", "--help"],
    ):
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "serve" in done.stdout
