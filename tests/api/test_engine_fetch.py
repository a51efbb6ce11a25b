"""Range fetch for stateless readers: raw entries plus the aborted transactions among them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from support import make_topics

from txnstream.api import (
    Engine,
    FetchResult,
    InvalidArgumentError,
    OutgoingMessage,
    Position,
    TopicNotFoundError,
)


@dataclass
class MixedLog:
    plain: Position
    aborted: str
    a_first: Position
    committed: str
    open: str
    o_first: Position
    tail: Position


def _committed_view(result: FetchResult) -> list[object]:
    """What a stateless client keeps: data entries whose txn is not listed as aborted."""
    aborted = {a.txn for a in result.aborted}
    return [e.value for e in result.entries if e.kind == "data" and e.txn not in aborted]


async def _mixed_log(engine: Engine) -> MixedLog:
    """plain, aborted txn (2 entries + marker), committed txn (1 + marker), open txn, plain."""
    await make_topics(engine, "t")
    plain = await engine.send("t", "p0")
    aborted = await engine.begin()
    a_first = await aborted.send("t", "a0")
    await aborted.send("t", "a1")
    await aborted.abort()
    committed = await engine.begin()
    await committed.send("t", "c0")
    await committed.commit()
    still_open = await engine.begin()
    o_first = await still_open.send("t", "o0")
    tail = await engine.send("t", "p1")
    return MixedLog(plain, aborted.id, a_first, committed.id, still_open.id, o_first, tail)


async def test_read_committed_fetch_stops_at_the_stable_position(engine: Engine) -> None:
    log = await _mixed_log(engine)
    result = await engine.fetch("t")

    kinds = [e.kind for e in result.entries]
    assert kinds == ["data", "data", "data", "abort", "data", "commit"]
    assert [e.value for e in result.entries if e.kind == "data"] == ["p0", "a0", "a1", "c0"]
    assert [(a.txn, a.first_position) for a in result.aborted] == [(log.aborted, log.a_first)]
    assert _committed_view(result) == ["p0", "c0"]
    last = result.entries[-1].position
    assert result.stable_position == last
    assert result.last_confirmed == log.tail
    assert result.next == Position(last.ledger_id, last.entry_id + 1)

    # Nothing more is readable yet: an empty answer with `next` equal to `from`.
    again = await engine.fetch("t", result.next)
    assert again.entries == []
    assert again.next == result.next


async def test_read_uncommitted_fetch_goes_to_last_confirmed(engine: Engine) -> None:
    log = await _mixed_log(engine)
    result = await engine.fetch("t", isolation="read_uncommitted")
    assert result.entries[-1].position == log.tail
    assert [e.value for e in result.entries if e.kind == "data"] == [
        "p0",
        "a0",
        "a1",
        "c0",
        "o0",
        "p1",
    ]
    assert [a.txn for a in result.aborted] == [log.aborted]
    assert [e.txn for e in result.entries if e.value == "o0"] == [log.open]


async def test_fetch_lists_exactly_the_aborted_transactions_in_the_returned_range(
    engine: Engine,
) -> None:
    log = await _mixed_log(engine)
    # Only the first plain entry: no aborted data in range.
    head = await engine.fetch("t", "earliest", max=1)
    assert [e.value for e in head.entries] == ["p0"]
    assert head.aborted == []
    # Only the second aborted entry: listed although its first entry is not returned.
    a_first = log.a_first
    middle = await engine.fetch("t", Position(a_first.ledger_id, a_first.entry_id + 1), max=1)
    assert [e.value for e in middle.entries] == ["a1"]
    assert [(a.txn, a.first_position) for a in middle.aborted] == [(log.aborted, a_first)]
    # From the ABORT marker on: the marker alone names no aborted data.
    marker = middle.next
    rest = await engine.fetch("t", marker)
    assert rest.entries[0].kind == "abort"
    assert rest.aborted == []
    assert _committed_view(rest) == ["c0"]


async def test_paging_with_next_reads_everything_once(engine: Engine) -> None:
    await _mixed_log(engine)
    await engine.commit(
        next(t.txn for t in await engine.transactions(state="open"))  # release the tail
    )
    seen = []
    cursor: Position | str = "earliest"
    for _ in range(50):
        page = await engine.fetch("t", cursor, max=2)
        if not page.entries:
            break
        seen.extend(_committed_view(page))
        cursor = page.next
    assert seen == ["p0", "c0", "o0", "p1"]


async def test_fetch_from_before_the_first_entry_starts_there(engine: Engine) -> None:
    await make_topics(engine, "t")
    empty = await engine.fetch("t")
    assert empty.entries == []
    assert empty.stable_position is None
    assert empty.last_confirmed is None
    first = await engine.send("t", "x")
    result = await engine.fetch("t", Position(0, 0))
    assert [e.position for e in result.entries] == [first]


@pytest.mark.parametrize(
    "kwargs", [{"isolation": "dirty"}, {"max": 0}, {"max": 10_001}, {"start": "1:x"}]
)
async def test_fetch_rejects_bad_arguments(engine: Engine, kwargs: dict[str, object]) -> None:
    await make_topics(engine, "t")
    with pytest.raises(InvalidArgumentError):
        await engine.fetch("t", **kwargs)  # type: ignore[arg-type]


async def test_fetch_of_unknown_topic_is_not_found(engine: Engine) -> None:
    with pytest.raises(TopicNotFoundError):
        await engine.fetch("missing")


async def test_fetched_entries_are_read_only_values(engine: Engine) -> None:
    await make_topics(engine, "t")
    at = await engine.produce("t", [OutgoingMessage(b"v", "k", {"h": "x"})])
    first, again = (await engine.fetch("t")).entries[0], (await engine.fetch("t")).entries[0]

    assert (first.position, first.kind, first.txn, first.key) == (
        at.positions[0],
        "data",
        None,
        "k",
    )
    assert (first.value, first.properties) == (b"v", {"h": "x"})
    assert first.publish_time.tzinfo is not None
    assert first == again  # equal when every field is
    with pytest.raises(AttributeError):
        first.value = b"changed"  # type: ignore[misc]
