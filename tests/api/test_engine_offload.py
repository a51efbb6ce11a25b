"""Tiered storage through the embedded API, against a local-directory store and a real
S3 server (SeaweedFS): offloaded ledgers read exactly like local ones, the KIP-1058
counter, the Parquet files' committed view, policy, retention and orphans."""

from __future__ import annotations

import asyncio
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support import drain, eventually

from txnstream.api import ConflictError, Engine, EngineConfig, OffloadNotConfiguredError, Position
from txnstream.ledger import OffloadStore

pytestmark = pytest.mark.timeout(120)

LEDGER = 8
VALUES: list[Any] = [b"raw", "text", None, {"a": [1, 2.5, True]}, {"1": "é"}, [-0.5, "in"], 7]


def config(url: str | None, **extra: Any) -> EngineConfig:
    return EngineConfig(
        offload_url=url,
        ledger_max_entries=LEDGER,
        durability="normal",
        min_free_bytes=0,
        **extra,
    )


async def build_history(engine: Engine, topic: str) -> None:
    """Plain data of every value kind, a committed transaction and two aborted ones
    (one spanning a ledger boundary, interleaved with plain data), over ~7 ledgers."""
    await engine.create_topic(topic)
    for i, value in enumerate(VALUES):
        await engine.send(topic, value, key=f"k{i % 3}", properties={"i": str(i)})
    async with engine.transaction() as txn:
        await txn.send_many(topic, [f"c{i}" for i in range(10)])
    aborted = await engine.begin()
    await aborted.send_many(topic, [f"a{i}" for i in range(5)])
    await engine.send_many(topic, ["p1", "p2"])
    await aborted.send(topic, "a5")
    await aborted.abort()
    await engine.send_many(topic, [b"x%d" % i for i in range(12)])
    later = await engine.begin()
    await later.send(topic, "b0")
    await later.abort()
    await engine.send_many(topic, ["tail0", "tail1"])


async def drain_fast(sub: Any) -> list[Any]:
    return await drain(sub, idle=0.05)


def message_rows(messages: list[Any]) -> list[tuple[Any, ...]]:
    return [
        (str(m.position), m.value, m.key, m.properties, m.txn, m.publish_time, m.redelivery_count)
        for m in messages
    ]


async def observe(engine: Engine, topic: str, tag: str) -> dict[str, Any]:
    """Everything a client can see of ``topic``: fetch pages, deliveries of each
    subscription type in both isolations, redelivery, seek, backlog and stats."""
    seen: dict[str, Any] = {}
    for iso in ("read_committed", "read_uncommitted"):
        pages, position = [], None
        while True:
            result = await engine.fetch(topic, position, max=5, isolation=iso)
            if not result.entries:
                break
            pages.append(
                (
                    [
                        (str(e.position), e.kind, e.txn, e.key, e.value, e.properties)
                        for e in result.entries
                    ],
                    sorted((a.txn, str(a.first_position)) for a in result.aborted),
                    str(result.next),
                )
            )
            position = result.next
        seen[f"fetch {iso}"] = pages
        sub = await engine.subscribe(topic, f"{tag}-ex-{iso}", isolation=iso)
        got = await drain_fast(sub)
        seen[f"exclusive {iso}"] = message_rows(got)
        stats = await engine.stats(topic)
        seen[f"backlog {iso}"] = stats["subscriptions"][f"{tag}-ex-{iso}"]["backlog"]
        await sub.ack([m.position for m in got[::3]])
        stats = await engine.stats(topic)
        seen[f"backlog after acks {iso}"] = stats["subscriptions"][f"{tag}-ex-{iso}"]["backlog"]
        await sub.close()
    shared = await engine.subscribe(topic, f"{tag}-shared", type="shared")
    first = await shared.receive(max=6, timeout=1.0)
    await shared.nack([m.position for m in first[1:4]])
    seen["shared redelivered"] = message_rows(first + await drain_fast(shared))
    keyed = await engine.subscribe(topic, f"{tag}-keys", type="key_shared")
    seen["key_shared"] = message_rows(await drain_fast(keyed))
    seeker = await engine.subscribe(topic, f"{tag}-seek")
    await seeker.seek(Position(2, 3))
    seen["after seek"] = message_rows(await drain_fast(seeker))
    stats = await engine.stats(topic)
    seen["stats"] = {
        k: stats[k]
        for k in ("last_confirmed", "stable_position", "open_txns", "aborted_txns", "entries")
    }  # not "ledgers": a reopen starts a new one
    return seen


