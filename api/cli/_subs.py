"""``txnstream sub list|create|delete|seek|peek``: a topic's subscriptions.

``peek`` shows what a subscription has not acknowledged without changing anything: it
range-fetches from the subscription's mark-delete position with the subscription's
isolation and filters like a consumer (markers and, read_committed, aborted data
dropped). Receiving with a throwaway consumer and nacking would not be read-only: it
bumps ``redelivery_count``, takes messages away from live consumers of a shared
subscription for a while, fails on an exclusive one that has a consumer, and leaves that
consumer attached for 30 s. The price of the read-only way: the server publishes only the
mark-delete position, so messages acknowledged individually above it (and messages out
with a consumer, not yet acknowledged) are shown too — what a fresh consumer after a
restart could be handed.
"""

from __future__ import annotations

from typing import Annotated

import typer

from txnstream.api import Position

from ._common import (
    DEFAULT_URL,
    FormatOption,
    JsonOption,
    NoHeaderOption,
    SubArg,
    TokenOption,
    TopicArg,
    UrlOption,
    connect,
    dash,
    fail,
    parse_position,
    print_json,
    print_result,
)
from ._consume import ISOLATIONS, SUB_TYPES, choice
from ._format import Printer, Table

sub_app = typer.Typer(
    help="List, create, delete, seek and peek subscriptions.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


_SUB_COLUMNS = ("SUBSCRIPTION", "TYPE", "ISOLATION", "BACKLOG", "MARK_DELETE", "CONSUMERS")
_SUB_EXTRAS = ("unacked", "redeliveries")  # older servers leave them out: "-"


@sub_app.command("list")
def sub_list(
    topic: TopicArg,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
    no_header: NoHeaderOption = False,
) -> None:
    """List the subscriptions of TOPIC: name, type, isolation, backlog, mark-delete
    position, consumers, unacknowledged messages, redeliveries."""
    with connect(url, token) as client:
        subs = client.list_subscriptions(topic)
    columns = (*_SUB_COLUMNS, *(extra.upper() for extra in _SUB_EXTRAS))
    table = Table(columns, header=not no_header)
    for name, sub in sorted(subs.items()):
        if as_json:
            print_json({"topic": topic, "subscription": name, **sub})
            continue
        table.row(
            name,
            sub.get("type"),
            sub.get("isolation"),
            sub.get("backlog"),
            sub.get("mark_delete"),
            ",".join(sub.get("consumers") or []) or None,
            *(sub.get(extra) for extra in _SUB_EXTRAS),
        )


@sub_app.command("create")
def sub_create(
    topic: TopicArg,
    sub: SubArg,
    sub_type: Annotated[
        str,
        typer.Option("--type", metavar="TYPE", help="exclusive, failover, shared or key_shared."),
    ] = "exclusive",
    initial_position: Annotated[
        str, typer.Option(metavar="WHERE", help="Where it starts: earliest or latest.")
    ] = "earliest",
    isolation: Annotated[
        str, typer.Option(metavar="LEVEL", help="read_committed or read_uncommitted.")
    ] = "read_committed",
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create subscription SUB of TOPIC (no error if it exists alike; 409 if it differs)."""
    choice(sub_type, "--type", SUB_TYPES)
    choice(initial_position, "--initial-position", ("earliest", "latest"))
    choice(isolation, "--isolation", ISOLATIONS)
    with connect(url, token) as client:
        created = client.create_subscription(
            topic, sub, type=sub_type, initial_position=initial_position, isolation=isolation
        )
    text = (
        f"created subscription {sub} of {topic}"
        if created
        else f"subscription {sub} of {topic} already exists"
    )
    print_result(as_json, {"topic": topic, "subscription": sub, "created": created}, text)


@sub_app.command("delete")
def sub_delete(
    topic: TopicArg,
    sub: SubArg,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete subscription SUB of TOPIC with its cursor."""
    with connect(url, token) as client:
        client.delete_subscription(topic, sub)
    deleted = {"topic": topic, "subscription": sub, "deleted": True}
    print_result(as_json, deleted, f"deleted subscription {sub} of {topic}")


@sub_app.command("seek")
def sub_seek(
    topic: TopicArg,
    sub: SubArg,
    position: Annotated[
        str,
        typer.Argument(
            metavar="POSITION",
            help="L:E, earliest, latest, or @TIME: the first message published at or after"
            " TIME (ISO 8601, UTC unless it says; or milliseconds since the epoch).",
        ),
    ],
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Move SUB's cursor: everything before POSITION counts as acknowledged, everything
    from it on is delivered again."""
    with connect(url, token) as client:
        if position.startswith("@") and len(position) > 1:
            target = client.seek(topic, sub, timestamp=position[1:])["position"]
        else:
            target = parse_position(position, option="POSITION", names=("earliest", "latest"))
            client.seek(topic, sub, target)
        mark = client.list_subscriptions(topic).get(sub, {}).get("mark_delete")
    print_result(
        as_json,
        {"topic": topic, "subscription": sub, "position": target, "mark_delete": mark},
        f"seeked {sub} of {topic} to {target} (mark_delete={dash(mark)})",
    )


@sub_app.command("peek")
def sub_peek(
    topic: TopicArg,
    sub: SubArg,
    max_messages: Annotated[
        int, typer.Option("--max", min=1, max=10_000, metavar="N", help="Show at most this many.")
    ] = 10,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
    fmt: FormatOption = None,
    no_header: NoHeaderOption = False,
) -> None:
    """Show the next messages of SUB without acknowledging or receiving anything.

    Reads from the subscription's mark-delete position; messages acknowledged
    individually above it are shown too.
    """
    printer = Printer.of(topic, as_json, fmt, header=not no_header)
    shown = 0
    with connect(url, token) as client:
        settings = client.list_subscriptions(topic).get(sub)
        if settings is None:
            fail(f"subscription {sub} of topic {topic} does not exist (not_found)")
        isolation = str(settings.get("isolation") or "read_committed")
        mark = settings.get("mark_delete")
        after = None if mark is None else Position.parse(mark)
        at: str | None = mark
        while shown < max_messages:
            data = client.fetch(topic, at, max=1000, isolation=isolation)
            aborted = {item["txn"] for item in data.get("aborted") or []}
            for entry in data["entries"]:
                if entry.get("kind") != "data":
                    continue
                if isolation == "read_committed" and entry.get("txn") in aborted:
                    continue
                if after is not None and Position.parse(entry["position"]) <= after:
                    continue  # the mark-delete position itself is acknowledged
                printer.show(entry)
                shown += 1
                if shown >= max_messages:
                    break
            if not data["entries"]:
                break
            at = data["next"]
