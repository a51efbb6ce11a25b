"""Shared fixtures: a fresh engine on a fresh data directory for every test.

``live_server`` is one real uvicorn server per test session, run by
``api._cli._make_server`` (the same lifespan as ``txnstream serve``) in a background
thread with its own event loop and a fresh data directory; the HTTP and the CLI tests
share it and isolate themselves with unique names (``name``).

``s3_server`` is one real SeaweedFS S3 server per test session (started on first use,
``tests/objectstore.py``), with the ``AWS_*`` environment pointing at it for the
session; ``offload_url`` runs a test once against a local-directory store and once
against a fresh prefix of that S3 server.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings
from objectstore import SeaweedFS, start_seaweedfs
from support import free_port, wait_for

from api import Engine, EngineConfig
from api._cli import _make_server

# Deterministic property tests in CI and locally: the same examples every run.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", derandomize=True, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def engine(data_dir: Path) -> AsyncIterator[Engine]:
    async with Engine.open(data_dir, EngineConfig()) as opened:
        yield opened


@dataclass
class LiveServer:
    """A server running in this process; ``url`` is its base URL."""

    url: str
    data: Path


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data = tmp_path_factory.mktemp("live-data")
    port = free_port()
    server = _make_server(data, "127.0.0.1", port, log_level="warning")
    thread = threading.Thread(target=server.run, name="live-server", daemon=True)
    thread.start()
    wait_for(lambda: server.started or not thread.is_alive(), 30, "the live server to start")
    assert server.started, "the live server failed to start"
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", data)
    finally:
        server.should_exit = True
        thread.join(timeout=40)
        assert not thread.is_alive(), "the live server did not stop"


@pytest.fixture
def base_url(live_server: LiveServer) -> str:
    return live_server.url


@pytest.fixture
def name() -> str:
    """A fresh topic/subscription name prefix for one test."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    server = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    saved = {name: os.environ.get(name) for name in server.environ()}
    os.environ.update(server.environ())  # the engine, pyarrow and child processes use it
    try:
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.stop()


@pytest.fixture(params=["local", "s3"])
def offload_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty offload store: a local directory, or a fresh prefix on ``s3_server``."""
    if request.param == "local":
        return (tmp_path / "objects").as_uri()
    server: SeaweedFS = request.getfixturevalue("s3_server")
    return f"s3://{server.bucket}/{uuid.uuid4().hex[:12]}"
