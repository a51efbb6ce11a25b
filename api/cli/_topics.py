"""``txnstream topics create|list|delete|stats|retention|ttl``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ._common import (
    DEFAULT_URL,
    JsonOption,
    TokenOption,
    TopicArg,
    UrlOption,
    connect,
    dash,
    parse_duration_ms,
    parse_size_bytes,
    print_json,
    print_result,
    usage,
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
    text = f"created topic {name}" if created else f"topic {name} already exists"
    print_result(as_json, {"topic": name, "created": created}, text)


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
    print_result(as_json, data, f"deleted topic {name}")


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
    typer.echo(f"retention: {_shown(data.get('retention'))}")
    ttl_ms = data.get("ttl_ms")
    typer.echo(f"message ttl: {'off' if ttl_ms is None else f'{ttl_ms} ms'}")
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


def _limit(text: str | None, parse: Any, option: str) -> tuple[bool, int | None]:
    """``(given, value)`` of a retention option: ``off`` is no limit."""
    if text is None:
        return False, None
    if text.strip().lower() in ("off", "none"):
        return True, None
    return True, parse(text, option=option)


def _shown(retention: dict[str, Any] | None) -> str:
    if not retention or (retention.get("time_ms") is None and retention.get("size_bytes") is None):
        return "keep everything"
    time_ms, size = retention.get("time_ms"), retention.get("size_bytes")
    parts = [] if time_ms is None else [f"time {time_ms} ms"]
    return ", ".join(parts + ([] if size is None else [f"size {size} bytes"]))


@topics_app.command("retention")
def topics_retention(
    name: TopicArg,
    time: Annotated[
        str | None,
        typer.Option(
            "--time",
            metavar="DURATION",
            help="Delete sealed ledgers older than this (30m, 12h, 7d); off: no age limit.",
        ),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option(
            "--size",
            metavar="SIZE",
            help="Delete the oldest sealed ledgers while the topic holds more (500MB, 10GiB);"
            " off: no size limit.",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show or set topic NAME's retention: what goes once every subscription acknowledged
    it (whole sealed ledgers, never above the stable position). With neither option it
    shows the retention in force (the topic's own, else the server's --default-retention);
    with one, the other kind of limit is off."""
    time_given, time_ms = _limit(time, parse_duration_ms, "--time")
    size_given, size_bytes = _limit(size, parse_size_bytes, "--size")
    if time_ms == 0:
        usage("--time must be longer than 0 (off: no age limit)")
    with connect(url, token) as client:
        if time_given or size_given:
            data = client.set_retention(name, time_ms=time_ms, size_bytes=size_bytes)
        else:
            data = {"topic": name, **(client.stats(name).get("retention") or {})}
    limits = {"time_ms": data.get("time_ms"), "size_bytes": data.get("size_bytes")}
    print_result(as_json, {"topic": name, **limits}, f"retention of {name}: {_shown(data)}")


@topics_app.command("ttl")
def topics_ttl(
    name: TopicArg,
    ttl: Annotated[
        str | None,
        typer.Argument(
            metavar="[DURATION]",
            help="Acknowledge messages older than this for every subscription (30s, 1h, 7d);"
            " off: never. Without it, shows the TTL.",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show or set topic NAME's message TTL (Pulsar's): unacknowledged messages older than
    it are acknowledged for every subscription by a pass every --ttl-check-interval."""
    given, ttl_ms = _limit(ttl, parse_duration_ms, "DURATION")
    if ttl_ms == 0:
        usage("the TTL must be longer than 0 (off: never)")
    with connect(url, token) as client:
        if given:
            ttl_ms = client.set_ttl(name, ttl_ms).get("ttl_ms")
        else:
            ttl_ms = client.stats(name).get("ttl_ms")
    shown = "off" if ttl_ms is None else f"{ttl_ms} ms"
    print_result(as_json, {"topic": name, "ttl_ms": ttl_ms}, f"message TTL of {name}: {shown}")
