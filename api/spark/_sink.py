"""Exactly-once writes of the Spark data source: the protocol, over HTTP or an engine.

The protocol (what makes a Spark write exactly once even when tasks fail, are killed
and retried):

* every task *attempt* that has rows begins its own transaction labelled
  ``<job prefix><partition>:<attempt>`` and appends its rows in it; it never commits;
  its commit message names the transaction;
* the driver's ``commit(messages)`` gets one message per partition, from the winning
  attempts only; it lists the open transactions of the job by label prefix and calls
  the engine's atomic ``finish``: commit the winners, abort every other one (failed or
  killed attempts, speculative losers). Either all of it takes effect or none of it;
* ``abort()`` (a failed job) aborts every open transaction of the job by label prefix;
  whatever it misses (an attempt still running) times out, so nothing of a failed job
  is ever visible;
* a streaming micro-batch passes ``idempotence_key = "<query id>:<batch id>"`` to
  ``finish``: a micro-batch replayed after a restart finds its key used and all its new
  transactions are aborted instead, so it never lands twice.

Two backends carry it: :class:`~txnstream.api.spark._url.ServerClient` (``url``) and
:class:`EngineSink` (``path``), an :class:`~txnstream.api.Engine` opened in the calling process.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import time
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TypeVar

from txnstream.api import (
    Engine,
    EngineConfig,
    EngineError,
    OutgoingMessage,
    TopicNotFoundError,
)

from ._common import SourceOptions
from ._errors import TxnStreamSourceError
from ._path import database_file
from ._url import ServerClient

T = TypeVar("T")
Message = tuple[str | None, Any, dict[str, str] | None]
LOCK_FILE = "spark-writer.lock"
_MAX_REQUEST_BYTES = 8 * 1024 * 1024


class Sink(Protocol):
    """What the write protocol needs from a backend."""

    def check_topic(self) -> None: ...

    def begin(self, label: str, timeout_ms: int) -> str: ...

    def send(self, txn: str, messages: Sequence[Message]) -> None: ...

    def open_txns(self, label_prefix: str) -> list[str]: ...

    def finish(self, commit: Sequence[str], abort: Sequence[str], key: str | None) -> bool: ...

    def close(self) -> None: ...


class EngineSink:
    """An :class:`~txnstream.api.Engine` on the ``path`` data directory, in this process.

    One engine per data directory: an exclusive ``flock`` on ``<path>/spark-writer.lock``
    serializes Spark's writing tasks and the driver's commit on one machine. A
    ``txnstream serve`` running on the same directory is NOT detected by it: writing
    through ``path`` requires that no server runs on that directory (use ``url`` then).
    """

    def __init__(self, options: SourceOptions) -> None:
        assert options.path is not None
        database_file(options.path)  # a clear error before Engine.open would create one
        self.topic = options.topic
        self.where = options.where
        lock_path = Path(options.path) / LOCK_FILE
        self._lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            self._loop = asyncio.new_event_loop()
            try:
                self._engine = self._loop.run_until_complete(_open_engine(options.path))
            except BaseException:
                self._loop.close()
                raise
        except BaseException:
            os.close(self._lock)
            raise

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return self._loop.run_until_complete(coro)
        except TopicNotFoundError:
            raise TxnStreamSourceError(f"topic {self.topic!r} not found in {self.where}") from None
        except EngineError as exc:
            raise TxnStreamSourceError(f"{type(exc).__name__}: {exc} ({self.where})") from None

    def __enter__(self) -> EngineSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def check_topic(self) -> None:
        self._run(self._engine.stats(self.topic))

    def begin(self, label: str, timeout_ms: int) -> str:
        txn = self._run(self._engine.begin(timeout=timeout_ms / 1000, label=label))
        return txn.id

    def send(self, txn: str, messages: Sequence[Message]) -> None:
        outgoing = [OutgoingMessage(value, key, props or {}) for key, value, props in messages]
        self._run(self._engine.produce(self.topic, outgoing, txn=txn))

    def open_txns(self, label_prefix: str) -> list[str]:
        infos = self._run(self._engine.transactions(state="open", label_prefix=label_prefix))
        return [str(info.txn) for info in infos]

    def finish(self, commit: Sequence[str], abort: Sequence[str], key: str | None) -> bool:
        result = self._run(self._engine.finish(commit=commit, abort=abort, idempotence_key=key))
        return bool(result.duplicate)

    def close(self) -> None:
        if self._lock < 0:
            return
        try:
            self._loop.run_until_complete(self._engine.close())
        finally:
            self._loop.close()
            os.close(self._lock)  # releases the flock
            self._lock = -1


async def _open_engine(path: str) -> Engine:
    engine: Engine = await Engine.open(path, EngineConfig())
    return engine


def open_sink(options: SourceOptions) -> Sink:
    """The backend for ``options``: HTTP for ``url``, an in-process engine for ``path``."""
    if options.url is not None:
        return ServerClient(options)
    return EngineSink(options)


# -- rows to messages ----------------------------------------------------------------


def batch_messages(batch: Any, value_format: str) -> list[Message]:
    """The messages of an Arrow record batch with a ``value`` column (and optional
    ``key`` and ``properties``). Other columns are ignored."""
    names = [name.lower() for name in batch.schema.names]  # Spark's names are case-blind
    n = batch.num_rows
    values: list[Any] = batch.column(names.index("value")).to_pylist()
    if value_format == "json":
        parsed: list[Any] = []
        for text in values:
            if text is None:
                parsed.append(None)
                continue
            try:
                parsed.append(json.loads(text))
            except (TypeError, ValueError) as exc:
                raise TxnStreamSourceError(
                    f"valueFormat is 'json' but a value is not JSON text ({exc}): {text!r:.200}"
                ) from None
        values = parsed
    keys: list[str | None] = (
        batch.column(names.index("key")).to_pylist() if "key" in names else [None] * n
    )
    if "properties" in names:
        props = [
            None if p is None else dict(p)
            for p in batch.column(names.index("properties")).to_pylist()
        ]
    else:
        props = [None] * n
    return list(zip(keys, values, props, strict=True))


def _size(message: Message) -> int:
    key, value, props = message
    size = 64 + (len(key) if key else 0)
    if isinstance(value, bytes | str):
        size += len(value) * 2
    else:
        size += 256
    if props:
        size += sum(len(k) + len(v) + 8 for k, v in props.items())
    return size


def chunks(messages: Sequence[Message], count: int) -> Iterator[Sequence[Message]]:
    """Slices of at most ``count`` messages and roughly 8 MiB on the wire."""
    start = 0
    while start < len(messages):
        end, size = start, 0
        while end < len(messages) and end - start < count:
            size += _size(messages[end])
            if size > _MAX_REQUEST_BYTES and end > start:
                break
            end += 1
        yield messages[start:end]
        start = end


def write_rows(
    options: SourceOptions, label: str, batches: Iterable[Any]
) -> tuple[str | None, int]:
    """Append every row of ``batches`` in one new transaction labelled ``label``.

    Returns the transaction id (None if there were no rows) and the row count. The
    transaction stays open: the driver decides it (see the module docstring).
    """
    sink: Sink | None = None
    txn: str | None = None
    rows = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            messages = batch_messages(batch, options.value_format)
            for chunk in chunks(messages, options.write_batch):
                if sink is None:
                    sink = open_sink(options)
                if txn is None:
                    txn = sink.begin(label, options.txn_timeout_ms)
                sink.send(txn, chunk)
            rows += len(messages)
    except BaseException:
        # This attempt lost: abort its transaction now rather than at the driver's
        # decision, so that it stops holding back the topic's stable position. (A
        # killed worker cannot; the driver's commit or abort, or the timeout, does.)
        if sink is not None and txn is not None:
            try:
                sink.finish([], [txn], None)
            except TxnStreamSourceError:
                pass
        raise
    finally:
        if sink is not None:
            sink.close()
    return txn, rows


def commit_job(
    options: SourceOptions, label_prefix: str, winners: Sequence[str], key: str | None
) -> bool:
    """Commit ``winners`` and abort every other open transaction of the job, atomically.

    Returns True if ``key`` was used before (then everything listed was aborted).
    """
    sink = open_sink(options)
    try:
        chosen = set(winners)
        losers = [t for t in sink.open_txns(label_prefix) if t not in chosen]
        try:
            return sink.finish(list(winners), losers, key)
        except TxnStreamSourceError as exc:
            _abort_all(sink, label_prefix)
            raise TxnStreamSourceError(
                f"the write could not be committed and nothing of it is visible: {exc}"
                " (a task's transaction may have timed out: raise the option"
                " transactionTimeoutMs)"
            ) from None
    finally:
        sink.close()


def abort_job(options: SourceOptions, label_prefix: str) -> None:
    """Abort every open transaction of the job (a failed job leaves nothing visible)."""
    sink = open_sink(options)
    try:
        _abort_all(sink, label_prefix)
    finally:
        sink.close()


def _abort_all(sink: Sink, label_prefix: str) -> None:
    for _ in range(3):
        txns = sink.open_txns(label_prefix)
        if not txns:
            return
        try:
            sink.finish([], txns, None)
            return
        except TxnStreamSourceError:
            time.sleep(0.1)  # one of them ended meanwhile: list again


def checkpoint_query_id(checkpoint: str | None) -> str | None:
    """The query id stored in a local streaming checkpoint's ``metadata`` file."""
    if not checkpoint:
        return None
    path = checkpoint.removeprefix("file://").removeprefix("file:")
    if "://" in path:
        return None
    try:
        with open(Path(path) / "metadata", encoding="utf-8") as handle:
            first = handle.readline()
        query_id = json.loads(first).get("id")
    except (OSError, ValueError, AttributeError):
        return None
    return str(query_id) if query_id else None
