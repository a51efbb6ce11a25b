"""Shared fixtures: a fresh engine on a fresh store for every test, and one live server per
session (started on first use) for the client and CLI tests.

**Both stores.** ``data_dir`` is where a test's engine keeps its state: a fresh directory
(SQLite) or a fresh database on one PostgreSQL cluster of the session (a
``postgresql://`` URL; ``Engine.open`` takes either). Every test that takes ``data_dir``
or ``engine`` runs once per store, ids ``[sqlite]`` and ``[postgresql]``; a test that
needs SQLite's files (pokes the ``.db`` file, fills a filesystem, deletes the directory)
says so with ``@pytest.mark.sqlite_only(reason)`` and runs on SQLite alone. A long test
whose suite's other tests cover PostgreSQL by default is marked
``@pytest.mark.postgresql_in_full_run``: its ``[postgresql]`` run is made only in the full
run (``TXNSTREAM_ALL_STORES=1``, ``make test-pg``), which keeps ``make test`` short.
``new_store`` makes more fresh stores of the test's kind (one per property-test example).

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
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
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


STORES = ("sqlite", "postgresql")
"""The stores every engine test runs on (the ``store_kind`` parameter of ``data_dir``)."""
ALL_STORES = os.environ.get("TXNSTREAM_ALL_STORES") == "1"
"""``TXNSTREAM_ALL_STORES=1`` (``make test-pg``): the ``postgresql_in_full_run`` tests run
on PostgreSQL too."""


def pytest_configure(config: pytest.Config) -> None:
    # Tests stop servers and CLI commands with Ctrl-C (SIGINT to the pid or its group). A
    # suite started as a background job of a non-interactive shell (``make test &``) runs
    # with SIGINT and SIGQUIT ignored, and ignored signals are inherited: the children
    # would never see the Ctrl-C (Python keeps an ignored SIGINT ignored). Handled here,
    # the children start with the default disposition, as from a terminal.
    for signum, handler in (
        (signal.SIGINT, signal.default_int_handler),
        (signal.SIGQUIT, signal.SIG_DFL),
    ):
        if signal.getsignal(signum) is signal.SIG_IGN:
            signal.signal(signum, handler)
    config.addinivalue_line(
        "markers",
        "sqlite_only(reason): the test needs SQLite's files; it runs on the SQLite store only",
    )
    config.addinivalue_line(
        "markers",
        "postgresql_in_full_run: a long test; on PostgreSQL only with TXNSTREAM_ALL_STORES=1",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``store_kind``, which ``data_dir`` (and so ``engine``) takes: one run per store.
    (Not ``store``: the ledger tests' fixture of that name is a store object.)"""
    if "store_kind" not in metafunc.fixturenames:
        return
    only = metafunc.definition.get_closest_marker("sqlite_only")
    if only is not None and not (only.args or only.kwargs.get("reason")):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: sqlite_only needs a reason")
    long = metafunc.definition.get_closest_marker("postgresql_in_full_run") is not None
    sqlite_alone = only is not None or (long and not ALL_STORES)
    metafunc.parametrize("store_kind", ["sqlite"] if sqlite_alone else list(STORES))


@pytest.fixture(scope="session")
def store_cluster() -> Iterator[Cluster]:
    """The PostgreSQL cluster of the session's ``[postgresql]`` runs, with their database."""
    with start_test_cluster() as cluster:
        cluster.create_database(STORES_DATABASE)
        yield cluster


STORES_DATABASE = "stores"
"""The database of the ``[postgresql]`` runs: one schema each (see ``data_dir``)."""


@pytest.fixture
def data_dir(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Path | str]:
    """A fresh store: a directory not made yet (SQLite), or a ``postgresql://`` URL.

    On PostgreSQL each test connects as a login role of its own whose schema of the same
    name (first on the default search path, ``"$user", public``) holds the store: as fresh
    as a database of its own, at a tenth of the cost of ``CREATE DATABASE``. Dropped after
    the test, connections of an engine a test left open (a crash) included.
    """
    if store_kind == "sqlite":
        yield tmp_path / "data"
        return
    cluster: Cluster = request.getfixturevalue("store_cluster")
    with schema_store(cluster) as url:
        yield url


@pytest.fixture
def new_store(
    store_kind: str, request: pytest.FixtureRequest
) -> Callable[[], AbstractContextManager[Path | str]]:
    """``with new_store() as where:``: one more fresh store of the test's kind, removed
    after the block (a property test's examples each get their own)."""

    @contextmanager
    def make() -> Iterator[Path | str]:
        if store_kind == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                yield Path(tmp) / "data"
        else:
            with schema_store(request.getfixturevalue("store_cluster")) as url:
                yield url

    return make


@contextmanager
def schema_store(cluster: Cluster) -> Iterator[str]:
    """A fresh login role with a schema of its own on ``cluster``'s stores database; yields
    its URL and drops both (and ends the role's connections) after."""
    role = f"t{uuid.uuid4().hex[:12]}"
    with cluster.connect(dbname=STORES_DATABASE) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"CREATE SCHEMA {role} AUTHORIZATION {role}")
    try:
        yield cluster.url(role, STORES_DATABASE)
    finally:
        with cluster.connect(dbname=STORES_DATABASE) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            conn.execute(f"DROP SCHEMA {role} CASCADE")
            conn.execute(f"DROP ROLE {role}")


@pytest.fixture
async def engine(data_dir: Path) -> AsyncIterator[Engine]:
    async with Engine.open(data_dir, EngineConfig()) as opened:
        yield opened


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a server shared by the session; tests isolate themselves by name."""
    with running_server(tmp_path_factory.mktemp("live-data")) as url:
        yield url


@pytest.fixture(scope="session")
def pg_server_url(store_cluster: Cluster) -> Iterator[str]:
    """Base URL of a server shared by the session on a PostgreSQL store."""
    with schema_store(store_cluster) as store, running_server(store) as url:  # type: ignore[arg-type]
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
