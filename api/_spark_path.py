"""Read-only access to a data directory's SQLite file, for the Spark ``path`` mode.

Never goes through :class:`~api.Engine` (one engine per data directory per process, and
a server may own the directory): it opens ``<path>/txnstream.db`` with the stdlib
``sqlite3`` in read-only mode and reads the tables of ``ledger/_schema.py``. In WAL
mode such a reader sees a consistent snapshot of durable, committed state while the
owner keeps writing.

What the committed view is, computed the way the engine's transaction buffer does:

* the *stable position* of a topic is the newest entry when no transaction is open on
  it, else the entry just before the first data entry of the oldest transaction that
  has data on the topic and no marker yet (:func:`stable_position`). A transaction's
  decision and its markers become durable in one SQLite transaction, so "no marker on
  the topic" is "its ``txns`` row is not decided yet"; that row and the ``entries`` are
  read in one snapshot;
* below it everything is decided; the aborted transactions are the ``aborted_txns``
  rows (written atomically with each ABORT marker of a transaction that had data on the
  topic), looked up per read range, and only when a ledger at or after the range has
  ``has_aborts`` set (an ABORT marker always follows its data).
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from ledger import (
    DB_FILE,
    CorruptEntryError,
    Position,
    decode_payload,
    encode_payload,
    encode_value,
    unpack,
)

from ._spark_common import (
    BATCH_ROWS,
    READ_COMMITTED,
    TxnStreamSourceError,
    Window,
    make_batch,
)

_REQUIRED_TABLES = ("topics", "ledgers", "entries", "aborted_txns", "txns")
_DECIDED = ("committed", "aborted")


def database_file(path: str | Path) -> Path:
    """``<path>/txnstream.db``, or a clear error if ``path`` is not a data directory."""
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise TxnStreamSourceError(
            f"path {str(path)!r} is not a txnstream data directory: no such directory"
        )
    db = directory / DB_FILE
    if not db.is_file():
        raise TxnStreamSourceError(
            f"path {str(path)!r} is not a txnstream data directory: it has no {DB_FILE}"
        )
    return db


def connect(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to the data directory at ``path`` (checked to be one)."""
    db = database_file(path)
    uri = f"file:{urllib.parse.quote(str(db.resolve()))}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0)
    except sqlite3.Error as exc:
        raise TxnStreamSourceError(f"cannot open {db} read-only: {exc}") from exc
    try:
        conn.execute("PRAGMA query_only = 1")
        rows = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?, ?)",
            _REQUIRED_TABLES,
        ).fetchall()
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise TxnStreamSourceError(
            f"path {str(path)!r} is not a txnstream data directory: {db.name} is not a"
            f" txnstream database ({exc})"
        ) from None
    missing = set(_REQUIRED_TABLES) - {name for (name,) in rows}
    if missing:
        conn.close()
        raise TxnStreamSourceError(
            f"path {str(path)!r} is not a txnstream data directory: {db.name} lacks the"
            f" tables {', '.join(sorted(missing))}"
        )
    return conn


def topic_id(conn: sqlite3.Connection, topic: str, where: str) -> int:
    """The id of ``topic``; a clear error if it does not exist."""
    row = conn.execute("SELECT topic_id FROM topics WHERE name = ?", (topic,)).fetchone()
    if row is None:
        raise TxnStreamSourceError(f"topic {topic!r} not found in {where}")
    return int(row[0])


# -- the committed view --------------------------------------------------------------


def last_confirmed(conn: sqlite3.Connection, tid: int) -> Position | None:
    """The newest durable entry of the topic."""
    row = conn.execute(
        "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
        " ORDER BY ledger_id DESC, entry_id DESC LIMIT 1",
        (tid,),
    ).fetchone()
    return None if row is None else Position(row[0], row[1])


