"""Shared fixtures: a fresh engine on a fresh data directory for every test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import settings

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
