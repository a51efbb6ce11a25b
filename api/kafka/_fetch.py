"""ListOffsets and Fetch: offsets, read_committed up to the last stable offset, long polls."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

from kafka.protocol.consumer import (
    FetchResponse,
    ListOffsetsResponse,
)

from txnstream.api import (
    EngineError,
    FetchResult,
    TopicOffsets,
)

from ._base import BrokerBase
from ._codes import ErrorCode, code_of
from ._records import build_batches, producer_id_of, timestamp_ms
from ._session import may

log = logging.getLogger("txnstream.kafka")

_EARLIEST, _LATEST = -2, -1
_READ_COMMITTED = 1
_FETCH_ENTRIES = 10_000  # the most entries one partition's fetch reads (the engine's most)
_MAX_WAIT_MS = 30_000  # a longer long poll is cut here (clients ask for ~0.1-1 s)
# Building fetched entries into record batches takes ~1-2 us an entry (the codec is
# compiled; reading each entry's fields is Python): it runs on the loop in slices of this
# many (~2-3 ms each), letting it run in between. (A worker thread would cost a wake-up
# per fetch, which on a busy machine took longer than the build.)
_BUILD_SLICE = 2000


class FetchApi(BrokerBase):
    """ListOffsets and Fetch (a part of the broker)."""

    async def list_offsets(self, request: Any, version: int) -> Any:
        committed = version >= 2 and request.isolation_level == _READ_COMMITTED
        topics = []
        for topic in request.topics:
            partitions = []
            for part in topic.partitions:
                error, offset, timestamp = ErrorCode.NONE, -1, -1
                try:
                    target = self._partition(topic.name, part.partition_index)
                    offsets = self._offsets(topic.name if target is None else target)
                    if not may("consume", topic.name):
                        error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    elif target is None:
                        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif part.timestamp == _EARLIEST:
                        offset = offsets.log_start
                    elif part.timestamp == _LATEST:
                        offset = offsets.last_stable if committed else offsets.high_watermark
                    elif part.timestamp >= 0:
                        end = offsets.last_stable if committed else offsets.high_watermark
                        offset, timestamp = await self._offset_at_time(
                            target, part.timestamp, offsets.log_start, end
                        )
                    else:
                        error = ErrorCode.INVALID_REQUEST  # (max timestamp, -3, is not served)
                except EngineError as exc:
                    error = code_of(exc)
                partitions.append(
                    ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse(
                        partition_index=part.partition_index,
                        error_code=error,
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=0,
                    )
                )
            topics.append(
                ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions)
            )
        return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

    async def _offset_at_time(
        self, topic: str, timestamp: int, start: int, end: int
    ) -> tuple[int, int]:
        """The first offset in ``[start, end)`` whose entry was stored at or after
        ``timestamp`` (ms) and that entry's time; ``(-1, -1)`` if none.

        A binary search reading one entry per step (~log2 of the log's length reads):
        entries get their time when stored, so the times rise with the offsets (a clock
        stepping back makes the answer one of the entries at that time, not the first).
        """
        low, high = start, end
        found = (-1, -1)
        while low < high:
            middle = (low + high) // 2
            stored = await self._time_at(topic, middle)
            if stored is None:
                break  # retention took it meanwhile: what was found stands
            if stored >= timestamp:
                found, high = (middle, stored), middle
            else:
                low = middle + 1
        return found

    async def _time_at(self, topic: str, offset: int) -> int | None:
        position = self.engine.position_at(topic, offset)
        if position is None:
            return None
        result = await self.engine.fetch(topic, position, max=1, isolation="read_uncommitted")
        if not result.entries or result.entries[0].position != position:
            return None
        return timestamp_ms(result.entries[0].publish_time)

    async def fetch(self, request: Any, version: int) -> Any:
        committed = request.isolation_level == _READ_COMMITTED
        wanted = [
            (topic.topic, part.partition, part.fetch_offset, part.partition_max_bytes)
            for topic in request.topics
            for part in topic.partitions
        ]
        deadline = time.monotonic() + min(max(request.max_wait_ms, 0), _MAX_WAIT_MS) / 1000
        while True:
            # the change events first: an append after the reads below still wakes us
            events = [self._watch(name, partition) for name, partition, *_ in wanted]
            answers, size = await self._fetch_all(wanted, committed, request.max_bytes)
            remaining = deadline - time.monotonic()
            if size >= max(request.min_bytes, 1) or remaining <= 0 or self._drain.is_set():
                break
            waits = [e for e in events if e is not None]
            if not waits:
                break
            await _first_of([*waits, self._drain], remaining)
        topics: dict[str, list[Any]] = {}
        for name, partition in answers:
            topics.setdefault(name, []).append(partition)
        return FetchResponse(
            throttle_time_ms=0,
            error_code=0,
            session_id=0,  # no fetch sessions: every fetch names its partitions
            responses=[
                FetchResponse.FetchableTopicResponse(topic=name, partitions=parts)
                for name, parts in topics.items()
            ],
        )

    def _watch(self, topic: str, partition: int) -> asyncio.Event | None:
        target = self._partition(topic, partition)
        if target is None:
            return None
        try:
            return self.engine.watch(target)
        except EngineError:
            return None

    async def _fetch_all(
        self, wanted: list[tuple[str, int, int, int]], committed: bool, max_bytes: int
    ) -> tuple[list[tuple[str, Any]], int]:
        answers = []
        total = 0
        for name, partition, offset, partition_max in wanted:
            budget = min(partition_max, max_bytes - total)
            answer, size = await self._fetch_partition(
                name, partition, offset, committed, budget if total == 0 else max(budget, 0)
            )
            total += size
            answers.append((name, answer))
        return answers, total

    async def _fetch_partition(
        self, topic: str, partition: int, offset: int, committed: bool, budget: int
    ) -> tuple[Any, int]:
        part = FetchResponse.FetchableTopicResponse.PartitionData
        error, records = ErrorCode.NONE, b""
        aborted: list[Any] = []
        offsets = TopicOffsets(-1, -1, -1)
        try:
            if not may("consume", topic):
                raise _PartitionError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            target = self._partition(topic, partition)
            if target is None:
                raise _PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            topic = target  # (a partitioned topic's partition i: its topic, from here on)
            offsets = self._offsets(topic)
            limit = offsets.last_stable if committed else offsets.high_watermark
            if offset < offsets.log_start or offset > offsets.high_watermark:
                raise _PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE)
            if offset < limit and budget > 0:
                records, aborted = await self._read(topic, offset, committed, budget)
        except _PartitionError as exc:
            error = exc.code
        except EngineError as exc:
            error = code_of(exc)
        answer = part(
            partition_index=partition,
            error_code=error,
            high_watermark=offsets.high_watermark,
            last_stable_offset=offsets.last_stable,
            log_start_offset=offsets.log_start,
            aborted_transactions=aborted if committed else None,
            preferred_read_replica=-1,
            records=records,
        )
        return answer, len(records)

    async def _read(
        self, topic: str, offset: int, committed: bool, budget: int
    ) -> tuple[bytes, list[Any]]:
        engine = self.engine
        position = engine.position_at(topic, offset)
        if position is None:
            raise _PartitionError(ErrorCode.OFFSET_OUT_OF_RANGE)
        result: FetchResult = await engine.fetch(
            topic,
            position,
            max=_FETCH_ENTRIES,
            isolation="read_committed" if committed else "read_uncommitted",
            max_bytes=budget,
        )
        if not result.entries:
            return b"", []
        entries = result.entries
        first = engine.offset_of(topic, entries[0].position)
        if engine.offset_of(topic, entries[-1].position) == first + len(entries) - 1:
            offsets: Sequence[int] = range(first, first + len(entries))  # contiguous, as always
        else:  # (a range cannot skip an entry; should one ever, map each)
            offsets = [engine.offset_of(topic, entry.position) for entry in entries]
        parts = []
        for start in range(0, len(entries), _BUILD_SLICE):
            if start:
                await asyncio.sleep(0)
            end = start + _BUILD_SLICE  # (a run cut here is two batches: fine in Kafka)
            parts.append(build_batches(entries[start:end], offsets[start:end]))
        records = b"".join(parts)
        aborted_type = FetchResponse.FetchableTopicResponse.PartitionData.AbortedTransaction
        aborted = [
            aborted_type(
                producer_id=producer_id_of(a.txn),
                first_offset=engine.offset_of(topic, a.first_position),
            )
            for a in result.aborted
        ]
        return records, aborted


class _PartitionError(Exception):
    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


async def _first_of(events: list[asyncio.Event], timeout: float) -> None:
    """Wait until one of ``events`` is set or ``timeout`` seconds pass."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