def open_txns(conn: sqlite3.Connection, topic: str) -> list[int]:
    """Sequences of the undecided transactions that touched ``topic``."""
    found = []
    for seq, topics in conn.execute(
        "SELECT seq, topics FROM txns WHERE state NOT IN (?, ?)", _DECIDED
    ):
        try:
            names = unpack(topics)
        except (ValueError, TypeError):  # a damaged row: assume it may touch the topic
            names = [topic]
        if topic in names:
            found.append(int(seq))
    return found


def stable_position(
    conn: sqlite3.Connection, tid: int, topic: str, *, scan_from: Position | None = None
) -> Position | None:
    """The topic's stable position, as the engine's transaction buffer computes it.

    The newest entry if no transaction with data on the topic is undecided; otherwise
    the entry just before the first data entry of the oldest such transaction (None if
    nothing precedes it). ``scan_from`` may be any stable position computed earlier (the
    stable position never moves backwards, so every open transaction starts after it);
    it bounds the scan for the first open entry. Call it inside one read transaction.
    """
    pending = open_txns(conn, topic)
    first: Position | None = None
    if pending:
        marks = ",".join("?" * len(pending))
        sql = (
            "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ? AND kind = 0"
            f" AND txn IN ({marks})"
        )
        params: list[Any] = [tid, *pending]
        if scan_from is not None:
            sql += " AND (ledger_id, entry_id) > (?, ?)"
            params += [scan_from.ledger_id, scan_from.entry_id]
        row = conn.execute(sql + " ORDER BY ledger_id, entry_id LIMIT 1", params).fetchone()
        if row is not None:
            first = Position(row[0], row[1])
    if first is None:
        return last_confirmed(conn, tid)
    row = conn.execute(
        "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
        " AND (ledger_id, entry_id) < (?, ?) ORDER BY ledger_id DESC, entry_id DESC LIMIT 1",
        (tid, first.ledger_id, first.entry_id),
    ).fetchone()
    return None if row is None else Position(row[0], row[1])


@dataclass(frozen=True, slots=True)
class TopicView:
    """One consistent look at a topic: its read limit for an isolation level."""

    topic_id: int
    first: Position | None
    last_confirmed: Position | None
    stable: Position | None
    limit: Position | None
    """The newest readable position (stable or last confirmed); None if nothing is."""


def view(
    conn: sqlite3.Connection,
    topic: str,
    isolation: str,
    where: str,
    *,
    scan_from: Position | None = None,
) -> TopicView:
    """Look at ``topic`` in one read transaction (one snapshot)."""
    conn.execute("BEGIN")
    try:
        tid = topic_id(conn, topic, where)
        lac = last_confirmed(conn, tid)
        stable = stable_position(conn, tid, topic, scan_from=scan_from) if lac else None
        row = conn.execute(
            "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
            " ORDER BY ledger_id, entry_id LIMIT 1",
            (tid,),
        ).fetchone()
    finally:
        conn.execute("COMMIT")
    first = None if row is None else Position(row[0], row[1])
    limit = stable if isolation == READ_COMMITTED else lac
    return TopicView(tid, first, lac, stable, limit)


def nth_position(conn: sqlite3.Connection, tid: int, start: Position, n: int) -> Position | None:
    """The position of the ``n``-th entry (0-based) at or after ``start``, if any."""
    row = conn.execute(
        "SELECT ledger_id, entry_id FROM entries WHERE topic_id = ?"
        " AND (ledger_id, entry_id) >= (?, ?) ORDER BY ledger_id, entry_id LIMIT 1 OFFSET ?",
        (tid, start.ledger_id, start.entry_id, n),
    ).fetchone()
    return None if row is None else Position(row[0], row[1])


# -- planning ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerRange:
    """Entries ``lo <= entry_id < hi`` of one ledger: one Spark input partition."""

    ledger_id: int
    lo: int
    hi: int


