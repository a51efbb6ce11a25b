"""The Spark ``path`` mode: read a data directory's committed view into Arrow batches.

Never goes through :class:`~txnstream.api.Engine` (one engine per data directory per process, and
a server may own the directory): :class:`~txnstream.api.CommittedReader` reads the SQLite file
read-only and computes the committed view (stable position, aborted transactions per
range) as the engine does. This module plans ledger ranges, drops aborted data and turns
raw rows into record batches, vectorized for the usual shape of bulk data.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from txnstream.api import (
    CorruptEntryError,
    InvalidArgumentError,
    LedgerError,
    NotFoundError,
)
from txnstream.api.support import CommittedReader

from ._common import BATCH_ROWS, READ_COMMITTED, SPARK_COLUMNS, Window, make_batch
from ._errors import TxnStreamSourceError


@contextmanager
def committed_reader(path: str | Path) -> Iterator[CommittedReader]:
    """The data directory at ``path``, read-only; the reader's errors (not a data
    directory, missing topic) as :class:`~txnstream.api.TxnStreamSourceError`."""
    try:
        with CommittedReader(path) as reader:
            yield reader
    except (InvalidArgumentError, NotFoundError, LedgerError) as exc:
        raise TxnStreamSourceError(str(exc)) from None


def database_file(path: str | Path) -> Path:
    """``<path>/txnstream.db``, or a clear error if ``path`` is not a data directory."""
    try:
        return CommittedReader.database_file(path)
    except InvalidArgumentError as exc:
        raise TxnStreamSourceError(str(exc)) from None


# -- planning ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerRange:
    """Entries ``lo <= entry_id < hi`` of one ledger: one Spark input partition."""

    ledger_id: int
    lo: int
    hi: int


def split_window(
    sizes: Sequence[tuple[int, int]],
    window: Window,
    max_entries: int,
    whole: Collection[int] = (),
) -> list[LedgerRange]:
    """Cut ``window`` into ranges of at most ``max_entries`` entries, one ledger each;
    the ledgers in ``whole`` (offloaded: one object each) are never cut."""
    ranges: list[LedgerRange] = []
    for ledger_id, size in sizes:
        if size <= 0 or ledger_id < window.start.ledger_id or ledger_id > window.end.ledger_id:
            continue
        lo = window.start.entry_id if ledger_id == window.start.ledger_id else 0
        hi = min(size, window.end.entry_id) if ledger_id == window.end.ledger_id else size
        step = hi - lo if ledger_id in whole else max_entries
        while lo < hi:
            upper = min(hi, lo + step)
            ranges.append(LedgerRange(ledger_id, lo, upper))
            lo = upper
    return ranges


# -- reading -------------------------------------------------------------------------


def _decode(ledger_id: int, rows: list[tuple[int, Any, bytes]]) -> list[Any]:
    """``(key, value, properties, publish_ms)`` of each row, by the ledger's own codec."""
    decoded: list[Any] = []
    for entry_id, _txn, data in rows:
        try:
            decoded.append(CommittedReader.decode_payload(data))
        except CorruptEntryError as exc:
            raise TxnStreamSourceError(
                f"entry {ledger_id}:{entry_id} cannot be decoded: {exc}"
            ) from None
    return decoded


_PLAIN = CommittedReader.plain_payload_layout()
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
    reader: CommittedReader,
    tid: int,
    part: LedgerRange,
    isolation: str,
    object_url: Callable[[int, str | None], str | None] | None = None,
) -> Iterator[Any]:
    """Record batches of the data entries of ``part`` (aborted data dropped when
    read_committed); the range must lie at or below the read limit of ``isolation``.

    An offloaded ledger is read straight from its object in the object store (its
    ``aborted`` column flags aborted data: no index lookup), never through SQLite.
    """
    ledger_id = part.ledger_id
    remote = next((r for r in reader.offloaded(tid) if r.ledger_id == ledger_id), None)
    if remote is not None:
        url = remote.url if object_url is None else object_url(ledger_id, remote.url)
        yield from read_offloaded(url or remote.url, part.lo, part.hi, isolation, remote.size)
        return
    aborted = (
        reader.aborted_txns(tid, ledger_id, part.lo, part.hi)
        if isolation == READ_COMMITTED
        else set()
    )
    for fetched in reader.data_rows(tid, ledger_id, part.lo, part.hi, BATCH_ROWS):
        if aborted:
            fetched = [row for row in fetched if row[1] not in aborted]
        for rows in _by_size(fetched):
            if rows:
                yield _batch(ledger_id, rows)


def read_offloaded(
    url: str, lo: int, hi: int, isolation: str, size: int | None = None
) -> Iterator[Any]:
    """Record batches of the data entries ``lo <= e < hi`` of an offloaded ledger, read
    from its object (credentials from this process's ``AWS_*`` environment)."""
    try:
        yield from CommittedReader.read_offloaded(
            url,
            lo,
            hi,
            columns=SPARK_COLUMNS,
            committed=isolation == READ_COMMITTED,
            size=size,
        )
    except LedgerError as exc:
        raise TxnStreamSourceError(str(exc)) from None


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
