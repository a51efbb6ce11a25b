"""txnstream as a PySpark data source (the ``spark`` extra): format ``"txnstream"``.

::

    from txnstream.api.spark import TxnStreamDataSource
    spark.dataSource.register(TxnStreamDataSource)

    df = (spark.read.format("txnstream")
          .option("url", "http://127.0.0.1:8080")      # a running server, or
          # .option("path", "./data")                  # a local data directory (read-only)
          .option("topic", "orders").load())           # committed data only, in parallel

    stream = (spark.readStream.format("txnstream")
              .option("url", url).option("topic", "orders").load())

    df.write.format("txnstream").option("url", url).option("topic", "copy").mode("append").save()

Reading. Schema: ``position`` string ``"L:E"``, ``ledger_id``/``entry_id`` long, ``key``
string, ``value`` binary (bytes as stored; a string value as UTF-8; any other value as
its JSON text), ``value_json`` string (the JSON text of a non-bytes value, else null),
``properties`` map<string,string>, ``txn`` string (``"txn-<n>"`` or null), and
``publish_time`` timestamp. Options: ``url`` or ``path`` (exactly one), ``topic``,
``startingPosition`` (inclusive; ``earliest`` default, ``latest`` or ``"L:E"``),
``endingPosition`` (batch only, exclusive; ``latest`` default = the stable position, or
``"L:E"``, clamped to the stable position), ``isolation`` (``read_committed`` default;
``read_uncommitted`` reads up to the last confirmed entry, aborted and open data
included), ``maxEntriesPerPartition`` (200000), ``fetchSize`` (url, 10000),
``maxEntriesPerTrigger`` (streaming; counts log entries, markers included), ``timeout``
(HTTP seconds), ``token`` (url: the bearer token for a server run with ``--auth``; it
needs ``consume`` on the topic to read, ``produce`` to write). Input partitions are
whole ledgers or bounded ranges of a large ledger, consecutive small ledgers grouped up
to ``maxEntriesPerPartition`` entries (over HTTP by the topic's average ledger size);
each task reads its range and drops aborted data using the aborted list of its own range
(path: the aborted-transaction index, not even looked up when no ledger from the range
on has ``has_aborts``; url: each fetch answer's ``aborted``), yielding Arrow record
batches, never buffering a transaction.

Offloaded ledgers (tiered storage) are one partition each in both modes, read by the
task straight from their Parquet object in the object store (committed data: the
object's ``aborted`` column; no broker and no index lookup in the path): the URL comes
from the data directory's ``ledgers`` table (path) or the server's ledger listing
``GET /v1/topics/{t}/ledgers`` (url), or, with the option ``offloadUrl``, from that base
(``file:///dir``, a path or ``s3://bucket/prefix``; credentials and endpoint from the
executors' ``AWS_*`` environment). With the listing, url-mode partitions follow the
real ledgers instead of the average ledger size.

Streaming offsets are ``{"next": "L:E"}``: everything before ``next`` was covered.
``latestOffset`` is just after the topic's stable position, so a micro-batch never
holds data of an open transaction, and aborted data never appears.

Writing (``mode("append")``): rows need a ``value`` column (binary -> bytes, string ->
string, or with ``valueFormat=json`` a string parsed as JSON); ``key`` (string) and
``properties`` (map<string,string>) are optional; other columns are ignored. Exactly
once: see :mod:`txnstream.api.spark._sink` for the protocol. Options ``transactionTimeoutMs``
(600000: a job must finish within it) and ``writeBatchSize`` (2000 messages per append).
Writing through ``path`` opens an :class:`~txnstream.api.Engine` in Spark's Python workers, one
at a time (a file lock), and requires that no ``txnstream serve`` runs on that directory.

Spark runs every method here in Python worker processes: they must use an interpreter
where txnstream is installed (``PYSPARK_PYTHON``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from txnstream.api import Position

from ._common import (
    FORMAT,
    READ_COMMITTED,
    SourceOptions,
    Window,
    after,
    offset_of,
    parse_position,
    position_of,
)
from ._errors import TxnStreamSourceError
from ._path import LedgerRange, committed_reader, read_offloaded, read_range, split_window
from ._url import RemotePart, ServerClient, read_window, split_ledgers, split_listing
from ._writers import TxnStreamStreamWriter, TxnStreamWriter, check_write

try:  # PySpark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - PySpark 4.0/4.1
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Stand-in for PySpark < 4.2."""