def ledger_sizes(conn: sqlite3.Connection, tid: int) -> list[tuple[int, int]]:
    """``(ledger_id, number of durable entries)`` of every retained ledger, in order."""
    rows = conn.execute(
        "SELECT ledger_id, (SELECT max(entry_id) FROM entries e WHERE e.topic_id = l.topic_id"
        " AND e.ledger_id = l.ledger_id) FROM ledgers l WHERE topic_id = ? ORDER BY ledger_id",
        (tid,),
    ).fetchall()
    return [(int(ledger), -1 if top is None else int(top) + 1) for ledger, top in rows]


def split_window(
    sizes: Sequence[tuple[int, int]], window: Window, max_entries: int
) -> list[LedgerRange]:
    """Cut ``window`` into ranges of at most ``max_entries`` entries, one ledger each."""
    ranges: list[LedgerRange] = []
    for ledger_id, size in sizes:
        if size <= 0 or ledger_id < window.start.ledger_id or ledger_id > window.end.ledger_id:
            continue
        lo = window.start.entry_id if ledger_id == window.start.ledger_id else 0
        hi = min(size, window.end.entry_id) if ledger_id == window.end.ledger_id else size
        while lo < hi:
            upper = min(hi, lo + max_entries)
            ranges.append(LedgerRange(ledger_id, lo, upper))
            lo = upper
    return ranges


# -- reading -------------------------------------------------------------------------


def aborted_in_range(conn: sqlite3.Connection, tid: int, part: LedgerRange) -> set[int]:
    """Aborted transactions with data in ``part`` (empty without an index lookup when no
    ledger at or after it holds an ABORT marker of a transaction with data)."""
    flagged = conn.execute(
        "SELECT 1 FROM ledgers WHERE topic_id = ? AND ledger_id >= ? AND has_aborts != 0 LIMIT 1",
        (tid, part.ledger_id),
    ).fetchone()
    if flagged is None:
        return set()
    rows = conn.execute(
        "SELECT txn FROM aborted_txns WHERE topic_id = ?"
        " AND (marker_ledger, marker_entry) >= (?, ?)"
        " AND (first_ledger, first_entry) < (?, ?) AND (last_ledger, last_entry) >= (?, ?)",
        (tid, part.ledger_id, part.lo, part.ledger_id, part.hi, part.ledger_id, part.lo),
    ).fetchall()
    return {int(txn) for (txn,) in rows}


def _decode(ledger_id: int, rows: list[tuple[int, Any, bytes]]) -> list[Any]:
    """``(key, value, properties, publish_ms)`` of each row, by the ledger's own codec."""
    decoded: list[Any] = []
    for entry_id, _txn, data in rows:
        try:
            decoded.append(decode_payload(data))
        except CorruptEntryError as exc:
            raise TxnStreamSourceError(
                f"entry {ledger_id}:{entry_id} cannot be decoded: {exc}"
            ) from None
    return decoded


def _plain_layout() -> tuple[bytes, int] | None:
    """The fixed prefix of a payload with no key, no properties and a bytes value, and
    the offset of its value's msgpack tag, derived from the ledger's own encoder and
    checked against its decoder (None if the codec changed shape: no fast path then)."""
    publish = 1 << 40  # a current time in ms: packed as uint64 (0xcf + 8 bytes)
    value = b"x" * 300
    sample = encode_payload(None, encode_value(value), {}, publish)
    tag_at = len(sample) - len(encode_value(value))
    if (
        tag_at != 13
        or sample[4] != 0xCF
        or int.from_bytes(sample[5:13], "big") != publish
        or decode_payload(sample) != (None, value, {}, publish)
    ):
        return None
    return sample[:5], tag_at


_PLAIN = _plain_layout()
_BIN_WIDTHS = {0xC4: 1, 0xC5: 2, 0xC6: 4}
"""msgpack bin8/bin16/bin32 tags: the width of the length that follows the tag."""
_UINTS = {1: pa.uint8(), 2: pa.uint16(), 4: pa.uint32(), 8: pa.int64()}
_MAX_BATCH_BYTES = 32 * 1024 * 1024


