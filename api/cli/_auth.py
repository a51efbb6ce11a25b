"""``txnstream auth token``: a new random token and the line for the principals file."""

from __future__ import annotations

import hashlib
import secrets
from typing import Annotated

import typer

from ._common import JsonOption, print_json

auth_app = typer.Typer(
    help="Tokens for `serve --auth FILE`.", no_args_is_help=True, rich_markup_mode=None
)


@auth_app.command("token")
def auth_token(
    nbytes: Annotated[
        int, typer.Option("--bytes", min=16, max=256, help="Random bytes in the token.")
    ] = 32,
    as_json: JsonOption = False,
) -> None:
    """Print a new random token, then its "sha256:<hex>" form for the principals file.

    Give the token to the client (--token / TXNSTREAM_TOKEN, or Spark's "token" option)
    and put only the sha256 line in the file: the server never needs the token itself.
    """
    token = secrets.token_urlsafe(nbytes)
    digest = "sha256:" + hashlib.sha256(token.encode("utf-8")).hexdigest()
    if as_json:
        print_json({"token": token, "sha256": digest})
    else:
        typer.echo(token)
        typer.echo(digest)
