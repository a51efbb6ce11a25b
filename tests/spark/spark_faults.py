"""A txnstream data source whose writing tasks fail on purpose (for the retry tests).

Spark pickles the registered class into its Python workers, which cannot import this
test module: the tests register it with ``cloudpickle.register_pickle_by_value``.

Options: ``failMode`` ``raise`` (first attempt raises), ``exit`` (first attempt's worker
dies with ``os._exit``) or ``always`` (every attempt raises: the job fails), and
``failPartition``. The failure strikes when the second Arrow batch is pulled, so the
first batch has already been appended in the attempt's transaction.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from pyspark import TaskContext
from pyspark.sql.types import StructType

from txnstream.api.spark import TxnStreamDataSource
from txnstream.api.spark._writers import TxnCommitMessage, TxnStreamWriter


class FaultyWriter(TxnStreamWriter):
    def __init__(self, base: TxnStreamWriter, mode: str, partition: int) -> None:
        super().__init__(base.options, base.job_id)
        self.mode = mode
        self.fail_partition = partition

    def write(self, iterator: Iterator[Any]) -> TxnCommitMessage:
        context = TaskContext.get()
        assert context is not None
        strike = context.partitionId() == self.fail_partition and (
            self.mode == "always" or context.attemptNumber() == 0
        )

        def guarded() -> Iterator[Any]:
            for index, batch in enumerate(iterator):
                if strike and index == 1:
                    if self.mode == "exit":
                        os._exit(17)
                    raise RuntimeError("injected failure of a writing task")
                yield batch

        return super().write(guarded())


class FaultyDataSource(TxnStreamDataSource):
    @classmethod
    def name(cls) -> str:
        return "txnstream_faulty"

    def writer(self, schema: StructType, overwrite: bool) -> TxnStreamWriter:
        base = super().writer(schema, overwrite)
        return FaultyWriter(base, self.options["failmode"], int(self.options["failpartition"]))