def _big_endian(slices: Any, width: int) -> Any:
    """Arrow int64 values of binary items of exactly ``width`` bytes, big-endian."""
    fixed = pc.binary_reverse(slices).cast(pa.binary(width))
    ints = pa.Array.from_buffers(
        _UINTS[width], len(fixed), [None, fixed.buffers()[1]], offset=fixed.offset
    )
    return ints.cast(pa.int64())


def decode_plain(payloads: Any) -> tuple[Any, Any] | None:
    """Vectorized decode of payloads with no key, no properties and a bytes value (the
    usual shape of bulk data): ``(values, publish_ms)`` as Arrow arrays, or None when a
    payload has any other shape (the msgpack path decodes those)."""
    if len(payloads) == 0 or _PLAIN is None:
        return None
    head, tag_at = _PLAIN
    try:
        prefix = pc.binary_slice(payloads, 0, len(head))
        if not pc.all(pc.equal(prefix, pa.scalar(head, pa.binary()))).as_py():
            return None
        tags = pc.unique(pc.binary_slice(payloads, tag_at, tag_at + 1)).to_pylist()
        if len(tags) != 1 or len(tags[0]) != 1 or tags[0][0] not in _BIN_WIDTHS:
            return None
        width = _BIN_WIDTHS[tags[0][0]]
        start = tag_at + 1 + width
        lengths = _big_endian(pc.binary_slice(payloads, tag_at + 1, start), width)
        values = pc.binary_slice(payloads, start, 1 << 30)
        if not pc.all(pc.equal(pc.binary_length(values).cast(pa.int64()), lengths)).as_py():
            return None
        return values, _big_endian(pc.binary_slice(payloads, tag_at - 8, tag_at), 8)
    except pa.ArrowInvalid:
        return None


def _by_size(rows: list[Any]) -> Iterator[list[Any]]:
    """``rows`` cut so that no batch carries much more than 32 MiB of payloads."""
    if sum(map(len, [row[2] for row in rows])) <= _MAX_BATCH_BYTES:
        yield rows
        return
    start, size = 0, 0
    for index, row in enumerate(rows):
        size += len(row[2])
        if size > _MAX_BATCH_BYTES and index > start:
            yield rows[start:index]
            start, size = index, len(row[2])
    yield rows[start:]


def read_range(
    conn: sqlite3.Connection, tid: int, part: LedgerRange, isolation: str
) -> Iterator[Any]:
    """Record batches of the data entries of ``part`` (aborted data dropped when
    read_committed); the range must lie at or below the read limit of ``isolation``."""
    aborted = aborted_in_range(conn, tid, part) if isolation == READ_COMMITTED else set()
    ledger_id = part.ledger_id
    cursor = conn.execute(
        "SELECT entry_id, txn, data FROM entries WHERE topic_id = ? AND ledger_id = ?"
        " AND entry_id >= ? AND entry_id < ? AND kind = 0 ORDER BY entry_id",
        (tid, ledger_id, part.lo, part.hi),
    )
    while True:
        fetched = cursor.fetchmany(BATCH_ROWS)
        if not fetched:
            break
        if aborted:
            fetched = [row for row in fetched if row[1] not in aborted]
        for rows in _by_size(fetched):
            if rows:
                yield _batch(ledger_id, rows)


def _batch(ledger_id: int, rows: list[Any]) -> Any:
    entry_ids = [row[0] for row in rows]
    txns = [row[1] for row in rows]
    plain = decode_plain(pa.array([row[2] for row in rows], pa.binary()))
    if plain is not None:
        values, publish = plain
        return make_batch(ledger_id, entry_ids, None, values, None, txns, publish)
    decoded = _decode(ledger_id, rows)
    return make_batch(
        ledger_id,
        entry_ids,
        [d[0] for d in decoded],
        [d[1] for d in decoded],
        [d[2] for d in decoded],
        txns,
        [d[3] for d in decoded],
    )
