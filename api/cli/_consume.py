"""``txnstream consume``: through a subscription, or from a position with no subscription.

Through a subscription (``consume TOPIC SUB``) messages are received and acknowledged;
an existing subscription is used with its own type and isolation unless ``--type`` or
``--isolation`` say otherwise (the server answers 409 if they differ from what it has).

With ``--from`` there is no subscription: the topic is read by range fetches, and
read_committed filtering happens here, as a stateless reader does it (``docs/http-api.md``,
"Range fetch"): markers are skipped and a data entry whose transaction is in the
answer's ``aborted`` list is dropped. The server keeps nothing for such a reader.
``--from`` takes, as kcat's ``-o``: ``earliest``, ``latest``, a position ``L:E``, ``-N``
(the last N messages) or ``@TIME`` (from the first message published at or after TIME,
ISO 8601 or milliseconds since the epoch).

Without ``--follow``, ``consume`` prints everything up to the end and exits (``--max``
stops it sooner); it waits up to ``--wait-ms`` for a first message unless
``-e/--exit-at-end`` says to exit at the end at once, as kcat's ``-e``.

``--follow`` keeps reading; when the server goes away (restart, network) it reconnects
with backoff and resumes: a subscription redelivers what was not acknowledged (acks that
did not get through are sent again first), a ``--from`` reader continues at its next
position. When nothing comes because an open transaction holds the stable position,
``consume`` says so on stderr, once per transaction.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from txnstream.api import Position
from txnstream.api.client import TxnStreamHttpError, TxnStreamTransportError

if TYPE_CHECKING:
    from txnstream.api.client import Client

from ._common import (
    DEFAULT_URL,
    Backoff,
    FormatOption,
    JsonOption,
    NoHeaderOption,
    TokenOption,
    TopicArg,
    UrlOption,
    connect,
    describe,
    human_duration,
    note,
    parse_position,
    retriable,
    usage,
)
from ._format import Printer

SUB_TYPES = ("exclusive", "failover", "shared", "key_shared")
ISOLATIONS = ("read_committed", "read_uncommitted")
LONG_POLL_MS = 5000
FETCH_MAX = 1000


def choice(value: str | None, option: str, choices: tuple[str, ...]) -> str | None:
    """``value`` if it is one of ``choices`` (or None); else a usage error."""
    if value is not None and value not in choices:
        usage(f"{option} wants one of {', '.join(choices)}; got {value!r}")
    return value


def _ago(iso: str | None) -> str:
    if not iso:
        return "?"
    moment = datetime.fromisoformat(iso)
    return human_duration((datetime.now(UTC) - moment).total_seconds())


def _left(iso: str | None) -> str:
    if not iso:
        return "?"
    seconds = (datetime.fromisoformat(iso) - datetime.now(UTC)).total_seconds()
    return f"in {human_duration(seconds)}" if seconds > 0 else "passed"


def blocking_line(topic: str, blocking: dict[str, Any]) -> str:
    """The stderr line saying which open transaction holds ``topic``'s stable position."""
    txn = blocking.get("txn")
    return (
        f"waiting: open transaction {txn} holds the stable position of {topic} "
        f"(open for {_ago(blocking.get('since'))}, deadline {_left(blocking.get('deadline'))}); "
        f"later messages wait until it ends (to end it: txnstream txn abort {txn})"
    )


@dataclass(slots=True)
class _Reader:
    """What both ways of consuming share: limits, printing, the blocking notice."""

    client: Client
    topic: str
    printer: Printer
    limit: int | None
    follow: bool
    isolation: str
    received: int = 0
    noticed: set[str] = field(default_factory=set)

    @property
    def done(self) -> bool:
        return self.limit is not None and self.received >= self.limit

    def want(self) -> int:
        return FETCH_MAX if self.limit is None else min(FETCH_MAX, self.limit - self.received)

    def show(self, message: dict[str, Any]) -> None:
        self.printer.show(message)
        self.received += 1

    def check_blocking(self) -> None:
        """Say once per transaction which open one holds the stable position, if any."""
        if self.isolation != "read_committed":
            return
        blocking = self.client.stats(self.topic).get("blocking_txn")
        if blocking and blocking.get("txn") not in self.noticed:
            self.noticed.add(str(blocking.get("txn")))
            note(blocking_line(self.topic, blocking))


