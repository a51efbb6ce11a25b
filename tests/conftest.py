"""Shared fixtures: a fresh engine on a fresh data directory for every test, and one live
server per session (started on first use) for the client and CLI tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from support import running_server

from api import Engine, EngineConfig

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


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a server shared by the session; tests isolate themselves by name."""
    with running_server(tmp_path_factory.mktemp("live-data")) as url:
        yield url


@pytest.fixture
def base_url(server_url: str) -> str:
    """The session server's base URL (the HTTP tests' name for it)."""
    return server_url


@pytest.fixture
def name() -> str:
    """A fresh topic/subscription name prefix for one test."""
    return f"t{uuid.uuid4().hex[:12]}"
