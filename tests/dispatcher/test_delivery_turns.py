"""Consumers woken together take turns: no event-loop step makes all their batches.

A hundred consumers, each on its own exclusive subscription, drain one topic in batches
of 1000 with a cumulative ack after each. Their acks go to disk in one flush, which
wakes them all in one loop step, and their next ranges were read during that flush:
without turns each made its next batch in that same step (95,000 messages in one step
here; X1-subs saw ~90 ms steps). With turns no step makes more than the step budget
plus one batch, and every consumer still gets every message, in order.

The consumers see a batch in the step their coroutine resumes, which is the step it was
made in or, when another task made it for them, the next one: so a step may show what
two steps made, at most twice the step budget plus one batch each (still an order of
magnitude below what a step made without turns).
"""

from __future__ import annotations

import asyncio

from txnstream.api import Engine
from txnstream.dispatcher._subscription import STEP_MESSAGES

TOPIC = "t"
CONSUMERS = 100
BATCH = 1000
ROUNDS = 3


async def test_consumers_woken_together_make_their_batches_in_turns(engine: Engine) -> None:
    await engine.create_topic(TOPIC)
    await engine.send_many(TOPIC, list(range(ROUNDS * BATCH)))
    subs = [await engine.subscribe(TOPIC, f"s{i}") for i in range(CONSUMERS)]
    loop = asyncio.get_running_loop()
    step = 0
    # A step is one pass of the loop, which polls its selector once per pass: count the
    # polls themselves (a call_soon ticker lands mid-pass and splits one pass in two).
    selector = loop._selector  # type: ignore[attr-defined]
    select = selector.select

    def counting_select(timeout: float | None = None) -> object:
        nonlocal step
        step += 1
        return select(timeout)

    made: dict[int, int] = {}  # loop step -> messages the consumers got in it

    async def consume(index: int) -> list[int]:
        got: list[int] = []
        while len(got) < ROUNDS * BATCH:
            messages = await subs[index].receive(max=BATCH, timeout=10.0)
            assert messages
            made[step] = made.get(step, 0) + len(messages)  # the delivery's step
            got += [m.value for m in messages]
            await subs[index].ack(messages[-1].position, cumulative=True)
        return got

    selector.select = counting_select
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(consume(i) for i in range(CONSUMERS))), timeout=60.0
        )
    finally:
        selector.select = select
    assert all(values == list(range(ROUNDS * BATCH)) for values in results)
    assert sum(made.values()) == CONSUMERS * ROUNDS * BATCH
    assert max(made.values()) <= 2 * (STEP_MESSAGES + BATCH), made