def _keep_going(reader: _Reader, step: Callable[[], bool]) -> None:
    """Call ``step`` until it returns False or the limit is reached; in ``--follow``
    mode a request that got no answer (or 502/503/504) is retried with backoff."""
    backoff = Backoff()
    down = False
    while not reader.done:
        try:
            more = step()
        except (TxnStreamTransportError, TxnStreamHttpError) as exc:
            if not (reader.follow and retriable(exc)):
                raise
            if not down:
                note(f"lost the server: {describe(exc)}; reconnecting (Ctrl-C to stop)")
                down = True
            backoff.sleep()
            continue
        if down:
            note("reconnected; resuming")
            down = False
        backoff.reset()
        if not more:
            return


def _subscription_settings(
    client: Client,
    topic: str,
    sub: str,
    sub_type: str | None,
    isolation: str | None,
    initial_position: str | None,
) -> str:
    """Make sure ``sub`` exists; returns its isolation.

    A new subscription gets ``--type`` (default exclusive); an existing one keeps its own
    type and isolation unless they are given (then the server checks them: 409 if they
    differ)."""
    existing = (client.stats(topic).get("subscriptions") or {}).get(sub)
    if existing is None:
        client.create_subscription(
            topic,
            sub,
            type=sub_type or "exclusive",
            initial_position=initial_position,
            isolation=isolation,
        )
        return isolation or "read_committed"
    if sub_type is not None or isolation is not None:
        client.create_subscription(
            topic,
            sub,
            type=sub_type or existing.get("type"),
            isolation=isolation or existing.get("isolation"),
        )
    return str(isolation or existing.get("isolation") or "read_committed")


def _from_subscription(
    reader: _Reader, sub: str, consumer: str, wait_ms: int, no_ack: bool
) -> None:
    client, topic = reader.client, reader.topic
    pending: list[str] = []  # positions printed whose ack has not got through yet
    wait = wait_ms

    def step() -> bool:
        nonlocal wait
        if pending:
            client.ack(topic, sub, pending)
            pending.clear()
        want = reader.want()
        messages = client.receive(topic, sub, consumer=consumer, max=want, wait_ms=wait)
        for message in messages:
            reader.show(message)
        if messages and not no_ack:
            pending.extend(m["position"] for m in messages)
            client.ack(topic, sub, pending)
            pending.clear()
        idle = len(messages) < want
        if idle:
            reader.check_blocking()
        if reader.follow:
            wait = max(wait_ms, LONG_POLL_MS) if idle else wait_ms
            return True
        wait = 0  # without --follow: take what is there now (only the first receive waits)
        return not idle

    _keep_going(reader, step)


def visible(data: dict[str, Any], isolation: str) -> list[dict[str, Any]]:
    """The messages of a range fetch's answer a consumer sees: data entries, without those
    of aborted transactions when read_committed (txn ids are never reused)."""
    aborted = {item["txn"] for item in data.get("aborted") or []}
    return [
        entry
        for entry in data["entries"]
        if entry.get("kind") == "data"
        and not (isolation == "read_committed" and entry.get("txn") in aborted)
    ]


def _back(ledgers: list[dict[str, Any]], end: Position, count: int) -> str | None:
    """The position ``count`` entries before ``end`` (inclusive) over ``ledgers``, or None
    (earliest) when the retained log is not that long."""
    for info in reversed(ledgers):
        if info["ledger"] > end.ledger_id or not info["entries"]:
            continue
        last = info["entries"] - 1 if info["ledger"] < end.ledger_id else end.entry_id
        if last + 1 >= count:
            return str(Position(info["ledger"], last + 1 - count))
        count -= last + 1
    return None


