"""The Spark data source's parts without a SparkSession: the path reader against the
engine (property test), planning, options, Arrow conversion, the write helpers."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from pyspark.sql.pandas.types import to_arrow_schema
from spark_support import LiveServer, engine_view, expected_columns, populate_mixed
from support import HISTORY_OPS, HistoryModel, play_history

from txnstream.api import Engine, EngineConfig, Position, TxnStreamSourceError
from txnstream.api.spark import _path, _url
from txnstream.api.spark._common import ARROW_SCHEMA, SourceOptions, Window, after, make_batch
from txnstream.api.spark._sink import batch_messages, checkpoint_query_id, chunks
from txnstream.api.spark._source import SCHEMA
from txnstream.api.spark._url import ServerClient


def path_view(path: Path, topic: str, isolation: str = "read_committed") -> list[Any]:
    """Everything the path reader returns for ``topic``, planned like a Spark read."""
    with _path.committed_reader(path) as reader:
        view = reader.view(topic)
        limit = view.max_read_position if isolation == "read_committed" else view.last_confirmed
        if limit is None:
            return []
        sizes = reader.ledger_sizes(view.topic_id)
        window = Window(Position(0, 0), after(limit))
        rows = []
        for part in _path.split_window(sizes, window, 7):
            for batch in _path.read_range(reader, view.topic_id, part, isolation):
                for r in batch.to_pylist():
                    rows.append(
                        (
                            r["position"],
                            r["key"],
                            r["value"],
                            r["value_json"],
                            dict(r["properties"]),
                            r["txn"],
                        )
                    )
        return rows


# -- the stable position and the committed view, against the engine -----------------


@settings(max_examples=40, deadline=None)
@given(ops=HISTORY_OPS)
def test_path_view_matches_engine(tmp_path_factory: pytest.TempPathFactory, ops: list[Any]) -> None:
    path = tmp_path_factory.mktemp("prop")

    async def check(engine: Engine, _model: HistoryModel) -> None:
        stats = await engine.stats("t")
        with _path.committed_reader(path) as reader:
            view = reader.view("t")
        assert _text(view.max_read_position) == stats["stable_position"]
        assert _text(view.last_confirmed) == stats["last_confirmed"]
        for isolation in ("read_committed", "read_uncommitted"):
            assert path_view(path, "t", isolation) == await engine_view(engine, "t", isolation)

    config = EngineConfig(durability="normal", ledger_max_entries=3)
    asyncio.run(play_history(path, config, ops, check))


def _text(position: Position | None) -> str | None:
    return None if position is None else str(position)


@pytest.mark.parametrize(
    "messages",
    [
        [(None, b"v" * n, {}) for n in (0, 1, 100, 255)],  # bin8: the vectorized path
        [(None, b"w" * n, {}) for n in (256, 300, 65535)],  # bin16
        [(None, b"z" * 70_000, {}), (None, b"", {})],  # bin32 and bin8 mixed
        [("k", b"keyed", {}), (None, b"plain", {})],  # a key: the msgpack path
        [(None, b"p", {"a": "b"}), (None, "text", {}), (None, {"j": [1]}, {})],
    ],
)
def test_payload_decoding_paths_agree(messages: list[Any]) -> None:
    from txnstream.ledger import decode_payload, encode_payload, encode_value

    rows = [
        (i, None, encode_payload(key, encode_value(value), props, 1_795_000_000_000 + i))
        for i, (key, value, props) in enumerate(messages)
    ]
    batch = _path._batch(3, rows).to_pylist()
    for row, (_, _, data) in zip(batch, rows, strict=True):
        key, value, props, publish_ms = decode_payload(data)
        assert row["key"] == key
        assert (row["value"], row["value_json"]) == expected_columns(value)
        assert dict(row["properties"]) == props
        assert round(row["publish_time"].timestamp() * 1000) == publish_ms


def test_vectorized_decoding_is_on() -> None:
    from txnstream.ledger import encode_payload, encode_value

    payloads = pa.array([encode_payload(None, encode_value(b"abc"), {}, 1_795_000_000_000)])
    decoded = _path.decode_plain(payloads)
    assert decoded is not None, "the ledger codec changed shape: update decode_plain"
    assert decoded[0].to_pylist() == [b"abc"]
    assert decoded[1].to_pylist() == [1_795_000_000_000]


# -- planning -------------------------------------------------------------------------


def test_split_window_cuts_ledgers_and_bounds() -> None:
    sizes = [(0, 5), (1, 0), (3, 12), (4, 2)]
    window = Window(Position(0, 2), Position(3, 11))
    parts = _path.split_window(sizes, window, 5)
    assert [(p.ledger_id, p.lo, p.hi) for p in parts] == [
        (0, 2, 5),
        (3, 0, 5),
        (3, 5, 10),
        (3, 10, 11),
    ]
    everything = _path.split_window(sizes, Window(Position(0, 0), Position(9, 0)), 100)
    assert sum(p.hi - p.lo for p in everything) == 19
    assert _path.split_window(sizes, Window(Position(3, 4), Position(3, 4)), 5) == []


def test_split_ledgers_over_http() -> None:
    parts = _url.split_ledgers(Window(Position(2, 5), Position(4, 7)), 3)
    assert [(str(w.start), str(w.end)) for w in parts] == [
        ("2:5", "3:0"),
        ("3:0", "4:0"),
        ("4:0", "4:3"),
        ("4:3", "4:6"),
        ("4:6", "4:7"),
    ]
    grouped = _url.split_ledgers(Window(Position(0, 0), Position(9, 2)), 100, 40.0)
    assert [(str(w.start), str(w.end)) for w in grouped] == [
        ("0:0", "2:0"),
        ("2:0", "4:0"),
        ("4:0", "6:0"),
        ("6:0", "8:0"),
        ("8:0", "9:0"),
        ("9:0", "9:2"),
    ]


# -- options --------------------------------------------------------------------------


def test_options_defaults_and_lowercase_keys() -> None:
    options = SourceOptions.parse({"URL": "http://h:1/", "Topic": "orders"})
    assert options.url == "http://h:1"
    assert options.path is None
    assert options.starting == "earliest"
    assert options.ending == "latest"
    assert options.isolation == "read_committed"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"topic": "t"}, "exactly one of the options 'url'"),
        ({"topic": "t", "url": "http://x", "path": "/d"}, "exactly one"),
        ({"url": "http://x"}, "'topic' is required"),
        ({"url": "http://x", "topic": "__sys"}, "reserved"),
        ({"url": "ftp://x", "topic": "t"}, "must start with http"),
        ({"path": "/d", "topic": "t", "startingposition": "1:x"}, "invalid startingPosition"),
        ({"path": "/d", "topic": "t", "endingposition": "-1:0"}, "invalid endingPosition"),
        ({"path": "/d", "topic": "t", "isolation": "dirty"}, "option isolation"),
        ({"path": "/d", "topic": "t", "fetchsize": "0"}, "fetchsize must be in"),
        ({"path": "/d", "topic": "t", "maxentriesperpartition": "x"}, "must be an integer"),
        ({"path": "/d", "topic": "t", "valueformat": "avro"}, "valueFormat"),
    ],
)
def test_options_errors(raw: dict[str, str], message: str) -> None:
    with pytest.raises(TxnStreamSourceError, match=message):
        SourceOptions.parse(raw)


def test_path_errors(tmp_path: Path) -> None:
    with pytest.raises(TxnStreamSourceError, match="no such directory"):
        _path.database_file(tmp_path / "missing")
    with (
        pytest.raises(TxnStreamSourceError, match=r"has no txnstream\.db"),
        _path.committed_reader(tmp_path),
    ):
        pass
    sqlite3.connect(tmp_path / "txnstream.db").execute("CREATE TABLE x (a)").connection.commit()
    with (
        pytest.raises(TxnStreamSourceError, match="lacks the tables"),
        _path.committed_reader(tmp_path),
    ):
        pass


# -- Arrow ------------------------------------------------------------------------------


def test_arrow_schema_is_what_spark_expects() -> None:
    assert to_arrow_schema(SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_make_batch_columns() -> None:
    values: list[Any] = [b"\x00raw", "text é", {"a": [1, None]}, None, 3.5, True]
    batch = make_batch(
        7,
        list(range(len(values))),
        ["k", None, None, None, None, None],
        values,
        [{"p": "q"}, None, {}, None, None, None],
        [None, 4, 4, None, None, 9],
        [1_700_000_000_123] * len(values),
    )
    assert batch.schema.equals(ARROW_SCHEMA)
    rows = batch.to_pylist()
    assert [r["position"] for r in rows] == [f"7:{i}" for i in range(len(values))]
    assert [(r["value"], r["value_json"]) for r in rows] == [expected_columns(v) for v in values]
    assert rows[0]["properties"] == [("p", "q")]
    assert rows[1]["properties"] == []
    assert [r["txn"] for r in rows] == [None, "txn-4", "txn-4", None, None, "txn-9"]
    assert rows[0]["publish_time"].timestamp() == pytest.approx(1_700_000_000.123)
    text = make_batch(
        0,
        [1],
        [None],
        ["x"],
        [None],
        ["txn-2"],
        pa.array(["2024-01-02T03:04:05.678Z"]),
        txn_text=True,
    )
    assert text.to_pylist()[0]["txn"] == "txn-2"
    assert text.to_pylist()[0]["publish_time"].isoformat() == "2024-01-02T03:04:05.678000+00:00"


# -- write helpers -------------------------------------------------------------------------


def test_batch_messages_and_chunks() -> None:
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array(['{"a":1}', None, '"s"']),
            "key": pa.array(["k", None, "z"]),
            "properties": pa.array([[("x", "y")], None, []], pa.map_(pa.string(), pa.string())),
            "ignored": pa.array([1, 2, 3]),
        }
    )
    assert batch_messages(batch, "json") == [
        ("k", {"a": 1}, {"x": "y"}),
        (None, None, None),
        ("z", "s", {}),
    ]
    assert batch_messages(batch, "raw")[0] == ("k", '{"a":1}', {"x": "y"})
    bad = pa.RecordBatch.from_pydict({"value": pa.array(["{nope"])})
    with pytest.raises(TxnStreamSourceError, match="not JSON text"):
        batch_messages(bad, "json")
    messages = [(None, b"x" * 3_000_000, None)] * 7
    sizes = [len(c) for c in chunks(messages, 5)]
    assert sum(sizes) == 7
    assert max(sizes) <= 2
    assert [len(c) for c in chunks([(None, b"x", None)] * 12, 5)] == [5, 5, 2]


def test_checkpoint_query_id(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text(json.dumps({"id": "q-1"}) + "\n")
    assert checkpoint_query_id(str(tmp_path)) == "q-1"
    assert checkpoint_query_id(f"file://{tmp_path}") == "q-1"
    assert checkpoint_query_id("s3://bucket/x") is None
    assert checkpoint_query_id(str(tmp_path / "none")) is None


# -- url reads without Spark ----------------------------------------------------------------


def test_http_window_read_matches_engine(server: LiveServer) -> None:
    topic = server.new_topic()
    open_txn = server.run(populate_mixed(server.engine, topic))
    options = SourceOptions.parse({"url": server.url, "topic": topic, "fetchsize": "7"})
    with ServerClient(options) as client:
        first, limit = client.limits("read_committed")
        assert first == Position(0, 0) or first is not None
        assert limit is not None
        rows = []
        for window in _url.split_ledgers(Window(first, after(limit)), 9):
            for batch in _url.read_window(client, window, "read_committed", 7):
                rows += [
                    (
                        r["position"],
                        r["key"],
                        r["value"],
                        r["value_json"],
                        dict(r["properties"]),
                        r["txn"],
                    )
                    for r in batch.to_pylist()
                ]
    assert rows == server.run(engine_view(server.engine, topic))
    assert rows == path_view(server.data, topic)
    server.run(open_txn.abort())
