"""Where a store lives: a SQLite data directory (a path) or a PostgreSQL database (a URL).

:func:`store_location` classifies what a user gives where a data directory goes today
(``Engine.open``, ``serve --store``, ``TXNSTREAM_STORE``): a ``postgresql://`` or
``postgres://`` URL (libpq's, so multi-host URLs such as
``postgresql://h1:5432,h2:5432/db?target_session_attrs=read-write`` work as with psql) is
a PostgreSQL store; any other ``scheme://`` is an error rather than a relative directory
named after the scheme; everything else is a filesystem path.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ._errors import InvalidArgumentError

POSTGRES_SCHEMES = ("postgresql", "postgres")

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")
_USERINFO_PASSWORD = re.compile(r"^([^/?#]*?://[^:@/?#]*):[^@/?#]*@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


@dataclass(frozen=True)
class PostgresUrl:
    """A PostgreSQL store's URL, as libpq takes it (password included)."""

    url: str

    def __str__(self) -> str:
        return redact(self.url)

    def __repr__(self) -> str:
        return f"PostgresUrl({redact(self.url)!r})"


def redact(url: str) -> str:
    """``url`` with any password (in the user info or a ``password=`` parameter) shown as
    ``***``: for logs, errors and health answers."""
    url = _USERINFO_PASSWORD.sub(r"\1:***@", url)
    return _QUERY_PASSWORD.sub(r"\1***", url)


def store_location(value: str | os.PathLike[str]) -> Path | PostgresUrl:
    """Classify a store location: a :class:`PostgresUrl` for ``postgresql://`` and
    ``postgres://`` URLs (checked by libpq's parser), else a data directory path.

    Raises :class:`~txnstream.ledger.InvalidArgumentError` for an empty location, a
    malformed PostgreSQL URL, or any other ``scheme://``.
    """
    if isinstance(value, os.PathLike):
        return Path(value)
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"a store location is a path or a postgresql:// URL, not {type(value).__name__}"
        )
    if not value.strip():
        raise InvalidArgumentError("the store location is empty")
    match = _SCHEME.match(value)
    if match is None:
        return Path(value)
    scheme = match.group(1).lower()
    if scheme not in POSTGRES_SCHEMES:
        raise InvalidArgumentError(
            f"unknown store URL scheme {match.group(1)!r} in {redact(value)!r}: a store is a"
            " data directory path (SQLite) or a postgresql:// URL (PostgreSQL)"
        )
    url = scheme + value[len(match.group(1)) :]  # libpq knows only the lowercase schemes
    # imported here: psycopg costs ~0.2 s to import, and a SQLite engine never needs it
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except ProgrammingError as exc:
        raise InvalidArgumentError(
            f"malformed PostgreSQL URL {redact(value)!r}: {_first_line(exc)}"
        ) from None
    problem = _port_problem(str(params.get("host", "")), str(params.get("port", "")))
    if problem:
        raise InvalidArgumentError(f"malformed PostgreSQL URL {redact(value)!r}: {problem}")
    return PostgresUrl(url)


def _port_problem(hosts: str, ports: str) -> str | None:
    """What is wrong with a URL's ports (libpq's parser leaves them to connect time)."""
    if not ports:
        return None
    listed = ports.split(",")
    for port in listed:
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            return f"port {port!r} is not a number from 1 to 65535"
    if len(listed) > 1 and len(listed) != len(hosts.split(",")):
        return f"{len(listed)} ports for {len(hosts.split(','))} hosts"
    return None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or ["invalid"])[0]
