"""The writing side of the Spark data source: schema checks and the exactly-once writers.

Each task attempt appends its rows in its own open transaction and names it in its
commit message; the driver decides them all at once (the protocol:
:mod:`txnstream.api.spark._sink`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter
except ImportError as exc:  # pragma: no cover - PySpark 4.0
    raise ImportError(
        "the txnstream Spark data source needs PySpark >= 4.1 (DataSourceStreamArrowWriter)"
    ) from exc
from pyspark.sql.types import BinaryType, DataType, MapType, NullType, StringType, StructType

from ._common import SourceOptions
from ._errors import TxnStreamSourceError
from ._path import committed_reader
from ._sink import abort_job, checkpoint_query_id, commit_job, write_rows
from ._url import ServerClient


def _is_type(data_type: DataType, *types: type[DataType]) -> bool:
    return isinstance(data_type, types)


def check_write(options: SourceOptions, schema: StructType, overwrite: bool) -> SourceOptions:
    """``options`` if a DataFrame of ``schema`` can be written with them, else a clear error."""
    if overwrite:
        raise TxnStreamSourceError(
            "the txnstream sink only appends: use mode('append') (a topic cannot be overwritten)"
        )
    fields = {field.name.lower(): field.dataType for field in schema.fields}
    if "value" not in fields:
        raise TxnStreamSourceError(
            "the DataFrame has no 'value' column; writing to txnstream needs a 'value' column"
            " (binary or string), optional 'key' (string) and 'properties'"
            f" (map<string,string>); columns found: {', '.join(schema.names) or 'none'}"
        )
    value_type = fields["value"]
    if options.value_format == "json":
        if not _is_type(value_type, StringType, NullType):
            raise TxnStreamSourceError(
                f"with valueFormat 'json' the 'value' column must be a string of JSON text, not"
                f" {value_type.simpleString()}"
            )
    elif not _is_type(value_type, BinaryType, StringType, NullType):
        raise TxnStreamSourceError(
            f"the 'value' column must be binary or string, not {value_type.simpleString()}"
            " (serialize it first, e.g. with to_json(), and use valueFormat 'json')"
        )
    if "key" in fields and not _is_type(fields["key"], StringType, NullType):
        raise TxnStreamSourceError(
            f"the 'key' column must be a string, not {fields['key'].simpleString()}"
        )
    props = fields.get("properties")
    if props is not None and not (
        isinstance(props, NullType)
        or (
            isinstance(props, MapType)
            and isinstance(props.keyType, StringType)
            and isinstance(props.valueType, StringType)
        )
    ):
        raise TxnStreamSourceError(
            f"the 'properties' column must be map<string,string>, not {props.simpleString()}"
        )
    _check_target(options)
    return options


def _check_target(options: SourceOptions) -> None:
    """A clear error now (on the driver) for a bad path/url or a missing topic."""
    if options.path is not None:
        with committed_reader(options.path) as reader:
            reader.topic_id(options.topic)
    else:
        with ServerClient(options) as client:
            client.check_topic()


class TxnCommitMessage(WriterCommitMessage):
    """What a task attempt wrote: its open transaction (None if it had no rows)."""

    def __init__(
        self,
        txn: str | None,
        partition: int,
        attempt: int,
        rows: int,
        query_id: str | None = None,
        batch_id: str | None = None,
    ) -> None:
        self.txn = txn
        self.partition = partition
        self.attempt = attempt
        self.rows = rows
        self.query_id = query_id
        self.batch_id = batch_id

    def __repr__(self) -> str:
        return (
            f"TxnCommitMessage(txn={self.txn!r}, partition={self.partition},"
            f" attempt={self.attempt}, rows={self.rows})"
        )


def _task() -> tuple[int, int, Any]:
    context = TaskContext.get()
    if context is None:  # not in a Spark task (direct calls in tests)
        return 0, 0, None
    return context.partitionId(), context.attemptNumber(), context


class TxnStreamWriter(DataSourceArrowWriter):
    """Batch write, exactly once: one transaction per task attempt, decided by the driver."""

    def __init__(self, options: SourceOptions, job_id: str) -> None:
        self.options = options
        self.job_id = job_id

    @property
    def label_prefix(self) -> str:
        return f"spark:{self.job_id}:"

    def write(self, iterator: Iterator[Any]) -> TxnCommitMessage:
        partition, attempt, _ = _task()
        label = f"{self.label_prefix}{partition}:{attempt}"
        txn, rows = write_rows(self.options, label, iterator)
        return TxnCommitMessage(txn, partition, attempt, rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        winners = [m.txn for m in messages if isinstance(m, TxnCommitMessage) and m.txn]
        commit_job(self.options, self.label_prefix, winners, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_job(self.options, self.label_prefix)


class TxnStreamStreamWriter(DataSourceStreamArrowWriter):
    """Streaming write, exactly once across restarts: ``finish`` with the idempotence
    key ``"<query id>:<batch id>"`` makes a replayed micro-batch abort instead of land."""

    def __init__(self, options: SourceOptions, checkpoint: str | None) -> None:
        self.options = options
        self.checkpoint = checkpoint

    @staticmethod
    def label_prefix(query_id: str, batch_id: int | str) -> str:
        return f"spark-stream:{query_id}:{batch_id}:"

    def write(self, iterator: Iterator[Any]) -> TxnCommitMessage:
        partition, attempt, context = _task()
        query_id = batch_id = None
        if context is not None:
            query_id = context.getLocalProperty("sql.streaming.queryId")
            batch_id = context.getLocalProperty("streaming.sql.batchId")
        if query_id is None:
            query_id = checkpoint_query_id(self.checkpoint) or "unknown-query"
        label = f"{self.label_prefix(query_id, batch_id or 'unknown')}{partition}:{attempt}"
        txn, rows = write_rows(self.options, label, iterator)
        return TxnCommitMessage(txn, partition, attempt, rows, query_id, batch_id)

    def _query_id(self, messages: list[WriterCommitMessage | None]) -> str | None:
        for message in messages:
            if isinstance(message, TxnCommitMessage) and message.query_id:
                return message.query_id
        return checkpoint_query_id(self.checkpoint)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_id = self._query_id(messages)
        winners = [m.txn for m in messages if isinstance(m, TxnCommitMessage) and m.txn]
        if query_id is None:
            if not winners:
                return
            raise TxnStreamSourceError(
                f"micro-batch {batchId}: the streaming query id is unknown, so the write cannot"
                " be made exactly once; nothing of it was committed"
            )
        commit_job(
            self.options, self.label_prefix(query_id, batchId), winners, f"{query_id}:{batchId}"
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        query_id = self._query_id(messages)
        if query_id is not None:
            abort_job(self.options, self.label_prefix(query_id, batchId))
