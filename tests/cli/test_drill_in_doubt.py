"""How the crash drill's workload records a commit whose outcome it cannot know.

An active that loses its lease (or its storage) while a commit is in flight answers 503
``unavailable`` without the standby header: the decision may already be durable, and
the successor then finishes it. The drill must count such a commit as in doubt and let
the server's final word decide, never as "not committed" (a committed transaction would
then look like a leak of aborted data) nor as "committed" (a lost one would look fine).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from rich.console import Console

from txnstream.api.cli.drills._history import (
    History,
    LogEntry,
    Pos,
    Sent,
    ServerTxn,
    TxnRun,
    check_history,
)
from txnstream.api.cli.drills._workload import Workload
from txnstream.api.client import TxnStreamHttpError, TxnStreamTransportError

pytestmark = pytest.mark.timeout(30)


class _Answers:
    """A client whose begin and sends succeed and whose commit ends as ``outcome``."""

    def __init__(self, outcome: BaseException | None) -> None:
        self.outcome = outcome

    async def begin(self, **_: Any) -> dict[str, Any]:
        return {"txn": "txn-1"}

    async def produce(self, *_: Any, **__: Any) -> None:
        return None

    async def commit(self, _txn: str) -> None:
        if self.outcome is not None:
            raise self.outcome


def _run(outcome: BaseException | None) -> tuple[History, TxnRun]:
    history = History()
    workload = Workload(
        None,  # type: ignore[arg-type]  # (only _one_txn runs: it uses the client given)
        history,
        run="r",
        topics=["t"],
        seed=1,
        duration=0,
        kills=0,
        producers=1,
        err=Console(stderr=True, quiet=True),
    )
    run = TxnRun("r.w0.1", 0, 1, "commit")
    groups = {"t": [Sent(f"r.w0.1.{i}", "t", "w0", (1, i), run) for i in range(3)]}
    asyncio.run(workload._one_txn(_Answers(outcome), run, groups))  # type: ignore[arg-type]
    return history, run


def _in_doubt_check(history: History, run: TxnRun, state: str, present: int) -> bool:
    """The in-doubt check's verdict when the server lists ``run`` in ``state`` and the
    final fetch holds the first ``present`` of its messages."""
    history.server_txns = {"txn-1": ServerTxn(run.key, state)}
    history.log_entries = {
        "t": [LogEntry(Pos(1, i), m.id, "txn-1") for i, m in enumerate(run.messages[:present])]
    }
    checks = {c.name: c for c in check_history(history, [])}
    assert checks["no aborted/abandoned message in final fetch"].ok
    return checks["in-doubt commits all-or-nothing, as the server decided"].ok


@pytest.mark.parametrize(
    "answer",
    [
        TxnStreamHttpError("storage failed: the lease was taken over", 503, "unavailable"),
        TxnStreamTransportError("the connection broke after the request was sent", True),
    ],
    ids=["503-from-the-active", "answer-lost"],
)
def test_a_commit_without_a_known_outcome_is_in_doubt_and_the_server_decides(
    answer: BaseException,
) -> None:
    history, run = _run(answer)
    assert run.outcome == "unknown"
    assert history.unexpected == []  # a failover's in-flight commit is not an anomaly
    # whichever way the server decided, all of it or none of it is the right answer
    assert _in_doubt_check(history, run, "committed", 3)
    assert _in_doubt_check(history, run, "aborted", 0)
    # and a decision the log does not match is caught
    assert not _in_doubt_check(history, run, "committed", 0)
    assert not _in_doubt_check(history, run, "aborted", 3)
    assert not _in_doubt_check(history, run, "committed", 2)


def test_a_commit_refused_as_not_open_is_not_committed() -> None:
    history, run = _run(TxnStreamHttpError("transaction txn-1 is not open", 409, "txn_not_open"))
    assert (run.outcome, run.reason) == ("abandoned", "commit rejected (409)")
    history.server_txns = {"txn-1": ServerTxn(run.key, "aborted")}
    history.log_entries = {"t": [LogEntry(Pos(1, 0), run.messages[0].id, "txn-1")]}
    checks = {c.name: c for c in check_history(history, [])}
    assert not checks["no aborted/abandoned message in final fetch"].ok


def test_a_commit_answered_200_is_committed() -> None:
    _, run = _run(None)
    assert run.outcome == "committed"
