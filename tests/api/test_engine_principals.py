"""Principals: a transaction belongs to the principal that began it; transactional ids,
finish keys and idempotent producer names are scoped to their principal; calls that
name no principal (the embedded API) are unrestricted, exactly as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import make_topics

from txnstream.api import (
    Engine,
    EngineConfig,
    FencedError,
    ForbiddenError,
    InvalidArgumentError,
    OutgoingMessage,
    Principal,
    TxnNotFoundError,
)

A, B = "billing", "shipping"
ADMIN = Principal("ops", admin=True)


async def test_another_principal_may_not_name_a_transaction(engine: Engine) -> None:
    await make_topics(engine, "t")
    await engine.create_subscription("t", "s")
    await engine.send("t", "m")
    txn = await engine.begin(principal=A)
    await engine.produce("t", [OutgoingMessage(1)], txn=txn.id, principal=A)

    with pytest.raises(ForbiddenError):
        await engine.produce("t", [OutgoingMessage("injected")], txn=txn.id, principal=B)
    with pytest.raises(ForbiddenError):
        await engine.ack("t", "s", ["0:0"], txn=txn.id, principal=B)
    with pytest.raises(ForbiddenError):
        await engine.get_transaction(txn.id, principal=B)
    for end in (engine.commit, engine.abort):
        with pytest.raises(ForbiddenError):
            await end(txn.id, principal=B)
    with pytest.raises(ForbiddenError):
        await engine.finish(commit=[txn.id], principal=B)
    with pytest.raises(ForbiddenError):
        await engine.finish(abort=[txn.id], principal=Principal(B))

    info = await engine.get_transaction(txn.id, principal=A)
    assert (info.state, info.topics, info.owner) == ("open", ["t"], A)
    assert (await engine.stats("t"))["entries"] == 2  # nothing injected
    await engine.commit(txn.id, principal=A)
    await engine.commit(txn.id, principal=A)  # idempotent for its owner
    with pytest.raises(ForbiddenError):
        await engine.commit(txn.id, principal=B)


async def test_a_refused_finish_changes_nothing(engine: Engine) -> None:
    mine, theirs = await engine.begin(principal=A), await engine.begin(principal=B)
    with pytest.raises(ForbiddenError):
        await engine.finish(commit=[mine.id], abort=[theirs.id], principal=A)
    for txn in (mine, theirs):
        assert (await engine.get_transaction(txn.id)).state == "open"


async def test_admin_and_the_embedded_api_may_act_on_anything(engine: Engine) -> None:
    await make_topics(engine, "t")
    first, second = await engine.begin(principal=A), await engine.begin(principal=A)
    await engine.produce("t", [OutgoingMessage(1)], txn=first.id, principal=ADMIN)
    assert (await engine.get_transaction(first.id, principal=ADMIN)).owner == A
    await engine.commit(first.id, principal=ADMIN)
    await engine.abort(second.id)  # no principal: unrestricted
    third = await engine.begin(principal=ADMIN)
    with pytest.raises(ForbiddenError):
        await engine.abort(third.id, principal=A)
    unowned = await engine.begin()
    assert (await engine.get_transaction(unowned.id)).owner is None
    with pytest.raises(ForbiddenError):  # a principal may not touch unowned ones either
        await engine.commit(unowned.id, principal=A)


async def test_unknown_transactions_stay_not_found(engine: Engine) -> None:
    with pytest.raises(TxnNotFoundError):
        await engine.commit("txn-999999", principal=A)
    with pytest.raises(TxnNotFoundError):
        await engine.get_transaction("nonsense", principal=A)


async def test_listing_shows_the_callers_own_transactions(engine: Engine) -> None:
    a = await engine.begin(principal=A, label="job:1")
    b = await engine.begin(principal=B, label="job:2")
    c = await engine.begin(label="job:3")
    mine = await engine.transactions(label_prefix="job:", principal=A)
    assert [i.txn for i in mine] == [a.id]
    everything = {a.id, b.id, c.id}
    assert {i.txn for i in await engine.transactions(principal=ADMIN)} == everything
    assert {i.txn for i in await engine.transactions(label_prefix="job:")} == everything


async def test_transactional_ids_are_scoped_to_their_principal(engine: Engine) -> None:
    a1 = await engine.begin(transactional_id="worker", principal=A)
    b1 = await engine.begin(transactional_id="worker", principal=B)
    plain = await engine.begin(transactional_id="worker")
    admin = await engine.begin(transactional_id="worker", principal=ADMIN)
    for txn in (a1, b1, plain, admin):  # nobody fenced anybody
        assert (await engine.get_transaction(txn.id)).state == "open"

    a2 = await engine.begin(transactional_id="worker", principal=A)  # fences its own
    with pytest.raises(FencedError):
        await engine.commit(a1.id, principal=A)
    assert (await engine.get_transaction(b1.id)).state == "open"
    for txn in (a2, b1, plain, admin):
        await engine.commit(txn.id)


async def test_finish_keys_are_scoped_to_their_principal(engine: Engine) -> None:
    a = await engine.begin(principal=A)
    assert not (await engine.finish(commit=[a.id], idempotence_key="job-7", principal=A)).duplicate
    b = await engine.begin(principal=B)
    result = await engine.finish(commit=[b.id], idempotence_key="job-7", principal=B)
    assert (result.duplicate, result.committed) == (False, [b.id])  # B's key is its own
    unowned = await engine.begin()
    assert not (await engine.finish(commit=[unowned.id], idempotence_key="job-7")).duplicate

    again = await engine.begin(principal=A)  # A reuses its own key: aborted instead
    replay = await engine.finish(commit=[again.id], idempotence_key="job-7", principal=A)
    assert (replay.duplicate, replay.aborted) == (True, [again.id])


async def test_producer_names_are_scoped_to_their_principal(engine: Engine) -> None:
    await make_topics(engine, "t")
    msg = [OutgoingMessage("x")]
    first = await engine.produce("t", msg, producer="p", sequence=5, principal=A)
    other = await engine.produce("t", msg, producer="p", sequence=0, principal=B)
    plain = await engine.produce("t", msg, producer="p", sequence=0)
    assert [first.duplicate, other.duplicate, plain.duplicate] == [False, False, False]
    again = await engine.produce("t", msg, producer="p", sequence=5, principal=A)
    assert (again.duplicate, again.positions) == (True, first.positions)
    assert (await engine.produce("t", msg, producer="p", sequence=0, principal=B)).duplicate


async def test_owners_ids_and_keys_survive_a_restart(data_dir: Path) -> None:
    config = EngineConfig()
    async with Engine.open(data_dir, config) as engine:
        await make_topics(engine, "t")
        txn = await engine.begin(transactional_id="w", principal=A)
        await engine.produce("t", [OutgoingMessage(1)], txn=txn.id, principal=A)
        done = await engine.begin(principal=A)
        await engine.finish(commit=[done.id], idempotence_key="k", principal=A)
        await engine.produce("t", [OutgoingMessage(2)], producer="p", sequence=3, principal=A)
    async with Engine.open(data_dir, config) as engine:
        assert (await engine.get_transaction(txn.id)).owner == A
        with pytest.raises(ForbiddenError):
            await engine.commit(txn.id, principal=B)
        await engine.begin(transactional_id="w", principal=B)  # B's own id: no fencing
        assert (await engine.get_transaction(txn.id)).state == "open"
        await engine.begin(transactional_id="w", principal=A)
        with pytest.raises(FencedError):
            await engine.commit(txn.id, principal=A)
        replay = await engine.begin(principal=A)
        assert (await engine.finish(abort=[replay.id], idempotence_key="k", principal=A)).duplicate
        dup = await engine.produce("t", [OutgoingMessage(2)], producer="p", sequence=3, principal=A)
        assert dup.duplicate


async def test_ownership_of_a_transaction_kept_only_as_an_outcome(data_dir: Path) -> None:
    async with Engine.open(data_dir, EngineConfig()) as engine:
        coordinator = engine._rt.coordinator
        coordinator._ended_in_memory = 1  # the next end pushes this one out of memory
        txn = await engine.begin(principal=A)
        await engine.commit(txn.id, principal=A)
        await engine.commit((await engine.begin()).id)
        assert coordinator.get(txn.id).compact
        with pytest.raises(ForbiddenError):
            await engine.commit(txn.id, principal=B)
        assert (await engine.commit(txn.id, principal=A)).owner == A


def test_a_principal_needs_a_name() -> None:
    with pytest.raises(InvalidArgumentError):
        Principal("")


async def test_reading_uncommitted_data_needs_read_uncommitted(engine: Engine) -> None:
    """The engine's own rule (every door's): a principal reads open transactions' data
    only with ``read_uncommitted`` on the topic (and subscription); no principal: anyone."""
    from txnstream.api import Grant

    await make_topics(engine, "t")
    await engine.create_subscription("t", "peek", isolation="read_uncommitted")
    consumer = Principal("c", grants=(Grant("t", frozenset({"consume"})),))
    reader = Principal(
        "r", grants=(Grant("t", frozenset({"consume", "read_uncommitted"}), ("r-*",)),)
    )
    for refused in (
        engine.fetch("t", isolation="read_uncommitted", principal=consumer),
        engine.receive("t", "peek", principal=consumer),
        engine.receive("t", "peek", principal=reader),  # not one of its subscriptions
        engine.create_subscription("t", "c-1", isolation="read_uncommitted", principal=consumer),
    ):
        with pytest.raises(ForbiddenError, match="read_uncommitted"):
            await refused
    await engine.fetch("t", isolation="read_uncommitted", principal=reader)
    await engine.create_subscription("t", "r-1", isolation="read_uncommitted", principal=reader)
    assert await engine.receive("t", "r-1", principal=reader) == []
    assert await engine.receive("t", "peek", principal=ADMIN) == []
    assert await engine.receive("t", "peek") == []  # the embedded API: unrestricted
