"""``txnstream serve`` security settings in real processes: binding beyond loopback
needs auth (or ``--insecure``), a bad principals file stops the start, HTTPS with a
token, and SIGHUP reloading the principals file (issue 11)."""

from __future__ import annotations

import json
import signal
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
