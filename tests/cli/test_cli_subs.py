"""``txnstream sub list|create|delete|seek|peek`` and the transaction tools (``txn list
--older-than``, ``txn abort``, ``txn show``)."""

from __future__ import annotations

import json
from typing import Any

from cli_support import Cli, subscriptions


def _subs(cli: Cli, topic: str) -> dict[str, Any]:
    return subscriptions(cli, topic)


def test_create_list_delete(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    created = cli("sub", "create", name, "s1", "--type", "shared")
    assert created.stdout.strip() == f"created subscription s1 of {name}"
    again = cli("sub", "create", name, "s1", "--type", "shared", "--json")
    assert json.loads(again.stdout) == {"topic": name, "subscription": "s1", "created": False}
    conflict = cli("sub", "create", name, "s1", ok=False)  # exclusive by default: differs
    assert conflict.returncode == 1
    assert "conflict" in conflict.stderr
    cli(
        "sub",
        "create",
        name,
        "s2",
        "--initial-position",
        "latest",
        "--isolation",
        "read_uncommitted",
    )
    lines = cli("sub", "list", name).stdout.splitlines()
    assert [line.split("\t")[:3] for line in lines] == [
        ["SUBSCRIPTION", "TYPE", "ISOLATION"],
        ["s1", "shared", "read_committed"],
        ["s2", "exclusive", "read_uncommitted"],
    ]
    assert set(_subs(cli, name)) == {"s1", "s2"}
    assert cli("sub", "delete", name, "s1").stdout.strip() == f"deleted subscription s1 of {name}"
    assert set(_subs(cli, name)) == {"s2"}
    gone = cli("sub", "delete", name, "s1", ok=False)
    assert gone.returncode == 1
    assert "not_found" in gone.stderr
    bad = cli("sub", "create", name, "s3", "--type", "fanout", ok=False)
    assert bad.returncode == 2


def test_peek_changes_nothing(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    cli("produce", name, "a", "b", "c", "d")
    aborted = cli("txn", "begin").stdout.strip()
    cli("produce", name, "dropped", "--txn", aborted)
    cli("txn", "abort", aborted)
    cli("produce", name, "e")
    cli("sub", "create", name, "s")
    assert cli("consume", name, "s", "--max", "2", "--format", "%v\\n").stdout == "a\nb\n"
    before = _subs(cli, name)["s"]
    peeked = cli("sub", "peek", name, "s", "--format", "%p %v\\n").stdout.splitlines()
    assert [line.split()[1] for line in peeked] == ["c", "d", "e"]  # no aborted data
    one = cli("sub", "peek", name, "s", "--max", "1", "--no-header").stdout.splitlines()
    assert [line.split("\t")[2] for line in one] == ['"c"']
    assert _subs(cli, name)["s"] == before  # backlog, mark-delete, consumers untouched
    # A consumer still gets them, first delivery (peek did not receive or nack).
    received = [
        json.loads(line) for line in cli("consume", name, "s", "--json").stdout.splitlines()
    ]
    assert [(m["value"], m["redelivery_count"]) for m in received] == [
        ("c", 0),
        ("d", 0),
        ("e", 0),
    ]
    assert cli("sub", "peek", name, "s").stdout == ""
    missing = cli("sub", "peek", name, "nope", ok=False)
    assert missing.returncode == 1
    assert "not_found" in missing.stderr


def test_seek(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    positions = cli("produce", name, "a", "b", "c").stdout.split()
    cli("consume", name, "s")  # acknowledges all three
    assert _subs(cli, name)["s"]["backlog"] == 0
    moved = cli("sub", "seek", name, "s", positions[1])
    assert moved.stdout.startswith(f"seeked s of {name} to {positions[1]}")
    assert cli("consume", name, "s", "--format", "%v\\n").stdout == "b\nc\n"
    cli("sub", "seek", name, "s", "earliest", "--json")
    assert _subs(cli, name)["s"]["backlog"] == 3
    cli("sub", "seek", name, "s", "latest")
    assert _subs(cli, name)["s"]["backlog"] == 0
    bad = cli("sub", "seek", name, "s", "yesterday", ok=False)
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: POSITION wants L:E")


def test_hanging_transaction_tools(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    txn = cli("txn", "begin", "--label", f"{name}:1", "--timeout-ms", "600000").stdout.strip()
    cli("produce", name, "x", "--txn", txn)
    prefix = ("--label-prefix", f"{name}:")
    old = cli("txn", "list", *prefix, "--older-than", "0s").stdout.splitlines()
    assert len(old) == 2
    assert old[0].split("\t") == ["TXN", "STATE", "AGE", "DEADLINE", "LABEL", "TOPICS"]
    fields = old[1].split("\t")
    assert fields[:2] == [txn, "open"]
    assert fields[2].endswith("s")  # its age
    assert fields[3].endswith("Z")  # its deadline
    assert fields[4:] == [f"{name}:1", name]
    assert cli("txn", "list", *prefix, "--older-than", "5m").stdout == ""
    assert cli("txn", "list", *prefix, "--older-than", "1h30m", "--json").stdout == ""
    for bad in ("5 minutes", "m", "-1s"):
        failed = cli("txn", "list", "--older-than", bad, ok=False)
        assert failed.returncode == 2, bad
        assert "--older-than" in failed.stderr
    shown = cli("txn", "show", txn).stdout
    assert "created_at: " in shown
    assert "deadline: " in shown
    assert cli("txn", "abort", txn).stdout.strip() == f"aborted {txn}"
    assert "reason: client" in cli("txn", "show", txn).stdout
    late = cli("txn", "commit", txn, ok=False)
    assert late.returncode == 1
    assert "txn_not_open" in late.stderr