def tail_start(client: Client, topic: str, count: int, isolation: str) -> str | None:
    """Where the last ``count`` messages a consumer sees begin (None: earliest).

    Markers and aborted data take positions too, so it reads back a window of entries
    before the end, growing it until it holds ``count`` messages or the whole log.
    """
    stats = client.stats(topic)
    end = stats.get("stable_position" if isolation == "read_committed" else "last_confirmed")
    if end is None:
        return None
    ledgers = client.list_ledgers(topic)
    window = max(2 * count, 100)
    while True:
        start = _back(ledgers, Position.parse(end), window)
        seen: list[str] = []
        at = start
        while True:
            data = client.fetch(topic, at, max=FETCH_MAX, isolation=isolation)
            seen += [m["position"] for m in visible(data, isolation)]
            if not data["entries"] or Position.parse(data["next"]) > Position.parse(end):
                break
            at = data["next"]
        if start is None or len(seen) >= count:
            return seen[-count] if len(seen) >= count else start
        window *= 4


def _from_position(reader: _Reader, start: str, wait_ms: int) -> None:
    client, topic = reader.client, reader.topic
    # Like a receive: without --follow, wait up to wait_ms for a first message.
    wait_until = time.monotonic() + wait_ms / 1000
    at: str | None = None
    timestamp: str | None = None  # --from @TIME: the first fetch asks by publish time
    skip_through: Position | None = None  # --from latest: only what comes after now
    if start == "latest":
        # What this isolation level can read now is the past: read_committed stops at the
        # stable position, so what an open transaction holds back is still to come (as
        # Kafka's read_committed "latest" is the last stable offset).
        end = "stable_position" if reader.isolation == "read_committed" else "last_confirmed"
        last = client.stats(topic).get(end)
        if last is not None:
            at, skip_through = last, Position.parse(last)
    elif start.startswith("@"):
        timestamp = start[1:]
    elif start.startswith("-"):
        at = tail_start(client, topic, int(start[1:]), reader.isolation)
    elif start != "earliest":
        at = start
    idle = Backoff(first=0.1, cap=1.0)

    def step() -> bool:
        nonlocal at, timestamp
        data = client.fetch(
            topic, at, max=reader.want(), isolation=reader.isolation, timestamp=timestamp
        )
        timestamp = None
        for entry in visible(data, reader.isolation):
            if skip_through is not None and Position.parse(entry["position"]) <= skip_through:
                continue
            reader.show(entry)
            if reader.done:
                return False
        at = data["next"]
        if data["entries"]:
            idle.reset()
            return True
        if data.get("stable_position") != data.get("last_confirmed"):
            reader.check_blocking()
        if not reader.follow and (reader.received or time.monotonic() >= wait_until):
            return False
        idle.sleep()  # a range fetch does not wait for new entries: poll, slower when idle
        return True

    _keep_going(reader, step)


def _parse_from(text: str) -> str:
    """``--from``'s value, checked: earliest, latest, L:E, -N or @TIME."""
    if text.startswith("-"):
        if not text[1:].isdigit() or int(text[1:]) < 1:
            usage(f"--from -N wants a count of messages, e.g. -10; got {text!r}")
        return text
    if text.startswith("@"):
        if len(text) < 2:
            usage("--from @TIME wants a time, e.g. @2026-11-27T04:00:00Z")
        return text  # the server parses it (400 with the reason if it cannot)
    return parse_position(text, option="--from", names=("earliest", "latest"))


