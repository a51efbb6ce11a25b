"""``txnstream topics create|list|delete|stats``."""

from __future__ import annotations

import typer

from ._common import (
    DEFAULT_URL,
    JsonOption,
    TokenOption,
    TopicArg,
    UrlOption,
    connect,
    dash,
    print_json,
)

topics_app = typer.Typer(
    help="Create, list, delete and inspect topics.", no_args_is_help=True, rich_markup_mode=None
)


@topics_app.command("create")
def topics_create(
    name: TopicArg,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create topic NAME (no error if it exists)."""
    with connect(url, token) as client:
        created = client.create_topic(name)
    if as_json:
        print_json({"topic": name, "created": created})
    else:
        typer.echo(f"created topic {name}" if created else f"topic {name} already exists")


@topics_app.command("list")
def topics_list(
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False
) -> None:
    """List topics, one name per line (--json: one {"topic": NAME} per line)."""
    with connect(url, token) as client:
        names = client.list_topics()
    for name in names:
        if as_json:
            print_json({"topic": name})
        else:
            typer.echo(name)


@topics_app.command("delete")
def topics_delete(
    name: TopicArg,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete topic NAME with its data and subscriptions."""
    with connect(url, token) as client:
        data = client.delete_topic(name)
    if as_json:
        print_json(data)
    else:
        typer.echo(f"deleted topic {name}")


@topics_app.command("stats")
def topics_stats(
    name: TopicArg,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show positions, transaction counts and subscriptions of topic NAME."""
    with connect(url, token) as client:
        data = client.stats(name)
    if as_json:
        print_json(data)
        return
    for field in ("topic", "last_confirmed", "stable_position", "open_txns", "aborted_txns"):
        typer.echo(f"{field}: {dash(data.get(field))}")
    blocking = data.get("blocking_txn")
    if blocking:
        typer.echo(
            f"blocking_txn: {blocking.get('txn')} since {dash(blocking.get('since'))} "
            f"deadline {dash(blocking.get('deadline'))}"
        )
    else:
        typer.echo("blocking_txn: -")
    typer.echo(f"ledgers: {data.get('ledgers')}  entries: {data.get('entries')}")
    snapshot = data.get("snapshot")
    if snapshot:
        typer.echo(f"snapshot: {snapshot.get('position')} at {snapshot.get('taken_at')}")
    else:
        typer.echo("snapshot: -")
    subs = data.get("subscriptions") or {}
    typer.echo(f"subscriptions: {len(subs)}")
    for sub_name, sub in sorted(subs.items()):
        consumers = ", ".join(sub.get("consumers") or []) or "-"
        typer.echo(
            f"  {sub_name}: type={sub.get('type')} isolation={sub.get('isolation')} "
            f"backlog={sub.get('backlog')} mark_delete={dash(sub.get('mark_delete'))} "
            f"consumers={consumers}"
        )
