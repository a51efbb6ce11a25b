"""Store locations: a path is a SQLite data directory, a postgresql:// URL a PostgreSQL
store, and any other scheme:// an error (not a directory named after the scheme)."""

from __future__ import annotations

from pathlib import Path

import pytest

from txnstream.ledger import InvalidArgumentError, PostgresUrl, store_location

pytestmark = pytest.mark.timeout(10)


@pytest.mark.parametrize(
    "value",
    [
        "data",
        "./data",
        "/var/lib/txnstream",
        "relative/dir with spaces",
        "postgresql:",  # no "//": a (strange) directory name, as before
        "dir:with:colons",
    ],
)
def test_paths_are_sqlite_data_directories(value: str) -> None:
    assert store_location(value) == Path(value)
    assert store_location(Path(value)) == Path(value)


@pytest.mark.parametrize(
    "value",
    [
        "postgresql://user@127.0.0.1:5432/txnstream",
        "postgres://user@localhost/txnstream",
        "postgresql://h1:5432,h2:5433/db?target_session_attrs=read-write",
        "postgresql://u@[::1]:5432/db?connect_timeout=2&application_name=txnstream",
        "postgresql:///db?host=/var/run/postgresql",
        "postgresql://",
    ],
)
def test_postgresql_urls_are_postgresql_stores(value: str) -> None:
    location = store_location(value)
    assert location == PostgresUrl(value)


def test_the_scheme_is_matched_without_regard_to_case() -> None:
    assert store_location("PostgreSQL://h/db") == PostgresUrl("postgresql://h/db")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("mysql://h/db", "unknown store URL scheme 'mysql'"),
        ("s3://bucket/prefix", "unknown store URL scheme 's3'"),
        ("file:///var/lib/txnstream", "unknown store URL scheme 'file'"),
        ("postgresql://h/db?bogus=1", 'invalid URI query parameter: "bogus"'),
        ("postgresql://h:port/db", "port 'port' is not a number"),
        ("postgresql://h:99999/db", "port '99999' is not a number from 1 to 65535"),
        ("postgresql://h1,h2/db?port=1,2,3", "3 ports for 2 hosts"),
        ("postgresql://%zz/db", "invalid percent-encoded token"),
        ("", "empty"),
        ("  ", "empty"),
    ],
)
def test_anything_else_is_a_clear_error(value: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as raised:
        store_location(value)
    assert isinstance(raised.value, ValueError)


def test_passwords_never_show_in_errors_or_reprs() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        store_location("mysql://me:s3cret@h/db")
    assert "s3cret" not in str(raised.value)
    assert "me:***@h" in str(raised.value)
    with pytest.raises(InvalidArgumentError) as raised:
        store_location("postgresql://me:s3cret@h:x/db")
    assert "s3cret" not in str(raised.value)
    location = store_location("postgresql://me:s3cret@h/db?password=other&sslmode=disable")
    assert isinstance(location, PostgresUrl)
    assert "s3cret" in location.url  # what libpq connects with
    shown = f"{location} {location!r}"
    assert "s3cret" not in shown
    assert "other" not in shown
    assert "postgresql://me:***@h/db?password=***&sslmode=disable" in shown


def test_a_location_of_another_type_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="not int"):
        store_location(5)  # type: ignore[arg-type]
