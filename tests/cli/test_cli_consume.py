"""``txnstream consume``: --from without a subscription (read_committed filtering done by the
client), an existing subscription's own type, the notice about a blocking transaction,
and --format."""

from __future__ import annotations

import json
import subprocess
import sys
import time

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
    with subprocess.Popen(
        [sys.executable, "-m", "txnstream", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(server_url),
        cwd=REPO,
    ) as follower:
        time.sleep(2.5)  # several polls behind the open transaction
        cli("txn", "abort", txn)
        out, err = follower.communicate(timeout=30)
    assert follower.returncode == 0, err
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
