"""The group-commit writer with flushes pipelined (``Store.pipeline_depth`` 2, as the
PostgreSQL store runs it), driven by hypothesis against a scripted store.

The scripted store keeps the promise a pipelining store makes: answers come in the
order flushes were sent, and a flush sent behind one that did not commit does not
commit either. The script decides each answer (committed, a transient failure, a
permanent one) and interleaves submissions, loop turns and retries. After every step
the writer's invariants hold (``Store._check``), and at the end:

* what is stored is exactly the submissions acknowledged, plus perhaps some whose
  waiters heard of the failure, in submission order, each once;
* every acknowledged submission is stored; ``on_durable`` callbacks ran in order, once;
* after a permanent failure, every waiter not acknowledged got an error.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import txnstream.ledger._store as store_module
from txnstream.ledger import EngineFailedError, StorageMetrics, Store, WriteBatch

pytestmark = pytest.mark.timeout(120)


class _Transient(Exception):
    """Did not commit; safe to apply again."""


class _Permanent(Exception):
    """Did not commit; the store fails."""


class _Scripted(Store):
    """A store whose writer answers as the script says (see the module docstring)."""

    pipeline_depth = 2
    kick_at_once = True

    def __init__(self) -> None:
        super().__init__(None, max_pending_entries=1_000)
        self.stored: list[int] = []
        self.sent: deque[list[int]] = deque()  # the values of each flush sent, unanswered
        self.broken = False  # the last flush answered did not commit: those behind fail

    def _hop(self, batch: WriteBatch) -> None:
        self.sent.append([int(row[0]) for _, rows in batch.ops for row in rows])

    def answer(self, outcome: str) -> None:
        """Answer the oldest flush sent: ``ok``, ``transient`` or ``permanent``."""
        values = self.sent.popleft()
        if self.broken or outcome != "ok":
            self.broken = bool(self.sent)  # those behind it cannot commit
            self._hopped(_Permanent("no") if outcome == "permanent" else _Transient("no"))
            return
        self.stored.extend(values)
        self._hopped(None)

    def _transient(self, exc: BaseException) -> bool:
        return isinstance(exc, _Transient)

    async def _close_connections(self) -> None:
        return

    def storage_metrics(self) -> StorageMetrics:
        return StorageMetrics(0, 0)


_Scripted.__abstractmethods__ = frozenset()  # (the reads are not this test's)

_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.booleans()),
        st.tuples(st.just("answer"), st.sampled_from(["ok", "ok", "ok", "transient", "permanent"])),
        st.tuples(st.just("turn"), st.just(True)),
    ),
    max_size=60,
)


@given(_STEPS)
def test_pipelined_flushes_store_a_prefix_in_order_and_acknowledge_only_what_is_stored(
    steps: list[tuple[str, Any]],
) -> None:
    asyncio.run(_run(steps))


async def _run(steps: list[tuple[str, Any]]) -> None:
    saved = store_module._RETRY_DELAYS
    store_module._RETRY_DELAYS = (0.0,) * len(saved)  # retries at the next loop turns
    try:
        await _script(steps)
    finally:
        store_module._RETRY_DELAYS = saved


async def _script(steps: list[tuple[str, Any]]) -> None:
    store = _Scripted()
    published: list[int] = []
    waiters: list[tuple[list[int], asyncio.Future[None]]] = []
    submitted: list[int] = []
    pending: list[int] = []  # submitted without a waiter since the last waited-for one

    def submit(wait: bool) -> None:
        n = len(submitted)
        batch = WriteBatch()
        batch.add("INSERT", (n,))
        batch.entries = 1
        batch.on_durable(lambda: published.append(n))
        submitted.append(n)
        pending.append(n)
        future = store.submit(batch, wait=wait)
        if future is not None:
            waiters.append((list(pending), future))
            pending.clear()

    for action, arg in steps:
        if store.failure is None and action == "submit":
            submit(arg)
        elif action == "answer" and store.sent:
            store.answer(arg)
        else:
            await asyncio.sleep(0)
        store._check()
    # the end: everything answered as committed until the queue is empty
    if store.failure is None:
        submit(True)
    for _ in range(200):
        await asyncio.sleep(0)
        while store.sent:
            store.answer("ok")
            store._check()
        if not store._inflight and store._unanswered == 0 and not store.sent:
            break
    await store.close()
    store._check()

    assert store.stored == sorted(set(store.stored)), "stored out of order or twice"
    assert published == store.stored, "callbacks ran for exactly what is stored, in order"
    for values, future in waiters:
        assert future.done()
        if future.exception() is None:
            assert set(values) <= set(store.stored), "acknowledged, not stored"
        else:
            assert isinstance(future.exception(), EngineFailedError)
    if store.failure is None:
        assert store.stored == submitted, "a store that did not fail stores everything"
    else:
        # what is stored is a prefix of what was submitted
        assert store.stored == submitted[: len(store.stored)]


def test_a_second_flush_goes_while_the_first_is_in_flight_and_answers_after_it() -> None:
    async def main() -> None:
        store = _Scripted()
        first, second = WriteBatch(), WriteBatch()
        first.add("INSERT", (0,))
        second.add("INSERT", (1,))
        a = store.submit(first)
        b = store.submit(second)  # submitted while the first is in flight
        assert a is not None
        assert b is not None
        assert a is not b
        assert list(store.sent) == [[0], [1]]  # both went: the second did not wait
        store.answer("ok")
        await asyncio.sleep(0)
        assert a.done()
        assert not b.done()
        store.answer("ok")
        await asyncio.sleep(0)
        assert b.done()
        assert store.stored == [0, 1]
        store._check()
        await store.close()

    asyncio.run(main())


def test_a_flush_behind_one_that_failed_goes_again_after_it() -> None:
    async def main() -> None:
        saved = store_module._RETRY_DELAYS
        store_module._RETRY_DELAYS = (0.0,) * len(saved)
        try:
            store = _Scripted()
            batches = [WriteBatch(), WriteBatch()]
            for n, batch in enumerate(batches):
                batch.add("INSERT", (n,))
            futures = [store.submit(batch) for batch in batches]
            store.answer("transient")  # the first did not commit ...
            store.answer("ok")  # ... so neither does the second (the store's promise)
            assert store.stored == []
            for _ in range(10):
                await asyncio.sleep(0)
            assert list(store.sent) == [[0], [1]]  # both again, in order
            store.answer("ok")
            store.answer("ok")
            await asyncio.sleep(0)
            assert store.stored == [0, 1]
            assert all(f is not None and f.done() and f.exception() is None for f in futures)
            await store.close()
        finally:
            store_module._RETRY_DELAYS = saved

    asyncio.run(main())
