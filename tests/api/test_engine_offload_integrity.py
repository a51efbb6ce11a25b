"""Offloaded data is verified, and each data directory owns what it offloads (issue #30,
items 1, 2 and 13), on a local-directory store and a real S3 server (SeaweedFS).

Damage: bits flipped in one column of an object (the entry_id column, a value column, the
kind column), a truncated object, a damaged aborted-index sidecar. Each read of the
damaged ledger is :class:`CorruptObjectError` (HTTP 503 ``unavailable``) naming the ledger
and the object, health is ``degraded``, ``txnstream_offload_corrupt_objects_total``
counts it, and local data is served on. Ownership: two data directories on one offload
URL (a second directory, a copy of the first) never delete or overwrite each other's
objects; the second is refused until it takes the prefix over on purpose.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from txnstream.api import (
    CorruptObjectError,
    Engine,
    EngineConfig,
    OffloadPrefixClaimedError,
    Position,
)
from txnstream.api.http import create_app
from txnstream.ledger import OffloadStore
from txnstream.ledger._offload import _locate

pytestmark = pytest.mark.timeout(120)

LEDGER = 64


def config(url: str, **extra: Any) -> EngineConfig:
    return EngineConfig(
        offload_url=url, ledger_max_entries=LEDGER, durability="normal", min_free_bytes=0, **extra
    )


def read_bytes(url: str) -> bytes:
    fs, path = _locate(url)
    with fs.open_input_stream(path) as stream:
        data: bytes = stream.readall()
    return data


def write_bytes(url: str, data: bytes) -> None:
    fs, path = _locate(url)
    with fs.open_output_stream(path) as out:
        out.write(data)


def flip_in_column(column: str) -> Callable[[bytes], bytes]:
    """Flip one bit in the last page's data of ``column`` in row group 0."""

    def damage(data: bytes) -> bytes:
        meta = pq.read_metadata(pa.BufferReader(data))
        group = meta.row_group(0)
        chunk = next(
            group.column(i)
            for i in range(group.num_columns)
            if group.column(i).path_in_schema == column
        )
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        at = start + chunk.total_compressed_size - 2  # compressed page data, not a header
        damaged = bytearray(data)
        damaged[at] ^= 0x10
        return bytes(damaged)

    return damage


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


async def offloaded_history(engine: Engine, *, value_bytes: int) -> list[dict[str, Any]]:
    """Two offloaded ledgers (the first with an aborted transaction) and a local one."""
    await engine.create_topic("t")
    aborted = await engine.begin()
    await aborted.send("t", "aborted")
    await aborted.abort()
    payload = "v" * value_bytes
    await engine.send_many("t", [f"{i}:{payload}" for i in range(2 * LEDGER + 5)])
    assert await engine.offload("t") == [0, 1]
    return await engine.list_ledgers("t")


async def local_history(tmp_path: Path) -> tuple[str, Path, list[dict[str, Any]]]:
    """:func:`offloaded_history` in a closed data directory on a local store: its offload
    URL, the directory and its ledger listing."""
    url = (tmp_path / "objects").as_uri()
    data = tmp_path / "data"
    async with Engine.open(data, config(url)) as engine:
        ledgers = await offloaded_history(engine, value_bytes=10)
    return url, data, ledgers


async def values(engine: Engine, start: Position, count: int) -> list[str]:
    """The committed plain values' numbers from ``start`` (``count`` entries read)."""
    result = await engine.fetch("t", start, max=count)
    return [e.value.split(":")[0] for e in result.entries if e.kind == "data" and e.txn is None]


# -- item 2: verified reads ------------------------------------------------------------


