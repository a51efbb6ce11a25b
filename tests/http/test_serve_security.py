"""``txnstream serve`` security settings in real processes: binding beyond loopback
needs auth (or ``--insecure``), a bad principals file stops the start, HTTPS with a
token, and SIGHUP reloading the principals file (issue 11)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import (
    AUTH_TOKENS,
    ServeSubprocess,
    bearer,
    run_serve,
    self_signed_cert,
    wait_for,
    write_auth_file,
)

# -- binding, TLS, reload -------------------------------------------------------------------


def _serve(tmp_path: Path, *args: str) -> Any:
    return run_serve("--data", str(tmp_path / "d"), *args)


def test_a_non_loopback_bind_needs_auth_or_insecure(tmp_path: Path) -> None:
    done = _serve(tmp_path, "--host", "0.0.0.0")
    assert done.returncode == 2
    assert "refusing to listen on 0.0.0.0 without authentication" in done.stderr
    assert "--auth" in done.stderr
    assert "--insecure" in done.stderr
    assert not (tmp_path / "d").exists()  # refused before anything was opened


def test_a_bad_auth_file_is_refused_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"principals": [{"name": "x", "token": "sha256:abc"}]}))
    done = _serve(tmp_path, "--auth", str(bad))
    assert done.returncode == 2
    assert "64 hex digits" in done.stderr


def test_https_with_a_token(tmp_path: Path) -> None:
    import ssl

    cert, key = self_signed_cert(tmp_path)
    auth_file = write_auth_file(tmp_path / "principals.json")
    context = ssl.create_default_context(cafile=str(cert))
    args = ("--auth", str(auth_file), "--tls-cert", str(cert), "--tls-key", str(key))
    with ServeSubprocess(
        tmp_path / "data", tmp_path / "log", *args, scheme="https", verify=context
    ) as server:
        assert server.url.startswith("https://")
        with httpx.Client(base_url=server.url, verify=context, timeout=30) as client:
            assert client.get("/v1/topics").status_code == 401
            assert client.put("/v1/topics/a-tls", headers=bearer("alice")).status_code == 201
            own = {"Origin": server.url, **bearer("alice")}
            assert client.get("/v1/topics", headers=own).json()["topics"] == ["a-tls"]
            plain = {"Origin": server.url.replace("https", "http"), **bearer("alice")}
            assert client.get("/v1/topics", headers=plain).status_code == 403
        with pytest.raises(httpx.TransportError):
            httpx.get(server.url.replace("https", "http") + "/v1/health", timeout=5)


def test_sighup_reloads_the_auth_file(tmp_path: Path) -> None:
    auth_file = write_auth_file(tmp_path / "principals.json")
    with ServeSubprocess(tmp_path / "data", tmp_path / "log", "--auth", str(auth_file)) as server:

        def status(token: str) -> int:
            headers = {"Authorization": f"Bearer {token}"}
            return httpx.get(f"{server.url}/v1/topics", headers=headers, timeout=10).status_code

        assert status(AUTH_TOKENS["alice"]) == 200
        write_auth_file(auth_file, {"alice": "alice-rotated-token"})
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: status("alice-rotated-token") == 200, 15, "the reload")
        assert status(AUTH_TOKENS["alice"]) == 401

        auth_file.write_text("{not json")  # a broken file keeps the principals in effect
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "auth file not reloaded" in server.log(), 15, "the failed reload")
        assert status("alice-rotated-token") == 200
        assert server.proc.poll() is None


def test_the_auth_file_env_var_turns_auth_on(tmp_path: Path, monkeypatch: Any) -> None:
    """``TXNSTREAM_AUTH_FILE`` is ``--auth``: a bad file stops the start, a good one
    wants tokens (issue 30, item 5: it was silently ignored)."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"principals": [{"name": "x", "token": "sha256:abc"}]}))
    done = run_serve("--data", str(tmp_path / "d"), env={"TXNSTREAM_AUTH_FILE": str(bad)})
    assert done.returncode == 2
    assert "64 hex digits" in done.stderr
    # beyond loopback it counts as authentication: no --insecure needed
    refused = run_serve("--data", str(tmp_path / "d"), "--host", "0.0.0.0")
    assert refused.returncode == 2

    monkeypatch.setenv("TXNSTREAM_AUTH_FILE", str(write_auth_file(tmp_path / "p.json")))
    with ServeSubprocess(tmp_path / "data", tmp_path / "log") as server:
        assert httpx.get(f"{server.url}/v1/topics", timeout=10).status_code == 401
        answer = httpx.get(f"{server.url}/v1/topics", headers=bearer("alice"), timeout=10)
        assert answer.status_code == 200
        assert "authentication on: 3 principal(s)" in server.log()


@pytest.mark.timeout(120)
def test_world_readable_secrets_are_warned_about(tmp_path: Path) -> None:
    """An auth file or TLS key any local user can read: a warning at start (issue 30,
    item 9); private ones: none."""
    import ssl

    cert, key = self_signed_cert(tmp_path)
    auth_file = write_auth_file(tmp_path / "principals.json")
    context = ssl.create_default_context(cafile=str(cert))
    args = ("--auth", str(auth_file), "--tls-cert", str(cert), "--tls-key", str(key))
    for mode, warned in ((0o644, True), (0o600, False)):
        auth_file.chmod(mode)
        key.chmod(mode)
        log = tmp_path / f"log-{mode:o}"
        with ServeSubprocess(tmp_path / "data", log, *args, scheme="https", verify=context):
            pass
        text = log.read_text()
        for secret in (auth_file, key):
            assert (f"{secret} is readable by every local user" in text) is warned, (mode, text)


def _as_another_user(command: list[str], writable: Path) -> subprocess.CompletedProcess[str]:
    """Run ``serve`` as a user who cannot write where root made things (nobody), or as
    ourselves when not root (the test then took the write bits away)."""
    import os
    import shutil
    import sys

    repo = Path(__file__).resolve().parents[2]
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv: no user to lack the write permission")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        os.chown(writable, 65534, 65534)
    return subprocess.run(
        [*prefix, sys.executable, "-m", "txnstream", "serve", *command],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        check=False,
    )


@pytest.mark.timeout(120)
def test_a_read_only_data_directory_is_one_line_at_start() -> None:
    """A data directory (or database) the server may not write: one ``error:`` line and a
    non-zero exit, no traceback (issue 30, item 9)."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="txnstream-ro-"))  # not under pytest's 0700 tmp
    try:
        root.chmod(0o755)
        read_only, own = root / "ro", root / "own"
        read_only.mkdir(mode=0o555)
        read_only.chmod(0o555)
        own.mkdir()
        (own / "txnstream.db").write_bytes(b"")
        (own / "txnstream.db").chmod(0o444)
        for data in (read_only, own):
            done = _as_another_user(["--data", str(data), "--port", "0"], own)
            assert done.returncode == 1, done
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1, done.stderr
            assert lines[0].startswith(f"error: --data {data}: cannot write there"), lines
            assert "Traceback" not in done.stderr + done.stdout
    finally:
        shutil.rmtree(root, ignore_errors=True)