SCHEMA = StructType(
    [
        StructField("position", StringType()),
        StructField("ledger_id", LongType()),
        StructField("entry_id", LongType()),
        StructField("key", StringType()),
        StructField("value", BinaryType()),
        StructField("value_json", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("txn", StringType()),
        StructField("publish_time", TimestampType()),
    ]
)


class TxnStreamDataSource(DataSource):
    """The ``txnstream`` data source: batch and streaming reads and writes."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def _options(self) -> SourceOptions:
        return SourceOptions.parse(dict(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_read_schema(schema)
        return TxnStreamReader(self._options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_read_schema(schema)
        return TxnStreamStreamReader(self._options())

    def writer(self, schema: StructType, overwrite: bool) -> TxnStreamWriter:
        options = check_write(self._options(), schema, overwrite)
        return TxnStreamWriter(options, uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TxnStreamStreamWriter:
        options = check_write(self._options(), schema, overwrite)
        return TxnStreamStreamWriter(options, self.options.get("checkpointlocation"))


# -- reading -------------------------------------------------------------------------


class TxnStreamPartition(InputPartition):
    """One task's share: ledger ranges ``(ledger, lo, hi)`` (path), a window (url), or
    one offloaded ledger (both)."""

    def __init__(
        self,
        ranges: list[tuple[int, int, int]] | None = None,
        window: tuple[str, str] | None = None,
        remote: tuple[str, int, int, int] | None = None,
    ) -> None:
        super().__init__((ranges, window, remote))
        self.ranges = ranges or []
        self.window = window
        self.remote = remote
        """``(object URL, ledger, lo, hi)``: an offloaded ledger read from the store."""


def _check_read_schema(schema: StructType | None) -> None:
    if schema is not None and schema.simpleString() != SCHEMA.simpleString():
        raise TxnStreamSourceError(
            f"the txnstream source has a fixed schema {SCHEMA.simpleString()}; do not pass"
            f" another one (got {schema.simpleString()})"
        )


def _bound(text: str, option: str, first: Position | None, limit: Position | None) -> Position:
    """A start or end option as a position (``latest`` is just after ``limit``)."""
    if text == "earliest":
        return first or Position(0, 0)
    if text == "latest":
        return after(limit) if limit is not None else first or Position(0, 0)
    return parse_position(text, option)


class _Planner:
    """Turns a window of positions into input partitions and reads them back."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def limits(self, scan_from: Position | None = None) -> tuple[Position | None, Position | None]:
        """``(first retained position, read limit)`` of the topic right now."""
        opts = self.options
        if opts.path is not None:
            with committed_reader(opts.path) as reader:
                view = reader.view(opts.topic, scan_from=scan_from)
            limit = (
                view.max_read_position if opts.isolation == READ_COMMITTED else view.last_confirmed
            )
            return view.first, limit
        with ServerClient(opts) as client:
            return client.limits(opts.isolation)

    def partitions(self, window: Window) -> list[TxnStreamPartition]:
        opts = self.options
        if window.empty:
            return []
        if opts.url is not None:
            with ServerClient(opts) as client:
                first, _ = client.limits(opts.isolation)
                listing = client.ledgers()
                average = client.entries_per_ledger() if listing is None else None
            if first is not None and window.start < first:  # retention trimmed the head
                window = Window(min(first, window.end), window.end)
            if listing is None:  # a server without the ledger listing
                windows = split_ledgers(window, opts.max_entries_per_partition, average)
                return [TxnStreamPartition(window=(str(w.start), str(w.end))) for w in windows]
            out = []
            for part in split_listing(
                window, listing, opts.max_entries_per_partition, opts.object_url
            ):
                if isinstance(part, RemotePart):
                    out.append(
                        TxnStreamPartition(remote=(part.url, part.ledger_id, part.lo, part.hi))
                    )
                else:
                    out.append(TxnStreamPartition(window=(str(part.start), str(part.end))))
            return out
        assert opts.path is not None
        with committed_reader(opts.path) as reader:
            tid = reader.topic_id(opts.topic)
            sizes = reader.ledger_sizes(tid)
            remote = {r.ledger_id for r in reader.offloaded(tid)}
        ranges = split_window(sizes, window, opts.max_entries_per_partition, remote)
        groups: list[list[tuple[int, int, int]]] = []
        total = 0
        for r in ranges:
            size = r.hi - r.lo
            alone = r.ledger_id in remote  # an offloaded ledger: one partition, one object
            if not groups or alone or total + size > opts.max_entries_per_partition:
                groups.append([])
                total = 0 if not alone else opts.max_entries_per_partition
            groups[-1].append((r.ledger_id, r.lo, r.hi))
            total += size
        return [TxnStreamPartition(ranges=group) for group in groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        opts = self.options
        if not isinstance(partition, TxnStreamPartition):
            return  # Spark's placeholder partition of an empty read
        if partition.remote is not None:
            url, _ledger, lo, hi = partition.remote
            yield from read_offloaded(url, lo, hi, opts.isolation)
            return
        if partition.window is not None:
            start, end = (Position.parse(p) for p in partition.window)
            with ServerClient(opts) as client:
                yield from read_window(client, Window(start, end), opts.isolation, opts.fetch_size)
            return
        assert opts.path is not None
        with committed_reader(opts.path) as reader:
            tid = reader.topic_id(opts.topic)
            for ledger_id, lo, hi in partition.ranges:
                yield from read_range(
                    reader, tid, LedgerRange(ledger_id, lo, hi), opts.isolation, opts.object_url
                )


class TxnStreamReader(DataSourceReader):
    """Batch read of ``[startingPosition, endingPosition)`` below the read limit."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        if options.starting not in ("earliest", "latest"):
            parse_position(options.starting, "startingPosition")

    def partitions(self) -> list[InputPartition]:
        planner = _Planner(self.options)
        first, limit = planner.limits()
        start = _bound(self.options.starting, "startingPosition", first, limit)
        top = after(limit) if limit is not None else start
        end = min(_bound(self.options.ending, "endingPosition", first, limit), top)
        return list(planner.partitions(Window(start, end)))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _Planner(self.options).read(partition)


class TxnStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between offsets ``{"next": "L:E"}``, never past the stable position."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._stable_hint: Position | None = None
        self._target: Position | None = None

    def _top(self, start: Position | None) -> Position:
        """Just after the current read limit (never before ``start``)."""
        planner = _Planner(self.options)
        scan_from = self._stable_hint if self.options.isolation == READ_COMMITTED else None
        first, limit = planner.limits(scan_from)
        if limit is not None:
            self._stable_hint = limit
        top = after(limit) if limit is not None else (first or Position(0, 0))
        if start is not None and top < start:
            top = start
        return top

    def initialOffset(self) -> dict[str, str]:
        starting = self.options.starting
        if starting == "earliest":
            return offset_of(Position(0, 0))
        if starting == "latest":
            return offset_of(self._top(None))
        return offset_of(parse_position(starting, "startingPosition"))

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_entries_per_trigger is not None and ReadMaxRows is not None:
            return ReadMaxRows(self.options.max_entries_per_trigger)
        return super().getDefaultReadLimit()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._top(None)

    def latestOffset(
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, str]:
        begin = None if start is None else position_of(start)
        end = self._top(begin)
        if self._target is not None:  # Trigger.AvailableNow: nothing past the target
            end = min(end, self._target)
            if begin is not None:
                end = max(end, begin)
        max_rows = getattr(limit, "max_rows", None)
        if begin is not None and isinstance(max_rows, int) and max_rows > 0 and end > begin:
            end = min(end, self._position_after(begin, max_rows))
        return offset_of(end)

    def _position_after(self, start: Position, count: int) -> Position:
        opts = self.options
        if opts.path is not None:
            with committed_reader(opts.path) as reader:
                nth = reader.nth_position(reader.topic_id(opts.topic), start, count)
            return nth if nth is not None else Position(2**62, 0)
        with ServerClient(opts) as client:
            return client.position_after(start, count, opts.isolation)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        window = Window(position_of(start), position_of(end))
        return list(_Planner(self.options).partitions(window))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _Planner(self.options).read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the checkpoint is the truth."""