@pytest.mark.parametrize(
    ("what", "damage"),
    [
        ("entry_id", flip_in_column("entry_id")),
        ("value", flip_in_column("value")),
        ("kind", flip_in_column("kind")),
        ("truncated", truncate),
    ],
)
@pytest.mark.parametrize("value_bytes", [10, 70_000], ids=["whole-object", "row-groups"])
async def test_a_damaged_object_is_unavailable_never_wrong_data(
    tmp_path: Path, offload_url: str, what: str, damage: Callable[[bytes], bytes], value_bytes: int
) -> None:
    """Small ledgers are read whole (size and SHA-256 checked); ledgers of several row
    groups are read by range (page checksums and entry ids checked)."""
    data = tmp_path / "data"
    async with Engine.open(data, config(offload_url)) as engine:
        ledgers = await offloaded_history(engine, value_bytes=value_bytes)
        assert await values(engine, Position(0, 0), 8) == [str(i) for i in range(6)]
    url = ledgers[0]["url"]
    if value_bytes > 1000:
        assert pq.read_metadata(pa.BufferReader(read_bytes(url))).num_row_groups > 1
    write_bytes(url, damage(read_bytes(url)))
    async with Engine.open(data, config(offload_url)) as engine:
        # (opened: recovery skips what it cannot read of a damaged ledger, if anything)
        with pytest.raises(CorruptObjectError) as raised:
            await values(engine, Position(0, 0), 8)
        error = raised.value
        assert error.ledger_id == 0
        assert error.url == url
        assert "ledger 0" in str(error)
        assert url in str(error)
        sub = await engine.subscribe("t", "s")
        with pytest.raises(CorruptObjectError):  # again: never the damaged rows
            await sub.receive(max=8, timeout=0.5)
        health = engine.health()
        assert health.status == "degraded"
        assert health.reason is not None
        assert url in health.reason
        text, _ = engine.metrics.render([], open_txns=0, database_bytes=0, wal_bytes=0)
        assert re.search(r"^txnstream_offload_corrupt_objects_total 1\.0$", text.decode(), re.M)
        # the other offloaded ledger and the local one are served on
        assert await values(engine, Position(1, 0), 3) == ["62", "63", "64"]
        assert await values(engine, Position(2, 0), 2) == ["126", "127"]
        await engine.send("t", "more")  # writes go on


def test_a_flipped_entry_id_is_caught_without_page_checksums_or_a_record(tmp_path: Path) -> None:
    """An object written before page checksums (and read by range, with nothing recorded
    to check the whole object against): every row must carry its own entry id."""
    from txnstream.ledger import encode_payload, encode_value
    from txnstream.ledger._parquet import ledger_table

    rows = [(i, 0, None, encode_payload(None, encode_value(f"m{i}"), {}, 1)) for i in range(64)]
    table = ledger_table(5, rows, set())
    ids = table.column("entry_id").to_pylist()
    ids[40] = 56  # 5:40 would be served as 5:56
    table = table.set_column(2, "entry_id", pa.array(ids, pa.int64()))
    path = tmp_path / "t" / "00000000000000000005.parquet"
    path.parent.mkdir()
    pq.write_table(table, path, row_group_size=16, compression="zstd")  # no page checksums
    store = OffloadStore()
    url = path.as_uri()
    assert [e.value for e in store.read_entries(5, url, 0, 3)] == ["m0", "m1", "m2", "m3"]
    with pytest.raises(CorruptObjectError, match="entry 40 carries entry id 56"):
        store.read_entries(5, url, 38, 42)
    with pytest.raises(CorruptObjectError):
        store.read_rows(5, url, 32, 47)
    assert url in store.corrupt


async def test_a_damaged_aborted_index_is_unavailable(tmp_path: Path, offload_url: str) -> None:
    data = tmp_path / "data"
    async with Engine.open(data, config(offload_url)) as engine:
        ledgers = await offloaded_history(engine, value_bytes=10)
    assert ledgers[0]["has_aborts"]
    sidecar = ledgers[0]["url"].removesuffix(".parquet") + ".aborted.parquet"
    write_bytes(sidecar, flip_in_column("txn")(read_bytes(sidecar)))
    async with Engine.open(data, config(offload_url)) as engine:
        with pytest.raises(CorruptObjectError) as raised:
            await engine.fetch("t", Position(0, 0), max=8)
        assert raised.value.url == sidecar
        assert "aborted index" in str(raised.value)
        assert engine.health().status == "degraded"


