"""The ``txnstream`` command end to end against a live server (run in this process)."""

from __future__ import annotations

import json
from typing import Any

from cli_support import json_lines


def test_topics_commands(cli: Any, name: str) -> None:
    assert cli("topics", "create", name).stdout.strip() == f"created topic {name}"
    assert cli("topics", "create", name).stdout.strip() == f"topic {name} already exists"
    assert name in cli("topics", "list").stdout.split()
    listed = json_lines(cli("topics", "list", "--json").stdout)
    assert {"topic": name} in listed
    human = cli("topics", "stats", name).stdout
    assert f"topic: {name}" in human
    assert "open_txns: 0" in human
    stats = json.loads(cli("topics", "stats", name, "--json").stdout)
    assert stats["topic"] == name
    assert cli("topics", "delete", name).stdout.strip() == f"deleted topic {name}"
    failed = cli("topics", "delete", name, ok=False)
    assert failed.returncode == 1
    assert "not_found" in failed.stderr
    assert "HTTP 404" in failed.stderr


def test_produce_and_consume(cli: Any, name: str) -> None:
    cli("topics", "create", name)
    out = cli("produce", name, '{"order": 1}', "plain text", "42", "--key", "k1").stdout
    positions = out.split()
    assert len(positions) == 3
    produced = json_lines(cli("produce", name, "--json", stdin="line one\n[1, 2]\n\nNaN\n").stdout)
    assert len(produced) == 3
    assert [p["duplicate"] for p in produced] == [False] * 3

    lines = cli("consume", name, "s", "--json", "--max", "10").stdout.splitlines()
    messages = [json.loads(line) for line in lines]
    assert [m["value"] for m in messages] == [
        {"order": 1},
        "plain text",
        42,
        "line one",
        [1, 2],
        "NaN",
    ]
    assert messages[0]["key"] == "k1"
    # They were acknowledged: nothing left.
    assert cli("consume", name, "s", "--wait-ms", "0").stdout == ""


def test_consume_human_no_ack_and_follow(cli: Any, name: str) -> None:
    cli("topics", "create", name)
    cli("produce", name, "a", "b")
    human = cli("consume", name, "s", "--type", "shared", "--no-ack").stdout.splitlines()
    assert len(human) == 3
    assert human[0] == "POSITION\tKEY\tVALUE"  # the header line (none with --no-header)
    position, key, value = human[1].split("\t")
    assert (key, value) == ("-", '"a"')
    assert ":" in position
    # --follow stops after --max messages; the unacknowledged ones come back after a nack
    # (here: seek to earliest, as a person would).
    followed = cli("consume", name, "f", "--follow", "--max", "2", "--json").stdout
    assert [json.loads(line)["value"] for line in followed.splitlines()] == ["a", "b"]


def test_subscription_type_conflict_is_reported(cli: Any, name: str) -> None:
    cli("topics", "create", name)
    cli("consume", name, "s", "--type", "shared", "--wait-ms", "0")
    failed = cli("consume", name, "s", "--type", "exclusive", ok=False)
    assert failed.returncode == 1
    assert "conflict" in failed.stderr


def test_transaction_commands(cli: Any, name: str) -> None:
    cli("topics", "create", name)
    txn = cli("txn", "begin", "--label", f"{name}:1", "--timeout-ms", "60000").stdout.strip()
    assert txn
    cli("produce", name, "inside", "--txn", txn)
    shown = cli("txn", "show", txn).stdout
    assert "state: open" in shown
    assert f"topics: {name}" in shown
    assert cli("consume", name, "s", "--wait-ms", "0").stdout == ""
    assert cli("txn", "commit", txn).stdout.strip() == f"committed {txn}"
    assert '"inside"' in cli("consume", name, "s", "--wait-ms", "0").stdout
    listed = json_lines(cli("txn", "list", "--label-prefix", f"{name}:", "--json").stdout)
    assert [t["txn"] for t in listed] == [txn]

    other = json.loads(cli("txn", "begin", "--json").stdout)
    assert other["state"] == "open"
    assert cli("txn", "abort", other["txn"]).stdout.strip() == f"aborted {other['txn']}"
    failed = cli("txn", "commit", other["txn"], ok=False)
    assert failed.returncode == 1
    assert "txn_not_open" in failed.stderr


def test_client_errors(cli: Any) -> None:
    bad = cli("topics", "create", "__system", ok=False)
    assert bad.returncode == 1
    assert "invalid_request" in bad.stderr
    unreachable = cli("topics", "list", "--url", "http://127.0.0.1:9", ok=False)
    assert unreachable.returncode == 1
    assert "cannot reach the server" in unreachable.stderr
    assert cli("--help").stdout.count("serve") >= 1
    usage = cli("produce", ok=False)
    assert usage.returncode == 2


def test_topics_retention(cli: Any, name: str) -> None:
    """Issue 31 item 10: ``topics retention T --time 7d --size 10GiB``."""
    cli("topics", "create", name)
    assert cli("topics", "retention", name).stdout.strip() == (
        f"retention of {name}: keep everything"
    )
    shown = cli("topics", "retention", name, "--time", "7d", "--size", "10GiB").stdout
    assert shown.strip() == f"retention of {name}: time 604800000 ms, size 10737418240 bytes"
    stats = json.loads(cli("topics", "stats", name, "--json").stdout)
    assert stats["retention"]["time_ms"] == 604_800_000
    assert stats["retention"]["size_bytes"] == 10 * 1024**3
    assert "retention: time 604800000 ms" in cli("topics", "stats", name).stdout
    off = json.loads(cli("topics", "retention", name, "--time", "off", "--json").stdout)
    assert off == {"topic": name, "time_ms": None, "size_bytes": None}
    for bad in (("--time", "soon"), ("--size", "lots"), ("--time", "0s")):
        assert cli("topics", "retention", name, *bad, ok=False).returncode == 2, bad


def test_topics_ttl(cli: Any, name: str) -> None:
    """Issue 31 item 16: ``topics ttl T 1h|off``, shown in stats."""
    cli("topics", "create", name)
    assert cli("topics", "ttl", name).stdout.strip() == f"message TTL of {name}: off"
    assert cli("topics", "ttl", name, "1h").stdout.strip() == f"message TTL of {name}: 3600000 ms"
    assert json.loads(cli("topics", "stats", name, "--json").stdout)["ttl_ms"] == 3_600_000
    assert "message ttl: 3600000 ms" in cli("topics", "stats", name).stdout
    off = json.loads(cli("topics", "ttl", name, "off", "--json").stdout)
    assert off == {"topic": name, "ttl_ms": None}
    for bad in ("soon", "0s"):
        assert cli("topics", "ttl", name, bad, ok=False).returncode == 2, bad


def test_default_retention_spec() -> None:
    from txnstream.api import RetentionPolicy
    from txnstream.api.cli._config_flags import parse_retention

    assert parse_retention("7d,10GiB") == RetentionPolicy(max_age=604_800, max_bytes=10 * 1024**3)
    assert parse_retention("12h") == RetentionPolicy(max_age=43_200)
    assert parse_retention("500MB") == RetentionPolicy(max_bytes=500_000_000)
