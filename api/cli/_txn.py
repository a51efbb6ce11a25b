"""``txnstream txn begin|commit|abort|show|list``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from ._common import (
    DEFAULT_URL,
    JsonOption,
    NoHeaderOption,
    TokenOption,
    TxnArg,
    UrlOption,
    connect,
    dash,
    human_duration,
    parse_duration_ms,
    print_json,
    print_result,
)
from ._format import Table

txn_app = typer.Typer(
    help="Begin, commit, abort, list and inspect transactions.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def _age(data: dict[str, Any]) -> str:
    """How long ago the transaction began (``-`` if the server does not say)."""
    created = data.get("created_at")
    if not created:
        return "-"
    return human_duration((datetime.now(UTC) - datetime.fromisoformat(created)).total_seconds())


def _show_txn(data: dict[str, Any]) -> None:
    typer.echo(f"txn: {data.get('txn')}")
    typer.echo(f"state: {data.get('state')}")
    typer.echo(f"label: {dash(data.get('label'))}")
    typer.echo(f"topics: {', '.join(data.get('topics') or []) or '-'}")
    if data.get("fenced"):
        typer.echo("fenced: yes")
    if data.get("owner"):
        typer.echo(f"owner: {data['owner']}")
    if data.get("timeout_ms") is not None:
        typer.echo(f"timeout_ms: {data.get('timeout_ms')}")
    if data.get("created_at"):
        typer.echo(f"created_at: {data['created_at']} ({_age(data)} ago)")
    if data.get("deadline"):
        typer.echo(f"deadline: {data['deadline']}")
    if data.get("reason"):
        typer.echo(f"reason: {data['reason']}")


@txn_app.command("begin")
def txn_begin(
    timeout_ms: Annotated[
        int | None, typer.Option(min=1, max=900_000, metavar="MS", help="Abort after this long.")
    ] = None,
    label: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Free text to find it later.")
    ] = None,
    transactional_id: Annotated[
        str | None, typer.Option(metavar="ID", help="Fences any open transaction with the same id.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Begin a transaction and print its id."""
    with connect(url, token) as client:
        data = client.begin(timeout_ms=timeout_ms, label=label, transactional_id=transactional_id)
    if as_json:
        print_json(data)
    else:
        typer.echo(data["txn"])


def _show_end(data: dict[str, Any], as_json: bool) -> None:
    print_result(as_json, data, f"{data.get('state')} {data.get('txn')}")


@txn_app.command("commit")
def txn_commit(
    txn: TxnArg,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Commit transaction TXN (its messages become visible)."""
    with connect(url, token) as client:
        _show_end(client.commit(txn), as_json)


@txn_app.command("abort")
def txn_abort(
    txn: TxnArg,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Abort transaction TXN (its messages are dropped)."""
    with connect(url, token) as client:
        _show_end(client.abort(txn), as_json)


@txn_app.command("show")
def txn_show(
    txn: TxnArg,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show transaction TXN."""
    with connect(url, token) as client:
        data = client.get_transaction(txn)
    if as_json:
        print_json(data)
    else:
        _show_txn(data)


@txn_app.command("list")
def txn_list(
    state: Annotated[
        str | None, typer.Option(metavar="STATE", help="Only transactions in this state.")
    ] = None,
    label_prefix: Annotated[
        str | None, typer.Option(metavar="PREFIX", help="Only labels with this prefix.")
    ] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            metavar="DURATION",
            help="Only those begun at least this long ago (30s, 5m, 2h, 1h30m): hanging ones.",
        ),
    ] = None,
    url: UrlOption = DEFAULT_URL,
    token: TokenOption = None,
    as_json: JsonOption = False,
    no_header: NoHeaderOption = False,
) -> None:
    """List transactions, oldest first: id, state, age, deadline, label, topics."""
    older_than_ms = (
        None if older_than is None else parse_duration_ms(older_than, option="--older-than")
    )
    with connect(url, token) as client:
        items = client.list_transactions(
            state=state, label_prefix=label_prefix, older_than_ms=older_than_ms
        )
    items.sort(key=lambda item: str(item.get("created_at") or ""))
    table = Table(("TXN", "STATE", "AGE", "DEADLINE", "LABEL", "TOPICS"), header=not no_header)
    for item in items:
        if as_json:
            print_json(item)
            continue
        topics = ",".join(item.get("topics") or []) or None
        table.row(
            item["txn"], item["state"], _age(item), item.get("deadline"), item.get("label"), topics
        )
