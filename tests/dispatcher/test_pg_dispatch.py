"""Delivery on a PostgreSQL store: every subscription type, acks and seeks, transactional
acks and the subscription lifecycle, the same suites with ``data_dir`` (which the
``engine`` fixture opens) a fresh database of a real cluster."""

from __future__ import annotations

import pytest
from test_dispatch_acks_and_seek import *  # noqa: F403 - the same tests, on PostgreSQL
from test_dispatch_subscription_types import *  # noqa: F403
from test_dispatch_subscriptions import *  # noqa: F403
from test_dispatch_transactional_acks import *  # noqa: F403

from txnstream.api import Engine

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def data_dir(pg_url: str) -> str:  # (the tests' annotation says Path: Engine.open takes both)
    return pg_url


async def test_the_suites_here_run_on_postgresql(engine: Engine) -> None:
    assert type(engine._rt.store).__name__ == "PgStore"
