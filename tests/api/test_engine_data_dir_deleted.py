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

import pytest

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