def objects(url: str, topic: str) -> list[str]:
    return [u.rsplit("/", 1)[-1] for u in OffloadStore(url).list_topic(topic)]


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    assert match, f"{name} not in the metrics"
    return float(match.group(1))


async def test_offloaded_ledgers_read_exactly_like_local_ones(
    data_dir: Path, offload_url: str
) -> None:
    data = data_dir
    async with Engine.open(data, config(offload_url)) as engine:
        await build_history(engine, "t")
        before = await observe(engine, "t", "before")
        offloaded = await engine.offload("t")
        ledgers = await engine.list_ledgers("t")
        assert offloaded == [i["ledger"] for i in ledgers[:-1]]  # all but the open one
        assert len(offloaded) >= 5
        assert all(i["location"] == "remote" and i["url"] for i in ledgers[:-1])
        assert ledgers[-1]["location"] == "local"
        assert ledgers[-1]["url"] is None
        with_aborts = [i["ledger"] for i in ledgers if i["has_aborts"]]
        assert len(with_aborts) == 2
        names = objects(offload_url, "t")
        owner = OffloadStore.owner_of(ledgers[0]["url"])  # the data directory's identity
        assert owner is not None
        assert len(owner) == 32
        assert sorted(names) == sorted(
            [f"{i:020d}-{owner}.parquet" for i in offloaded]
            + [f"{i:020d}-{owner}.aborted.parquet" for i in with_aborts if i in offloaded]
        )
        stats = await engine.stats("t")
        assert stats["offloaded_ledgers"] == len(offloaded)
        assert stats["offloaded_bytes"] > 0
        after = await observe(engine, "t", "after")
        assert after == before
        assert await engine.offload("t") == []  # nothing more is eligible
    # after a restart (a full replay over the remote ledgers: no snapshot yet)
    async with Engine.open(data, config(offload_url)) as engine:
        assert await observe(engine, "t", "reopened") == before


async def test_only_decided_sealed_ledgers_go_and_the_newest_stay(
    data_dir: Path, offload_url: str
) -> None:
    async with Engine.open(data_dir, config(offload_url)) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", list(range(LEDGER)))  # ledger 0
        txn = await engine.begin()
        await txn.send("t", "open")  # ledger 1 holds data of an open transaction
        await engine.send_many("t", list(range(3 * LEDGER)))  # up to ledger 4
        assert await engine.offload("t") == [0]
        await txn.commit()
        await engine.set_offload("t", min_local_ledgers=3)
        assert await engine.offload("t") == [1]  # ledgers 2, 3 and the open 4 stay
        await engine.set_offload("t", min_local_ledgers=1)
        assert await engine.offload("t") == [2, 3]
        sub = await engine.subscribe("t", "s")
        got = [m.value for m in await drain_fast(sub)]
        assert got == [*range(LEDGER), "open", *range(3 * LEDGER)]


async def test_background_pass_follows_the_policy(data_dir: Path, tmp_path: Path) -> None:
    url = (tmp_path / "objects").as_uri()
    async with Engine.open(data_dir, config(url, offload_check_interval=0.05)) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", list(range(4 * LEDGER + 1)))
        await asyncio.sleep(0.2)
        assert (await engine.stats("t"))["offloaded_ledgers"] == 0  # no policy yet
        await engine.set_offload("t", after=0, min_local_ledgers=2)
        # (an object is complete before its ledger switches to it: wait for the switch)
        await eventually(
            lambda: len(engine._rt.topics["t"].ledger.offloaded) == 3, "three ledgers offloaded"
        )
        assert len(objects(url, "t")) == 3
        stats = await engine.stats("t")
        assert stats["offloaded_ledgers"] == 3
        assert stats["offload"] == {"after_ms": 0, "min_local_ledgers": 2}
        await engine.set_offload("t", after=3600)
        await engine.send_many("t", list(range(2 * LEDGER)))
        await asyncio.sleep(0.3)
        assert (await engine.stats("t"))["offloaded_ledgers"] == 3  # not old enough yet


