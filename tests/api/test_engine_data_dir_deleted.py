"""The data directory deleted (or replaced) while the engine runs.

SQLite keeps writing into the unlinked file, so without a check every write would be
acknowledged and then lost at the next restart. The store compares the database file at
its path with the one it opened once per flush, before acknowledging: from the flush
that notices on, writes are refused (503 ``unavailable``), health is ``failed`` naming
the directory, and the engine does not "recover" into a fresh, empty directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest
from support import running_server

from txnstream.api import DataDirectoryLostError, Engine, EngineConfig, EngineFailedError


@pytest.mark.parametrize("reserve", [0, 1024 * 1024])
@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_writes_after_the_directory_is_deleted_are_refused_not_acknowledged(
    tmp_path: Path, reserve: int, writer: str
) -> None:
    data = tmp_path / "data"
    config = EngineConfig(min_free_bytes=reserve, writer=writer)  # type: ignore[arg-type]
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        await engine.send("t", b"before")
        shutil.rmtree(data)
        with pytest.raises(DataDirectoryLostError, match="deleted or moved"):
            await engine.send("t", b"lost")
        health = engine.health()
        assert health.status == "failed", health
        assert "data directory was deleted" in (health.reason or "")
        assert str(data) in (health.reason or "")
        with pytest.raises(EngineFailedError):  # and stays so: no recovery into nothing
            async with engine.transaction() as txn:
                await txn.send("t", b"lost too")
        assert engine.health().status == "failed"
    assert not data.exists()  # nothing was made again where it was


async def test_a_directory_replaced_under_the_engine_is_noticed(tmp_path: Path) -> None:
    """Moved away and another put in its place: the file at the path is not the one
    opened (its inode differs), so nothing is acknowledged into the moved one."""
    data = tmp_path / "data"
    config = EngineConfig(min_free_bytes=0)
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        await engine.send("t", b"before")
        data.rename(tmp_path / "moved")
        shutil.copytree(tmp_path / "moved", data)
        with pytest.raises(DataDirectoryLostError, match="replaced"):
            await engine.send("t", b"lost")
        assert engine.health().status == "failed"


def test_over_http_a_deleted_directory_is_503_and_health_failed(tmp_path: Path) -> None:
    """The same through a real server (``serve``'s lifespan, default reserve): the write
    after the deletion is 503 ``unavailable`` (not a 500, not a 200 that a restart
    loses), and ``/v1/health`` is 503 ``failed`` with the reason."""
    data = tmp_path / "data"
    with running_server(data) as url, httpx.Client(base_url=url, timeout=10) as http:
        assert http.put("/v1/topics/t").status_code in (200, 201)
        sent = http.post("/v1/topics/t/messages", json={"messages": [{"value": 1}]})
        assert sent.status_code == 200, sent.text
        shutil.rmtree(data)
        refused = http.post("/v1/topics/t/messages", json={"messages": [{"value": 2}]})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "unavailable"
        health = http.get("/v1/health")
        assert health.status_code == 503
        assert health.json()["status"] == "failed"
        assert "data directory was deleted" in health.json()["reason"]
