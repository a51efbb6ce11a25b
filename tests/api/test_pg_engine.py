"""The engine on a PostgreSQL store: the quickstart, transaction (restarts included),
idempotent producer and stable position suites again, with ``data_dir`` (which the
``engine`` fixture opens) a fresh database of a real cluster; and what only a shared
database has: one engine per store, the lease released on close."""

from __future__ import annotations

import pytest
from test_engine_idempotent_producer import *  # noqa: F403 - the same tests, on PostgreSQL
from test_engine_quickstart import *  # noqa: F403
from test_engine_stable_position import *  # noqa: F403
from test_engine_transactions import *  # noqa: F403

from txnstream.api import DataDirLockedError, Engine, InvalidArgumentError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def data_dir(pg_url: str) -> str:  # (the tests' annotation says Path: Engine.open takes both)
    return pg_url


async def test_a_second_engine_on_the_store_is_refused_while_the_first_runs(
    data_dir: str,
) -> None:
    async with Engine.open(data_dir) as first:
        await first.create_topic("t")
        await first.send("t", "before")
        with pytest.raises(DataDirLockedError, match="is served by"):
            await Engine.open(data_dir)
    async with Engine.open(data_dir) as second:  # closing released the lease
        sub = await second.subscribe("t", "s")
        assert [m.value for m in await sub.receive(max=10, timeout=0)] == ["before"]


@pytest.mark.parametrize("url", ["mysql://h/db", "s3://bucket/x", "postgresql://h:port/db"])
async def test_a_store_url_the_engine_does_not_know_is_refused(url: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"store URL scheme|malformed PostgreSQL URL"):
        await Engine.open(url)


async def test_the_suites_here_run_on_postgresql(engine: Engine) -> None:
    assert engine.store_url is not None
    assert type(engine.store).__name__ == "PgStore"
    assert not engine.path.is_absolute()  # no data directory was made