async def test_kip1058_index_fetches_grow_by_exactly_the_ledgers_with_aborts(
    data_dir: Path, offload_url: str
) -> None:
    async with Engine.open(data_dir, config(offload_url)) as engine:
        await engine.create_topic("t")
        await engine.create_topic("clean")
        with_aborts = {1, 4, 5}
        for ledger in range(8):
            txn = await engine.begin()
            await txn.send_many("t", [f"{ledger}-{i}" for i in range(LEDGER - 1)])
            await (txn.abort() if ledger in with_aborts else txn.commit())
            async with engine.transaction() as clean:
                await clean.send_many("clean", [f"{ledger}-{i}" for i in range(LEDGER - 1)])
        await engine.send("t", "last")
        await engine.send("clean", "last")
        assert len(await engine.offload("t")) == 8
        assert len(await engine.offload("clean")) == 8
        listing = await engine.list_ledgers("t")
        assert {i["ledger"] for i in listing if i["has_aborts"]} == with_aborts

        async def index_fetches() -> float:
            text, _ = engine.metrics.render([], open_txns=0, database_bytes=0, wal_bytes=0)
            return metric(text.decode(), "txnstream_offload_index_fetches_total")

        async def read_all(topic: str) -> list[str]:
            position, kept = None, []
            while True:
                result = await engine.fetch(topic, position, max=5, isolation="read_committed")
                if not result.entries:
                    return kept
                dropped = {a.txn for a in result.aborted}
                kept += [
                    e.value for e in result.entries if e.kind == "data" and e.txn not in dropped
                ]
                position = result.next

        start = await index_fetches()
        kept = await read_all("t")
        assert await index_fetches() - start == len(with_aborts)
        assert kept == [f"{i}-{j}" for i in range(8) if i not in with_aborts for j in range(7)] + [
            "last"
        ]
        assert await read_all("t") == kept
        assert await index_fetches() - start == len(with_aborts)  # never twice
        start = await index_fetches()
        assert len(await read_all("clean")) == 8 * 7 + 1
        assert await index_fetches() == start  # a topic with no aborts: none at all
        text, _ = engine.metrics.render(
            [await engine.topic_stats("t")], open_txns=0, database_bytes=0, wal_bytes=0
        )
        assert metric(text.decode(), 'txnstream_offloaded_ledgers{topic="t"}') == 8
        assert metric(text.decode(), 'txnstream_offloaded_bytes{topic="t"}') > 0
        assert metric(text.decode(), "txnstream_offload_data_fetches_total") > 0


async def test_the_parquet_files_hold_the_committed_view(
    data_dir: Path, offload_url: str, request: pytest.FixtureRequest
) -> None:
    async with Engine.open(data_dir, config(offload_url)) as engine:
        await build_history(engine, "t")
        await engine.offload("t")
        remote = [i for i in await engine.list_ledgers("t") if i["location"] == "remote"]
        sub = await engine.subscribe("t", "s")
        committed = [
            m for m in await drain_fast(sub) if m.position.ledger_id <= remote[-1]["ledger"]
        ]
    if offload_url.startswith("s3://"):
        fs = request.getfixturevalue("s3_server").filesystem()
        paths = [i["url"].removeprefix("s3://") for i in remote]
    else:
        fs, paths = None, [i["url"].removeprefix("file://") for i in remote]
    table = pa.concat_tables([pq.read_table(p, filesystem=fs) for p in paths])
    view = table.filter(pc.and_(pc.equal(table["kind"], "data"), pc.invert(table["aborted"])))
    assert view["position"].to_pylist() == [str(m.position) for m in committed]
    assert view["txn"].to_pylist() == [m.txn for m in committed]
    assert view["key"].to_pylist() == [m.key for m in committed]
    by_value = dict(zip(view["position"].to_pylist(), view["value"].to_pylist(), strict=True))
    assert by_value[str(committed[0].position)] == b"raw"
    assert by_value[str(committed[1].position)] == b"text"
    assert view["value_json"].to_pylist()[3] == '{"a":[1,2.5,true]}'


