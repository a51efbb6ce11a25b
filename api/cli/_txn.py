"""``txnstream txn begin|commit|abort|show|list``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ._common import DEFAULT_URL, JsonOption, UrlOption, connect, dash, print_json

txn_app = typer.Typer(help="Begin, commit, abort and inspect transactions.", no_args_is_help=True)


def _show_txn(data: dict[str, Any]) -> None:
    typer.echo(f"txn: {data.get('txn')}")
    typer.echo(f"state: {data.get('state')}")
    typer.echo(f"label: {dash(data.get('label'))}")
    typer.echo(f"topics: {', '.join(data.get('topics') or []) or '-'}")
    if data.get("fenced"):
        typer.echo("fenced: yes")
    if data.get("timeout_ms") is not None:
        typer.echo(f"timeout_ms: {data.get('timeout_ms')}")


@txn_app.command("begin")
def txn_begin(
    timeout_ms: Annotated[
        int | None, typer.Option(min=1, max=900_000, help="Abort after this long.")
    ] = None,
    label: Annotated[str | None, typer.Option(help="Free text to find it later.")] = None,
    transactional_id: Annotated[
        str | None, typer.Option(help="Fences any open transaction with the same id.")
    ] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """Begin a transaction and print its id."""
    with connect(url) as client:
        data = client.begin(timeout_ms=timeout_ms, label=label, transactional_id=transactional_id)
    if as_json:
        print_json(data)
    else:
        typer.echo(data["txn"])


def _show_end(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(data)
    else:
        typer.echo(f"{data.get('state')} {data.get('txn')}")


@txn_app.command("commit")
def txn_commit(txn: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Commit transaction TXN (its messages become visible)."""
    with connect(url) as client:
        _show_end(client.commit(txn), as_json)


@txn_app.command("abort")
def txn_abort(txn: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Abort transaction TXN (its messages are dropped)."""
    with connect(url) as client:
        _show_end(client.abort(txn), as_json)


@txn_app.command("show")
def txn_show(txn: str, url: UrlOption = DEFAULT_URL, as_json: JsonOption = False) -> None:
    """Show transaction TXN."""
    with connect(url) as client:
        data = client.get_transaction(txn)
    if as_json:
        print_json(data)
    else:
        _show_txn(data)


@txn_app.command("list")
def txn_list(
    state: Annotated[str | None, typer.Option(help="Only transactions in this state.")] = None,
    label_prefix: Annotated[str | None, typer.Option(help="Only labels with this prefix.")] = None,
    url: UrlOption = DEFAULT_URL,
    as_json: JsonOption = False,
) -> None:
    """List transactions: id, state, label."""
    with connect(url) as client:
        items = client.list_transactions(state=state, label_prefix=label_prefix)
    if as_json:
        print_json({"transactions": items})
        return
    for item in items:
        typer.echo(f"{item['txn']}\t{item['state']}\t{dash(item.get('label'))}")
