"""The offload store on its own: exact round trips, range reads by row group, the
sidecar, counters and caches; against a local directory and a real S3 server."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from txnstream.ledger import (
    AbortedIndexRow,
    InvalidArgumentError,
    OffloadStore,
    Position,
    TxnId,
    encode_payload,
    encode_value,
    normalize_url,
)
from txnstream.ledger._offload import entries_of, ledger_table
from txnstream.ledger._reads import decode_row

_COLUMNS = ("position", "ledger_id", "entry_id", "key", "value", "txn")
"""Some of the Spark source's columns (its own list lives with it, in ``api/spark``)."""

pytestmark = pytest.mark.timeout(60)

KEYS = st.one_of(st.text(max_size=5), st.integers(-5, 5))
VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**64 - 1),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=20),
        st.binary(max_size=20),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=12,
)
ENTRY = st.tuples(
    st.sampled_from([0, 0, 0, 1, 2]),
    st.one_of(st.none(), st.integers(0, 5)),
    st.one_of(st.none(), st.text(max_size=8)),
    VALUES,
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=3),
    st.integers(0, 2**41),
)


def raw_rows(entries: list[tuple[Any, ...]]) -> list[tuple[int, int, int | None, bytes]]:
    return [
        (i, kind, txn, encode_payload(key, encode_value(value), props, publish))
        for i, (kind, txn, key, value, props, publish) in enumerate(entries)
    ]


@given(st.lists(ENTRY, min_size=1, max_size=30))
def test_every_entry_reads_back_exactly(entries: list[tuple[Any, ...]]) -> None:
    rows = raw_rows(entries)
    table = ledger_table(4, rows, aborted={1, 3})
    back = entries_of(4, table)
    assert len(back) == len(rows)
    for (entry_id, kind, txn, data), entry in zip(rows, back, strict=True):
        expected = decode_row((4, entry_id, kind, txn, data))
        assert entry.position == expected.position
        assert entry.kind == expected.kind
        assert entry.txn_id == expected.txn_id
        assert (entry.key, entry.properties, entry.publish_time) == (
            expected.key,
            expected.properties,
            expected.publish_time,
        )
        # msgpack tells bool from int, float from int, bytes from str
        assert encode_value(entry.value) == encode_value(expected.value)
    flags = table.column("aborted").to_pylist()
    assert flags == [kind == 0 and txn in (1, 3) for _, kind, txn, _ in rows]


def test_urls_are_normalized() -> None:
    assert normalize_url("s3://bucket/a/b/") == "s3://bucket/a/b"
    assert normalize_url("/tmp/x/") == "file:///tmp/x"
    assert normalize_url("file:///tmp/x") == "file:///tmp/x"
    for bad in ("", "s3://", "http://host/x", "file://elsewhere/x"):
        with pytest.raises(InvalidArgumentError):
            normalize_url(bad)


def test_range_reads_fetch_only_the_row_groups_they_need(offload_url: str) -> None:
    store = OffloadStore(offload_url)
    big = b"v" * (64 * 1024)  # 16 rows per row group
    rows = [
        (i, 0, i % 3 or None, encode_payload(None, encode_value(big + b"%d" % i), {}, 1))
        for i in range(100)
    ]
    index = [AbortedIndexRow(TxnId(2), Position(9, 2), Position(9, 98), Position(9, 99), None)]
    obj = store.write_ledger("t", 9, rows, {2}, index)
    assert obj.url.endswith("/t/00000000000000000009.parquet")
    assert obj.checksum.startswith("sha256:")
    assert obj.sidecar_size
    reader = OffloadStore()  # a fresh reader: cold caches, no base URL needed
    got = reader.read_entries(9, obj.url, 30, 40)
    assert [e.position.entry_id for e in got] == list(range(30, 41))
    assert got[0].value == big + b"30"
    assert reader.data_fetches == 1
    reader.read_entries(9, obj.url, 32, 47)  # the same row groups: cached
    assert reader.data_fetches == 1
    got = reader.read_positions(9, obj.url, [5, 99, 200])
    assert [e.position.entry_id for e in got] == [5, 99]
    assert reader.data_fetches == 2  # groups 0 and 6 in one request
    committed = sum(1 for _, _, txn, _ in rows if txn != 2)
    assert reader.count_committed(obj.url, 0, 99, 100) == committed
    assert reader.count_committed(obj.url, 0, 9, 100, [0, 1, 2]) == 5  # 2, 5, 8 aborted
    assert reader.read_aborted(obj.url) == index
    assert reader.read_aborted(obj.url) == index
    assert reader.index_fetches == 1
    batches = list(reader.read_batches(obj.url, 0, 99, columns=_COLUMNS, committed=True))
    assert sum(b.num_rows for b in batches) == committed
    assert batches[0].schema.names == list(_COLUMNS)


def test_uploads_replace_and_deletes_forget(offload_url: str) -> None:
    store = OffloadStore(offload_url)
    one = [(0, 0, None, encode_payload(None, encode_value("first"), {}, 1))]
    two = [(0, 0, None, encode_payload(None, encode_value("second"), {}, 1))]
    url = store.write_ledger("t", 0, one, set(), []).url
    assert store.read_entries(0, url, 0, 0)[0].value == "first"
    store.write_ledger("t", 0, two, set(), [])  # the same name: replaced, cache dropped
    assert store.read_entries(0, url, 0, 0)[0].value == "second"
    assert store.list_topic("t") == [url]
    store.delete_ledger(url)
    assert store.list_topic("t") == []
    with pytest.raises(FileNotFoundError):
        store.read_entries(0, url, 0, 0)
