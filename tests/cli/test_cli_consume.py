"""``txnstream consume``: --from without a subscription (read_committed filtering done by the
client), an existing subscription's own type, the notice about a blocking transaction,
and --format."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO

from cli_support import REPO, Cli, cli_env, subscriptions


def _values(out: str) -> list[object]:
    return [json.loads(line).get("value") for line in out.splitlines()]


def _history(cli: Cli, topic: str) -> dict[str, str]:
    """a (plain), b (committed txn), c (aborted txn), d (plain): positions by value."""
    cli("topics", "create", topic)
    positions = {"a": cli("produce", topic, "a").stdout.strip()}
    committed = cli("txn", "begin").stdout.strip()
    positions["b"] = cli("produce", topic, "b", "--txn", committed).stdout.strip()
    aborted = cli("txn", "begin").stdout.strip()
    positions["c"] = cli("produce", topic, "c", "--txn", aborted).stdout.strip()
    cli("txn", "commit", committed)
    cli("txn", "abort", aborted)
    positions["d"] = cli("produce", topic, "d").stdout.strip()
    return positions


def test_from_reads_committed_data_only(cli: Cli, name: str) -> None:
    positions = _history(cli, name)
    entries = [
        json.loads(line)
        for line in cli("consume", name, "--from", "earliest", "--json").stdout.splitlines()
    ]
    assert [e["value"] for e in entries] == ["a", "b", "d"]  # no markers, no aborted data
    assert {e["kind"] for e in entries} == {"data"}
    from_b = cli("consume", name, "-o", positions["b"], "--json").stdout
    assert _values(from_b) == ["b", "d"]
    assert _values(cli("consume", name, "--from", "earliest", "--max", "2", "--json").stdout) == [
        "a",
        "b",
    ]
    uncommitted = cli(
        "consume", name, "--from", "earliest", "--isolation", "read_uncommitted", "--json"
    )
    assert _values(uncommitted.stdout) == ["a", "b", "c", "d"]
    assert cli("consume", name, "--from", "latest", "--wait-ms", "0").stdout == ""
    # Nothing was acknowledged and no subscription made.
    assert subscriptions(cli, name) == {}


def test_from_usage_errors(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    for args in (
        ("consume", name),
        ("consume", name, "s", "--from", "earliest"),
        ("consume", name, "--from", "0:x"),
        ("consume", name, "--from", "earliest", "--type", "shared"),
        ("consume", name, "--from", "earliest", "--consumer", "c9"),
        ("consume", name, "s", "--type", "fanout"),
        ("consume", name, "s", "--isolation", "dirty"),
        ("consume", name, "s", "--max", "0"),
    ):
        failed = cli(*args, ok=False)
        assert failed.returncode == 2, (args, failed.stderr)
        assert len(failed.stderr.strip().splitlines()) == 1, (args, failed.stderr)
    missing = cli("consume", f"{name}-missing", "--from", "earliest", ok=False)
    assert missing.returncode == 1
    assert "not_found" in missing.stderr


def test_an_existing_subscription_keeps_its_type(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    cli("produce", name, "one", "two")
    cli("sub", "create", name, "billing", "--type", "shared")
    # The README case: created as shared elsewhere, consumed without --type.
    one = cli("consume", name, "billing", "--max", "1", "--no-header").stdout
    assert one.split("\t")[2].strip() == '"one"'
    assert cli("consume", name, "billing", "--consumer", "other").stdout.count("\n") == 2
    conflict = cli("consume", name, "billing", "--type", "exclusive", ok=False)
    assert conflict.returncode == 1
    assert "conflict" in conflict.stderr
    cli("sub", "create", name, "loose", "--type", "key_shared", "--isolation", "read_uncommitted")
    cli("consume", name, "loose", "--wait-ms", "0")
    subs = subscriptions(cli, name)
    assert (subs["loose"]["type"], subs["loose"]["isolation"]) == ("key_shared", "read_uncommitted")
    # A new subscription is exclusive unless told otherwise.
    cli("consume", name, "fresh", "--wait-ms", "0")
    cli("consume", name, "later", "--wait-ms", "0", "--initial-position", "latest")
    subs = subscriptions(cli, name)
    assert subs["fresh"]["type"] == "exclusive"
    assert subs["later"]["backlog"] == 0


def test_consume_names_the_transaction_in_the_way(cli: Cli, name: str, server_url: str) -> None:
    cli("topics", "create", name)
    cli("produce", name, "before")
    txn = cli("txn", "begin", "--label", f"{name}:stuck").stdout.strip()
    cli("produce", name, "inside", "--txn", txn)
    cli("produce", name, "after")
    for args in (("s",), ("--from", "earliest")):
        ran = cli("consume", name, *args, "--wait-ms", "100", "--no-header")
        assert ran.stdout.count("\t") == 2  # "before" only
        notices = ran.stderr.strip().splitlines()
        assert len(notices) == 1, ran.stderr
        assert notices[0].startswith(f"waiting: open transaction {txn} holds the stable position")
        assert f"txnstream txn abort {txn}" in notices[0]
    stats = cli("topics", "stats", name).stdout
    assert f"blocking_txn: {txn} since" in stats
    # --follow says it once however long it waits, and goes on when the txn ends.
    args = ["consume", name, "--from", "earliest", "--follow", "--max", "2", "--format", "%v\\n"]
    out, err = _follow_past_an_open_txn(server_url, args, lambda: cli("txn", "abort", txn))
    assert out.decode().splitlines() == ["before", "after"]
    assert err.decode().count("waiting: open transaction") == 1, err
    assert "blocking_txn: -" in cli("topics", "stats", name).stdout


def test_format_tokens(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    cli("produce", name, '{"v": 1}', "--key", "k", "-p", "p=1")
    fmt = "%t|%p|%k|%v|%x|%h|%r|%S|%%|\\t|\\\\\\n"
    line = cli("consume", name, "s", "--format", fmt).stdout
    assert line == f'{name}|0:0|k|{{"v": 1}}||p=1|0|8|%|\t|\\\n'
    stamped = cli("consume", name, "--from", "earliest", "--format", "%T %r.\\n").stdout
    assert stamped.endswith("Z .\n")  # publish time; no redelivery count outside a subscription
    for bad in ("%", "%q", "\\x"):
        failed = cli("consume", name, "s", "--format", bad, ok=False)
        assert failed.returncode == 2
        assert "--format" in failed.stderr


def test_consume_prints_everything_to_the_end_and_exits(cli: Cli, name: str) -> None:
    """Issue 31 item 5: no silent cap of 100; --max limits; -e exits at the end at once."""
    cli("topics", "create", name)
    cli("produce", name, stdin="".join(f"{i}\n" for i in range(250)))
    everything = cli("consume", name, "--from", "earliest", "--json").stdout
    assert _values(everything) == list(range(250))
    seven = cli("consume", name, "--from", "earliest", "--json", "--max", "7").stdout
    assert _values(seven) == list(range(7))
    through_sub = cli("consume", name, "s", "--json", "-e").stdout
    assert _values(through_sub) == list(range(250))
    started = time.monotonic()
    assert cli("consume", name, "s", "--exit-at-end", "--wait-ms", "10000").stdout == ""
    assert cli("consume", name, "--from", "latest", "-e", "--wait-ms", "10000").stdout == ""
    assert time.monotonic() - started < 8  # -e did not wait --wait-ms for a first message
    both = cli("consume", name, "s", "-e", "--follow", ok=False)
    assert both.returncode == 2
    assert "exclude each other" in both.stderr


def test_from_the_last_n_and_from_a_time(cli: Cli, name: str) -> None:
    """--from -N: the last N messages a consumer sees (markers and aborted data take
    positions too); --from @TIME and sub seek @TIME: by publish time."""
    _history(cli, name)  # a, b (committed), c (aborted), d
    cli("produce", name, "e", "f")
    assert _values(cli("consume", name, "--from", "-3", "--json").stdout) == ["d", "e", "f"]
    assert _values(cli("consume", name, "--from", "-2", "--json").stdout) == ["e", "f"]
    assert _values(cli("consume", name, "--from", "-100", "--json").stdout) == list("abdef")
    entries = [
        json.loads(line)
        for line in cli("consume", name, "--from", "-2", "--json").stdout.splitlines()
    ]
    when = entries[0]["publish_time"]  # "e"'s: "f" was published with it
    assert _values(cli("consume", name, "--from", f"@{when}", "--json").stdout)[-2:] == ["e", "f"]
    assert cli("consume", name, "--from", "@9999-01-01T00:00:00Z", "-e").stdout == ""
    cli("sub", "create", name, "s")
    cli("consume", name, "s", "-e")
    sought = cli("sub", "seek", name, "s", f"@{when}").stdout
    assert sought.startswith(f"seeked s of {name} to ")
    assert _values(cli("consume", name, "s", "--json", "-e").stdout)[-2:] == ["e", "f"]
    for bad in ("-0", "-x", "@"):
        failed = cli("consume", name, "--from", bad, ok=False)
        assert failed.returncode == 2, bad
    late = cli("consume", name, "--from", "@never", ok=False)
    assert late.returncode == 1
    assert "ISO 8601" in late.stderr


def test_json_lines_and_header_lines(cli: Cli, name: str) -> None:
    """Issue 31 item 6: --json is one object per line (a listing: one per item); the
    tab-separated listings have a header line unless --no-header."""
    cli("topics", "create", name)
    cli("produce", name, "x")
    cli("sub", "create", name, "s1")
    cli("sub", "create", name, "s2")
    txn = cli("txn", "begin", "--label", f"{name}:j").stdout.strip()
    for args in (
        ("sub", "list", name),
        ("txn", "list", "--label-prefix", f"{name}:"),
        ("topics", "list"),
        ("consume", name, "--from", "earliest"),
        ("sub", "peek", name, "s1"),
    ):
        lines = cli(*args, "--json").stdout.splitlines()
        assert lines, args
        assert all(isinstance(json.loads(line), dict) for line in lines), args
    subs = [json.loads(line) for line in cli("sub", "list", name, "--json").stdout.splitlines()]
    assert [s["subscription"] for s in subs] == ["s1", "s2"]
    txns = cli("txn", "list", "--label-prefix", f"{name}:", "--json").stdout.splitlines()
    assert [json.loads(line)["txn"] for line in txns] == [txn]
    header = {
        ("sub", "list", name): "SUBSCRIPTION\tTYPE\tISOLATION\tBACKLOG",
        ("txn", "list", "--label-prefix", f"{name}:"): "TXN\tSTATE\tAGE\tDEADLINE",
        ("consume", name, "--from", "earliest"): "POSITION\tKEY\tVALUE",
        ("sub", "peek", name, "s1"): "POSITION\tKEY\tVALUE",
    }
    for args, first in header.items():
        shown = cli(*args).stdout.splitlines()
        assert shown[0].startswith(first), (args, shown)
        bare = cli(*args, "--no-header").stdout.splitlines()
        first_column = [line.split("\t")[0] for line in bare]  # (a transaction's age ticks)
        assert first_column == [line.split("\t")[0] for line in shown[1:]], args
    cli("txn", "abort", txn)


def test_from_latest_gets_what_an_open_transaction_held_back(
    cli: Cli, name: str, server_url: str
) -> None:
    """``--from latest`` (read_committed) starts at the stable position: what was not
    readable yet when it started (an open transaction's messages and those behind them)
    comes once the transaction commits, as with Kafka's last stable offset."""
    cli("topics", "create", name)
    cli("produce", name, "old")
    txn = cli("txn", "begin").stdout.strip()
    cli("produce", name, "inside", "--txn", txn)
    cli("produce", name, "behind")
    args = ["consume", name, "--from", "latest", "--follow", "--max", "3", "--format", "%v\\n"]

    def commit_and_produce() -> None:
        cli("txn", "commit", txn)
        cli("produce", name, "new")

    out, _ = _follow_past_an_open_txn(server_url, args, commit_and_produce)
    assert out.decode().splitlines() == ["inside", "behind", "new"]


def _follow_past_an_open_txn(
    server_url: str, args: list[str], then: Callable[[], object]
) -> tuple[bytes, bytes]:
    """Run ``txnstream *args`` (a follower), wait until it says an open transaction
    holds it back, run ``then()``, and return its stdout and stderr once it exits 0."""
    with subprocess.Popen(
        [sys.executable, "-m", "txnstream", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(server_url),
        cwd=REPO,
    ) as follower:
        assert follower.stderr is not None
        # held behind the open transaction: its notice comes once it has polled there
        seen = _read_until(follower.stderr, b"waiting: open transaction", timeout=30)
        then()
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, seen + err
    return out, seen + err


def _read_until(stream: IO[bytes], marker: bytes, timeout: float) -> bytes:
    """What ``stream`` (a child's pipe) says until a line holding ``marker`` (bounded)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} within {timeout} s: {seen!r}"
        ready, _, _ = select.select([stream], [], [], left)
        if ready:
            line = stream.readline()
            assert line, f"the child closed its pipe before {marker!r}: {seen!r}"
            seen += line
    return seen