async def test_damage_over_http_is_503_unavailable_and_health_degraded(
    tmp_path: Path,
) -> None:
    url, data, ledgers = await local_history(tmp_path)
    target = ledgers[1]["url"]
    write_bytes(target, flip_in_column("entry_id")(read_bytes(target)))
    async with Engine.open(data, config(url)) as engine:
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://txnstream") as http:
            answer = await http.get("/v1/topics/t/fetch", params={"from": "1:0", "max": 5})
            assert answer.status_code == 503
            error = answer.json()["error"]
            assert error["code"] == "unavailable"
            assert "ledger 1" in error["message"]
            assert target in error["message"]
            await http.put("/v1/topics/t/subscriptions/s")
            answer = await http.get("/v1/topics/t/subscriptions/s/messages", params={"max": 500})
            assert answer.status_code == 503
            health = await http.get("/v1/health")
            assert health.status_code == 503
            assert health.json()["status"] == "degraded"
            assert target in health.json()["reason"]
            metrics = (await http.get("/metrics")).text
            assert re.search(r"^txnstream_offload_corrupt_objects_total 1\.0$", metrics, re.M)
            answer = await http.get("/v1/topics/t/fetch", params={"from": "2:0", "max": 5})
            assert answer.status_code == 200  # local data is served on


# -- item 13 ---------------------------------------------------------------------------


async def test_a_fresh_servers_reads_of_offloaded_ledgers_count_as_data_fetches(
    tmp_path: Path,
) -> None:
    url, data, _ = await local_history(tmp_path)

    def fetches(engine: Engine) -> float:
        text, _ = engine.metrics.render([], open_txns=0, database_bytes=0, wal_bytes=0)
        match = re.search(r"^txnstream_offload_data_fetches_total (\S+)$", text.decode(), re.M)
        assert match
        return float(match.group(1))

    async with Engine.open(data, config(url)) as engine:  # recovers by a full replay
        at_start = fetches(engine)
        assert len(await values(engine, Position(0, 0), 8)) == 6
        assert fetches(engine) > at_start
        read_once = fetches(engine)
        assert len(await values(engine, Position(0, 0), 8)) == 6
        assert fetches(engine) == read_once  # cached: no second fetch


# -- item 1: ownership -----------------------------------------------------------------


def listing(url: str) -> dict[str, bytes]:
    store = OffloadStore(url)
    return {u: read_bytes(u) for u in store.list_topic("t")}


