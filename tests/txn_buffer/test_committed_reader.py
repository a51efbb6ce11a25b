"""CommittedReader: the committed view read from a data directory's file, against the
engine that wrote it (its own ``stats()`` and a model of the history)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given
from support import HISTORY_OPS, HistoryModel, NewStore, play_history, store_per_example

from txnstream.api import Engine, EngineConfig, InvalidArgumentError, TopicNotFoundError
from txnstream.ledger import Position, TxnId
from txnstream.txn_buffer import CommittedReader


def _seq(txn: str) -> int:
    return TxnId.parse(txn).seq


def whole_topic_aborted(reader: CommittedReader, topic_id: int) -> set[int]:
    """The aborted set as a reader of every ledger range collects it."""
    found: set[int] = set()
    for ledger_id, size in reader.ledger_sizes(topic_id):
        if size > 0:
            found |= reader.aborted_txns(topic_id, ledger_id, 0, size)
    return found


async def check_against_engine(engine: Engine, path: Path, model: HistoryModel) -> None:
    await engine._rt.store.flush()
    stats = await engine.stats("t")
    with CommittedReader(path) as reader:
        view = reader.view("t")
        aborted = whole_topic_aborted(reader, view.topic_id)
        open_seqs = reader.open_txns("t")

    def text(position: Position | None) -> str | None:
        return None if position is None else str(position)

    assert text(view.max_read_position) == stats["stable_position"]
    assert text(view.last_confirmed) == stats["last_confirmed"]
    assert aborted == model.aborted_with_data
    assert len(aborted) == stats["aborted_txns"]
    assert set(open_seqs) == {_seq(t) for t in model.open_with_data}
    if model.open_with_data:  # the stable position stops just before the oldest open data
        oldest = min(model.open_with_data.values())
        assert view.max_read_position is None or view.max_read_position < oldest


async def test_reader_matches_engine(data_dir: Path) -> None:
    config = EngineConfig(durability="normal", ledger_max_entries=4)
    model = HistoryModel()
    async with Engine.open(data_dir, config) as engine:
        await engine.create_topic("t")
        await engine.create_topic("other")
        with CommittedReader(data_dir) as reader:
            empty = reader.view("t")
        assert (empty.first, empty.last_confirmed, empty.max_read_position) == (None, None, None)

        await engine.send("t", b"plain-0")
        committed = await engine.begin()
        await committed.send("t", b"c-1")
        await committed.send("other", b"c-other")
        aborted = await engine.begin()
        await aborted.send("t", b"a-1")
        await aborted.send("t", b"a-2")
        elsewhere = await engine.begin()  # aborted, but with no data on t
        await elsewhere.send("other", b"x")
        await committed.commit()
        await aborted.abort()
        await elsewhere.abort()
        model.aborted_with_data.add(_seq(aborted.id))
        await check_against_engine(engine, data_dir, model)

        still_open = await engine.begin()
        model.open_with_data[still_open.id] = await still_open.send("t", b"o-1")
        await engine.send_many("t", [b"after"] * 5)  # beyond the stable position
        await check_against_engine(engine, data_dir, model)

        await still_open.commit()
        del model.open_with_data[still_open.id]
        await check_against_engine(engine, data_dir, model)


async def test_data_rows_and_planning(data_dir: Path) -> None:
    async with Engine.open(data_dir, EngineConfig(ledger_max_entries=5)) as engine:
        await engine.create_topic("t")
        txn = await engine.begin()
        await txn.send("t", b"in-txn")
        await engine.send_many("t", [b"v"] * 6)
        await txn.commit()  # a COMMIT marker: an entry, never a data row
        await engine._rt.store.flush()
        with CommittedReader(data_dir) as reader:
            tid = reader.topic_id("t")
            sizes = reader.ledger_sizes(tid)
            assert sizes == [(0, 5), (1, 3)]
            chunks = list(reader.data_rows(tid, 1, 0, 3, 1))
            assert [[row[0] for row in chunk] for chunk in chunks] == [[0], [1]]
            first = next(reader.data_rows(tid, 0, 0, 5, 100))
            assert first[0] == (0, _seq(txn.id), first[0][2])
            assert all(txn_seq is None for _, txn_seq, _ in first[1:])
            assert isinstance(first[0][2], bytes)
            assert reader.nth_position(tid, Position(0, 3), 3) == Position(1, 1)
            assert reader.nth_position(tid, Position(0, 3), 30) is None


async def test_max_read_position_scan_hint(tmp_path: Path) -> None:
    async with Engine.open(tmp_path, EngineConfig(ledger_max_entries=4)) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", [b"x"] * 6)
        txn = await engine.begin()
        first = await txn.send("t", b"open")
        await engine.send_many("t", [b"y"] * 6)
        await engine._rt.store.flush()
        with CommittedReader(tmp_path) as reader, reader.read_transaction():
            stable = reader.max_read_position(0, "t")
            hinted = reader.max_read_position(0, "t", scan_from=stable)
        assert stable is not None
        assert Position(stable.ledger_id, stable.entry_id + 1) <= first
        assert stable == hinted == Position.parse((await engine.stats("t"))["stable_position"])
        await txn.abort()


async def test_not_a_data_directory(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="not a txnstream data directory: no such"):
        CommittedReader(tmp_path / "missing")
    with pytest.raises(InvalidArgumentError, match=r"it has no txnstream\.db"):
        CommittedReader(tmp_path)
    (tmp_path / "txnstream.db").write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(InvalidArgumentError, match="is not a txnstream database"):
        CommittedReader(tmp_path)
    (tmp_path / "txnstream.db").unlink()
    sqlite3.connect(tmp_path / "txnstream.db").execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(InvalidArgumentError, match="lacks the tables aborted_txns, entries"):
        CommittedReader(tmp_path)


async def test_missing_topic_and_read_only(data_dir: Path) -> None:
    async with Engine.open(data_dir, EngineConfig()) as engine:
        await engine.create_topic("t")
        await engine.send("t", b"x")
        await engine._rt.store.flush()
        with CommittedReader(data_dir) as reader:
            with pytest.raises(TopicNotFoundError, match="topic 'nope' not found in data dir"):
                reader.topic_id("nope")
            with pytest.raises((sqlite3.OperationalError, psycopg.Error), match=r"read-?only"):
                reader._store._conn.execute("DELETE FROM entries")  # type: ignore[attr-defined]
        assert (await engine.stats("t"))["last_confirmed"] == "0:0"


@pytest.mark.postgresql_in_full_run  # (60 examples, each a store of its own)
@pytest.mark.timeout(300)
@store_per_example(60)
@given(ops=HISTORY_OPS)
def test_random_histories(new_store: NewStore, ops: list[Any]) -> None:
    with new_store() as path:

        async def check(engine: Engine, model: HistoryModel) -> None:
            await check_against_engine(engine, path, model)

        config = EngineConfig(durability="normal", ledger_max_entries=3)
        asyncio.run(play_history(path, config, ops, check))


async def test_reader_sees_offloaded_ledgers(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = EngineConfig(
        durability="normal",
        ledger_max_entries=4,
        min_free_bytes=0,
        offload_url=(tmp_path / "objects").as_uri(),
    )
    async with Engine.open(data, config) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", [b"%d" % i for i in range(6)])
        aborted = await engine.begin()
        await aborted.send("t", b"gone")
        await aborted.abort()
        await engine.send_many("t", [b"%d" % i for i in range(6, 10)])
        assert await engine.offload("t") == [0, 1]  # everything but ledger 2 (open, full)
        stats = await engine.stats("t")
    with CommittedReader(data) as reader:
        view = reader.view("t")
        assert view.first == Position(0, 0)
        assert str(view.last_confirmed) == stats["last_confirmed"]
        assert str(view.max_read_position) == stats["stable_position"]
        remote = reader.offloaded(view.topic_id)
        assert [r.ledger_id for r in remote] == [0, 1]
        assert reader.ledger_sizes(view.topic_id)[:2] == [(0, 4), (1, 4)]
        assert reader.nth_position(view.topic_id, Position(0, 2), 3) == Position(1, 1)
        assert reader.nth_position(view.topic_id, Position(0, 0), 9) == Position(2, 1)
        values = [
            v
            for r in remote
            for b in CommittedReader.read_offloaded(
                r.url, 0, r.entries, columns=("value",), committed=True
            )
            for v in b.column("value").to_pylist()
        ]
        assert values == [b"%d" % i for i in range(6)]  # the aborted one and markers out
        with_aborted = [
            v
            for r in remote
            for b in CommittedReader.read_offloaded(
                r.url, 0, r.entries, columns=("value",), committed=False
            )
            for v in b.column("value").to_pylist()
        ]
        assert b"gone" in with_aborted
