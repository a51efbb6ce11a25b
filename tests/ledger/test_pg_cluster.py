"""The PostgreSQL test clusters themselves: start, connect, kill and restart, freeze,
replicate and promote (the faults the failover tests are made of)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from pg_support import Cluster

pytestmark = pytest.mark.timeout(180)


def test_a_cluster_accepts_a_role_on_its_own_database(pg_cluster: Cluster, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT current_user, current_database(), inet_server_addr()::text,"
            " (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        ).fetchone()
    assert row is not None
    user, dbname, addr, superuser = row
    assert (user, addr, superuser) == ("txnstream", "127.0.0.1/32", False)
    assert pg_url.endswith(f"/{dbname}")
    # the server runs as the postgres user, listens on loopback only, socket in its directory
    assert pg_cluster.execute("SHOW listen_addresses") == [("127.0.0.1",)]
    assert pg_cluster.execute("SHOW unix_socket_directories") == [(str(pg_cluster.directory),)]


def test_a_killed_cluster_restarts_on_its_data_with_every_commit(
    pg_cluster: Cluster, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (n int PRIMARY KEY)")
        conn.execute("INSERT INTO t SELECT generate_series(1, 100)")
    old_pid = pg_cluster.pid
    pg_cluster.kill()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_url, connect_timeout=2)
    pg_cluster.start()
    assert pg_cluster.pid != old_pid
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (100,)
    pg_cluster.restart()  # a fast shutdown and start
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (100,)


def test_a_paused_cluster_answers_only_after_it_resumes(pg_cluster: Cluster, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        pg_cluster.pause()
        answered = threading.Event()

        def query() -> None:
            conn.execute("SELECT 1")
            answered.set()

        thread = threading.Thread(target=query)
        try:
            thread.start()
            # frozen: no answer within a quarter second (a running server answers in ~1 ms)
            assert not answered.wait(0.25)
        finally:
            pg_cluster.resume()
        assert answered.wait(10)
        thread.join(10)


def test_a_promoted_replica_has_the_primary_s_committed_rows(pg_own_cluster: Cluster) -> None:
    pg_cluster = pg_own_cluster
    pg_url = pg_cluster.create_database("db", owner="txnstream")
    replica = pg_cluster.add_replica("replica1", synchronous=True)
    assert replica.in_recovery()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (n int PRIMARY KEY)")
        for n in range(50):  # each commit returns once the synchronous replica has it
            conn.execute("INSERT INTO t VALUES (%s)", (n,))
    pg_cluster.kill()
    started = time.monotonic()
    replica.promote()
    assert time.monotonic() - started < 30
    assert not replica.in_recovery()
    dbname = pg_url.rsplit("/", 1)[1]
    with psycopg.connect(replica.url("txnstream", dbname), autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (50,)
        conn.execute("INSERT INTO t VALUES (50)")  # it takes writes now
    # a multi-host URL finds the writable one of the two
    both = (
        f"postgresql://txnstream@127.0.0.1:{pg_cluster.port},127.0.0.1:{replica.port}"
        f"/{dbname}?target_session_attrs=read-write&connect_timeout=2"
    )
    pg_cluster.start()  # the old primary comes back: still a primary, but on old data
    with psycopg.connect(both, autocommit=True) as conn:
        assert conn.info.port in (pg_cluster.port, replica.port)
    pg_cluster.stop()
    with psycopg.connect(both, autocommit=True) as conn:
        assert conn.info.port == replica.port
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (51,)


@pytest.mark.parametrize("ci", ["", "true"])
def test_without_postgresql_the_fixture_skips_saying_why_but_fails_in_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str
) -> None:
    import pg_support

    monkeypatch.setattr(pg_support.shutil, "which", lambda name: None)
    monkeypatch.setattr(pg_support, "DEBIAN_ROOT", tmp_path)
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="apt-get install postgresql"):
        pg_support.start_test_cluster()