async def test_two_data_directories_on_one_prefix_never_touch_each_others_objects(
    tmp_path: Path, offload_url: str
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    async with Engine.open(first, config(offload_url)) as engine:
        await offloaded_history(engine, value_bytes=10)
    async with Engine.open(first, config(offload_url)) as engine:
        # a restart keeps the identity, and so the prefix (a reopen seals ledger 2)
        assert await engine.offload("t") == [2]
        theirs = listing(offload_url)
        assert len(theirs) == 4  # three ledgers and one sidecar
        assert len({OffloadStore.owner_of(url) for url in theirs}) == 1
    marker = read_bytes(OffloadStore(offload_url).marker_url())
    async with Engine.open(second, config(offload_url)) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", [f"second {i}" for i in range(2 * LEDGER + 1)])
        with pytest.raises(OffloadPrefixClaimedError) as raised:
            await engine.offload("t")
        message = str(raised.value)
        assert "claimed by store" in message
        assert str(first.resolve()) in message
        assert "--offload-takeover" in message
        health = engine.health()
        assert health.status == "degraded"
        assert health.reason == message
        assert listing(offload_url) == theirs  # nothing written, nothing removed
        assert read_bytes(OffloadStore(offload_url).marker_url()) == marker
        assert (await engine.fetch("t", Position(0, 0), max=500)).entries  # local data served
        transport = httpx.ASGITransport(app=create_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://txnstream") as http:
            answer = await http.post("/v1/topics/t/offload/run")
            assert answer.status_code == 409
            assert answer.json()["error"]["code"] == "conflict"
    async with Engine.open(second, config(offload_url, offload_takeover=True)) as engine:
        assert await engine.offload("t") == [0, 1, 2]  # (a reopen starts a new ledger)
        assert engine.health().status == "ok"
        mine = {u: b for u, b in listing(offload_url).items() if u not in theirs}
        assert len(mine) == 3
        assert {u: b for u, b in listing(offload_url).items() if u in theirs} == theirs
        await engine.delete_topic("t")  # deletes its own objects only
        assert listing(offload_url) == theirs
    async with Engine.open(first, config(offload_url)) as engine:
        # its objects read as before; it offloads no more (the prefix was taken over)
        assert await values(engine, Position(0, 0), 3) == ["0"]
        await engine.send_many("t", [f"{i}:x" for i in range(LEDGER + 1)])
        with pytest.raises(OffloadPrefixClaimedError):
            await engine.offload("t")


async def test_a_copied_data_directory_gets_its_own_identity(
    tmp_path: Path, offload_url: str
) -> None:
    original, copy = tmp_path / "original", tmp_path / "copy"
    async with Engine.open(original, config(offload_url)) as engine:
        ledgers = await offloaded_history(engine, value_bytes=10)
        await engine.send_many("t", [f"{i}:x" for i in range(LEDGER)])
    shutil.copytree(original, copy)
    theirs = listing(offload_url)
    async with Engine.open(copy, config(offload_url, offload_takeover=True)) as engine:
        # it reads the objects it inherited, offloads under a name of its own, and never
        # deletes what the original wrote (not even after its retention drops them)
        assert await values(engine, Position(0, 0), 3) == ["0"]
        assert await engine.offload("t") == [2, 3]
        new = (await engine.list_ledgers("t"))[2]["url"]
        assert OffloadStore.owner_of(new) != OffloadStore.owner_of(ledgers[0]["url"])
        await engine.delete_topic("t")
    assert listing(offload_url) == theirs
    async with Engine.open(original, config(offload_url)) as engine:
        assert await values(engine, Position(0, 0), 3) == ["0"]


async def test_a_directory_that_offloaded_before_identities_keeps_its_objects(
    tmp_path: Path,
) -> None:
    """Migration: objects named without an identity, recorded by the directory, are its
    own (read, and deleted by its retention or topic deletion); the prefix is claimed at
    its next offload."""
    url, data, ledgers = await local_history(tmp_path)
    # make it what an older version left: unnamed objects, no identity, no marker
    db = sqlite3.connect(data / "txnstream.db")
    with db:
        for info in ledgers[:2]:
            old = info["url"]
            legacy = re.sub(r"-[0-9a-f]{32}\.parquet$", ".parquet", old)
            os.rename(_locate(old)[1], _locate(legacy)[1])
            if info["has_aborts"]:
                side = old.removesuffix(".parquet") + ".aborted.parquet"
                os.rename(
                    _locate(side)[1],
                    _locate(legacy.removesuffix(".parquet"))[1] + ".aborted.parquet",
                )
            db.execute("UPDATE ledgers SET url = ? WHERE url = ?", (legacy, old))
        db.execute("DELETE FROM meta WHERE key LIKE 'store_%'")
    db.close()
    os.remove(_locate(OffloadStore(url).marker_url())[1])
    async with Engine.open(data, config(url)) as engine:
        assert await values(engine, Position(0, 0), 8) == [str(i) for i in range(6)]
        await engine.send_many("t", [f"{i}:x" for i in range(LEDGER)])
        assert await engine.offload("t") == [2]
        assert OffloadStore(url)._read_marker(OffloadStore(url).marker_url()) is not None
        await engine.delete_topic("t")
    assert listing(url) == {}
