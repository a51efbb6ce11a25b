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
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from spark_support import LiveServer, engine_view, expected_columns, populate_mixed

from api import Engine, EngineConfig, OutgoingMessage, Position, _spark_http, _spark_path
from api._spark_common import (
    ARROW_SCHEMA,
    SourceOptions,
    TxnStreamSourceError,
    Window,
    after,
    make_batch,
)
from api._spark_sink import batch_messages, checkpoint_query_id, chunks
from api.spark import SCHEMA


def path_view(path: Path, topic: str, isolation: str = "read_committed") -> list[Any]:
    """Everything the path reader returns for ``topic``, planned like a Spark read."""
    conn = _spark_path.connect(path)
    try:
        view = _spark_path.view(conn, topic, isolation, "test")
        if view.limit is None:
            return []
        sizes = _spark_path.ledger_sizes(conn, view.topic_id)
        window = Window(Position(0, 0), after(view.limit))
        rows = []
        for part in _spark_path.split_window(sizes, window, 7):
            for batch in _spark_path.read_range(conn, view.topic_id, part, isolation):
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
    finally:
        conn.close()


# -- the stable position and the committed view, against the engine -----------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("begin")),
        st.tuples(st.just("send"), st.integers(0, 3)),
        st.tuples(st.just("plain")),
        st.tuples(st.just("commit"), st.integers(0, 3)),
        st.tuples(st.just("abort"), st.integers(0, 3)),
        st.tuples(st.just("reopen")),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_path_view_matches_engine(tmp_path_factory: pytest.TempPathFactory, ops: list[Any]) -> None:
    path = tmp_path_factory.mktemp("prop")
    config = EngineConfig(durability="normal", ledger_max_entries=3)

    async def scenario() -> None:
        engine = await Engine.open(path, config)
        await engine.create_topic("t")
        await engine.create_topic("other")
        txns: list[str] = []
        try:
            for step, op in enumerate(ops):
                if op[0] == "begin":
                    txns.append((await engine.begin()).id)
                elif op[0] == "plain":
                    await engine.send("t", f"plain-{step}".encode())
                elif op[0] == "reopen":  # open transactions survive; a new ledger starts
                    await engine.close()
                    engine = await Engine.open(path, config)
                elif txns:
                    txn = txns[op[1] % len(txns)]
                    if op[0] == "send":
                        message = OutgoingMessage(f"{txn}-{step}".encode())
                        await engine.produce("t", [message], txn=txn)
                        await engine.produce("other", [message], txn=txn)
                    else:
                        await (engine.commit(txn) if op[0] == "commit" else engine.abort(txn))
                        txns.remove(txn)
                await engine.store.flush()
                stats = await engine.stats("t")
                conn = _spark_path.connect(path)
                try:
                    view = _spark_path.view(conn, "t", "read_committed", "test")
                finally:
                    conn.close()
                assert _text(view.stable) == stats["stable_position"]
                assert _text(view.last_confirmed) == stats["last_confirmed"]
                for isolation in ("read_committed", "read_uncommitted"):
                    assert path_view(path, "t", isolation) == await engine_view(
                        engine, "t", isolation
                    )
        finally:
            await engine.close()

    asyncio.run(scenario())


def _text(position: Position | None) -> str | None:
    return None if position is None else str(position)


async def test_stable_position_scan_hint(tmp_path: Path) -> None:
    async with Engine.open(tmp_path, EngineConfig(ledger_max_entries=4)) as engine:
        await engine.create_topic("t")
        await engine.send_many("t", [b"x"] * 6)
        txn = await engine.begin()
        first = await txn.send("t", b"open")
        await engine.send_many("t", [b"y"] * 6)
        await engine.store.flush()
        conn = _spark_path.connect(tmp_path)
        try:
            conn.execute("BEGIN")
            stable = _spark_path.stable_position(conn, 0, "t")
            hinted = _spark_path.stable_position(conn, 0, "t", scan_from=stable)
            conn.execute("COMMIT")
        finally:
            conn.close()
        assert stable is not None
        assert after(stable) <= first
        assert stable == hinted == Position.parse((await engine.stats("t"))["stable_position"])
        await txn.abort()


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
    from ledger import decode_payload, encode_payload, encode_value

    rows = [
        (i, None, encode_payload(key, encode_value(value), props, 1_795_000_000_000 + i))
        for i, (key, value, props) in enumerate(messages)
    ]
    batch = _spark_path._batch(3, rows).to_pylist()
    for row, (_, _, data) in zip(batch, rows, strict=True):
        key, value, props, publish_ms = decode_payload(data)
        assert row["key"] == key
        assert (row["value"], row["value_json"]) == expected_columns(value)
        assert dict(row["properties"]) == props
        assert round(row["publish_time"].timestamp() * 1000) == publish_ms


def test_vectorized_decoding_is_on() -> None:
    from ledger import encode_payload, encode_value

    payloads = pa.array([encode_payload(None, encode_value(b"abc"), {}, 1_795_000_000_000)])
    decoded = _spark_path.decode_plain(payloads)
    assert decoded is not None, "the ledger codec changed shape: update decode_plain"
    assert decoded[0].to_pylist() == [b"abc"]
    assert decoded[1].to_pylist() == [1_795_000_000_000]


# -- planning -------------------------------------------------------------------------


def test_split_window_cuts_ledgers_and_bounds() -> None:
    sizes = [(0, 5), (1, 0), (3, 12), (4, 2)]
    window = Window(Position(0, 2), Position(3, 11))
    parts = _spark_path.split_window(sizes, window, 5)
    assert [(p.ledger_id, p.lo, p.hi) for p in parts] == [
        (0, 2, 5),
        (3, 0, 5),
        (3, 5, 10),
        (3, 10, 11),
    ]
    everything = _spark_path.split_window(sizes, Window(Position(0, 0), Position(9, 0)), 100)
    assert sum(p.hi - p.lo for p in everything) == 19
    assert _spark_path.split_window(sizes, Window(Position(3, 4), Position(3, 4)), 5) == []


def test_split_ledgers_over_http() -> None:
    parts = _spark_http.split_ledgers(Window(Position(2, 5), Position(4, 7)), 3)
    assert [(str(w.start), str(w.end)) for w in parts] == [
        ("2:5", "3:0"),
        ("3:0", "4:0"),
        ("4:0", "4:3"),
        ("4:3", "4:6"),
        ("4:6", "4:7"),
    ]
    grouped = _spark_http.split_ledgers(Window(Position(0, 0), Position(9, 2)), 100, 40.0)
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
        _spark_path.connect(tmp_path / "missing")
    with pytest.raises(TxnStreamSourceError, match=r"has no txnstream\.db"):
        _spark_path.connect(tmp_path)
    sqlite3.connect(tmp_path / "txnstream.db").execute("CREATE TABLE x (a)").connection.commit()
    with pytest.raises(TxnStreamSourceError, match="lacks the tables"):
        _spark_path.connect(tmp_path)


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
    with _spark_http.HttpClient(options) as client:
        first, limit = client.limits("read_committed")
        assert first == Position(0, 0) or first is not None
        assert limit is not None
        rows = []
        for window in _spark_http.split_ledgers(Window(first, after(limit)), 9):
            for batch in _spark_http.read_window(client, window, "read_committed", 7):
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
