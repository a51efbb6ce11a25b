"""Shared fixtures: a fresh engine on a fresh data directory for every test, and one live
server per session (started on first use) for the client and CLI tests.

``s3_server`` is one real SeaweedFS S3 server per test session (started on first use,
``tests/objectstore.py``), with the ``AWS_*`` environment pointing at it for the
session; ``offload_url`` runs a test once against a local-directory store and once
against a fresh prefix of that S3 server.

``pg_cluster`` is one real PostgreSQL cluster per test module (``tests/pg_support.py``:
initdb into a temporary directory, a free loopback port, run as the ``postgres`` user);
``pg_url`` is the URL of a fresh database on it, owned by a plain (non-superuser) role;
``pg_own_cluster`` is a cluster of the test's own (for promotions).
Without PostgreSQL those tests skip, saying why; in CI (``CI`` set) they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from objectstore import SeaweedFS, start_seaweedfs
from pg_support import Cluster, start_test_cluster
from support import running_server

from txnstream.api import Engine, EngineConfig

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


@pytest.fixture(scope="module")
def pg_cluster() -> Iterator[Cluster]:
    """A running PostgreSQL cluster for the module (stopped by pid and removed after)."""
    with start_test_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_own_cluster() -> Iterator[Cluster]:
    """A cluster of the test's own, for tests that kill, replace or promote its primary."""
    with start_test_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """The URL of a fresh, empty database on the module's cluster, as role ``txnstream``."""
    return pg_cluster.create_database(f"t{uuid.uuid4().hex[:12]}", owner="txnstream")