async def test_retention_and_deletion_remove_remote_objects(
    data_dir: Path, offload_url: str
) -> None:
    async with Engine.open(data_dir, config(offload_url)) as engine:
        await build_history(engine, "t")
        offloaded = await engine.offload("t")
        await engine.set_retention("t", max_bytes=0, require_ack=False)
        assert await engine.apply_retention("t") == len(offloaded)
        assert objects(offload_url, "t") == []
        stats = await engine.stats("t")
        assert stats["offloaded_ledgers"] == 0
        result = await engine.fetch("t", "earliest", max=100, isolation="read_committed")
        assert [e.value for e in result.entries if e.kind == "data"] == ["tail0", "tail1"]
        await engine.create_topic("u")
        await engine.send_many("u", list(range(3 * LEDGER)))
        assert await engine.offload("u") == [0, 1]
        assert objects(offload_url, "u")
        await engine.delete_topic("u")
        assert objects(offload_url, "u") == []
        await engine.create_topic("u")  # the same name again: nothing of the old one
        await engine.send_many("u", ["new"] * (LEDGER + 1))
        assert await engine.offload("u") == [0]
        sub = await engine.subscribe("u", "s")
        assert [m.value for m in await drain_fast(sub)] == ["new"] * (LEDGER + 1)


async def test_orphan_objects_are_removed_by_the_next_pass(
    data_dir: Path, offload_url: str
) -> None:
    data = data_dir
    async with Engine.open(data, config(offload_url)) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", list(range(2 * LEDGER)))
        assert await engine.offload("t") == [0]
        owner = OffloadStore.owner_of((await engine.list_ledgers("t"))[0]["url"])
    # an interrupted offload leaves objects no ledger row points to
    store = OffloadStore(offload_url)
    store.owner = owner
    store.write_ledger("t", 1, [], set(), [])  # ledger 1 is still local
    store.write_ledger("t", 77, [], set(), [])  # no such ledger
    # objects this store never recorded as its own: another store's, and one named
    # before identities existed
    other = OffloadStore(offload_url)
    other.owner = "f" * 32
    other.write_ledger("t", 77, [], set(), [])
    OffloadStore(offload_url).write_ledger("t", 78, [], set(), [])
    expected = 5
    if offload_url.startswith("file://"):  # a local write killed mid-way: its temporary
        topic_dir = Path(urllib.parse.urlparse(offload_url).path) / "t"
        (topic_dir / f"{77:020d}-{owner}.parquet.{'a' * 32}.tmp").write_bytes(b"PAR")
        expected += 1
    assert len(objects(offload_url, "t")) == expected
    async with Engine.open(data, config(offload_url)) as engine:
        assert await engine.offload("t") == [1]  # its orphan replaced; its 77 removed
        assert sorted(objects(offload_url, "t")) == [
            f"{0:020d}-{owner}.parquet",
            f"{1:020d}-{owner}.parquet",
            f"{77:020d}-{'f' * 32}.parquet",
            f"{78:020d}.parquet",
        ]
        sub = await engine.subscribe("t", "s")
        assert [m.value for m in await drain_fast(sub)] == list(range(2 * LEDGER))


async def test_consumers_keep_reading_while_ledgers_switch_tiers(
    data_dir: Path, offload_url: str
) -> None:
    async with Engine.open(data_dir, config(offload_url)) as engine:
        await engine.create_topic("t")
        total = 30 * LEDGER
        await engine.send_many("t", list(range(total)))
        subs = [await engine.subscribe("t", f"s{i}") for i in range(3)]

        async def consume(sub: Any) -> list[int]:
            got: list[int] = []
            while len(got) < total:
                batch = await sub.receive(max=3, timeout=5.0)
                assert batch, "delivery stalled"
                got += [m.value for m in batch]
                await sub.ack(batch[-1].position, cumulative=True)
            return got

        results, offloaded = await asyncio.gather(
            asyncio.gather(*(consume(s) for s in subs)), engine.offload("t")
        )
        assert len(offloaded) == 29
        for got in results:
            assert got == list(range(total))


async def test_offloading_needs_an_offload_url(data_dir: Path) -> None:
    async with Engine.open(data_dir, config(None)) as engine:
        await engine.create_topic("t")
        with pytest.raises(OffloadNotConfiguredError):
            await engine.offload("t")
        with pytest.raises(ConflictError):
            await engine.set_offload("t", after=1.0)
        assert [i["location"] for i in await engine.list_ledgers("t")] == ["local"]
    with pytest.raises(ValueError, match="offload_url"):
        EngineConfig(offload_url="ftp://elsewhere/x")