SubArg = Annotated[
    str | None,
    typer.Argument(
        metavar="SUB", help="Subscription (created if missing); leave it out with --from."
    ),
]
FromOption = Annotated[
    str | None,
    typer.Option(
        "--from",
        "-o",
        metavar="L:E|earliest|latest|-N|@TIME",
        help="Read TOPIC without a subscription (range fetches; nothing is acknowledged)"
        " from: earliest, latest, a position L:E, -N (the last N messages) or @TIME (the"
        " first message published at or after TIME: ISO 8601, UTC unless it says, or"
        " milliseconds since the epoch).",
    ),
]
TypeOption = Annotated[
    str | None,
    typer.Option(
        "--type",
        metavar="TYPE",
        help="exclusive, failover, shared or key_shared [default: the subscription's "
        "own, or exclusive for a new one].",
    ),
]
IsolationOption = Annotated[
    str | None,
    typer.Option(
        metavar="LEVEL",
        help="read_committed or read_uncommitted [default: the subscription's own, "
        "else read_committed].",
    ),
]
InitialPositionOption = Annotated[
    str | None,
    typer.Option(
        metavar="WHERE", help="Where a new subscription starts: earliest (default) or latest."
    ),
]
ConsumerOption = Annotated[str, typer.Option(metavar="NAME", help="Consumer name.")]
MaxOption = Annotated[
    int | None,
    typer.Option(
        "--max",
        min=1,
        metavar="N",
        help="Stop after this many messages [default: all up to the end; --follow: no end].",
    ),
]
ExitAtEndOption = Annotated[
    bool,
    typer.Option(
        "--exit-at-end",
        "-e",
        help="Exit at the end at once (as kcat -e), without waiting --wait-ms for a first message.",
    ),
]
WaitOption = Annotated[
    int,
    typer.Option(min=0, max=30_000, metavar="MS", help="Wait this long for the first message."),
]
FollowOption = Annotated[
    bool, typer.Option("--follow", "-f", help="Keep reading; reconnect if the server goes.")
]
NoAckOption = Annotated[bool, typer.Option("--no-ack", help="Do not acknowledge.")]


def consume(
    topic: TopicArg,
    sub: SubArg = None,
    start: FromOption = None,
    sub_type: TypeOption = None,
    isolation: IsolationOption = None,
    initial_position: InitialPositionOption = None,
    consumer: ConsumerOption = "default",
    max_messages: MaxOption = None,
    exit_at_end: ExitAtEndOption = False,
    wait_ms: WaitOption = 1000,
    follow: FollowOption = False,
    no_ack: NoAckOption = False,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
    fmt: FormatOption = None,
    no_header: NoHeaderOption = False,
) -> None:
    """Print messages of TOPIC: received through subscription SUB (and acknowledged), or
    read from a position with --from (like kcat -o)."""
    choice(sub_type, "--type", SUB_TYPES)
    choice(isolation, "--isolation", ISOLATIONS)
    choice(initial_position, "--initial-position", ("earliest", "latest"))
    if (sub is None) == (start is None):
        usage("give a subscription SUB, or --from earliest|latest|L:E|-N|@TIME (not both)")
    if follow and exit_at_end:
        usage("--follow and -e/--exit-at-end exclude each other")
    if exit_at_end:
        wait_ms = 0
    if start is not None:
        start = _parse_from(start)
        _check_no_subscription_flags(sub_type, initial_position, no_ack, consumer)
    printer = Printer.of(topic, as_json, fmt, header=not no_header)
    with connect(url, token) as client:
        if start is not None:
            reader = _Reader(
                client, topic, printer, max_messages, follow, isolation or ISOLATIONS[0]
            )
            _from_position(reader, start, wait_ms)
        elif sub is not None:
            sub_isolation = _subscription_settings(
                client, topic, sub, sub_type, isolation, initial_position
            )
            reader = _Reader(client, topic, printer, max_messages, follow, sub_isolation)
            _from_subscription(reader, sub, consumer, wait_ms, no_ack)


def _check_no_subscription_flags(
    sub_type: str | None, initial_position: str | None, no_ack: bool, consumer: str
) -> None:
    """A usage error for subscription options given with --from (no subscription)."""
    given = [
        name
        for name, value in (
            ("--type", sub_type),
            ("--initial-position", initial_position),
            ("--no-ack", no_ack or None),
            ("--consumer", None if consumer == "default" else consumer),
        )
        if value is not None
    ]
    if given:
        usage(f"{', '.join(given)} need a subscription (--from reads without one)")
