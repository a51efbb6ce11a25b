"""``txnstream produce``: keys, key per line, files, raw bytes, properties, --raw, the
idempotent producer, --format; bad input is a one-line usage error."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from cli_support import Cli, json_lines


def _read_all(cli: Cli, topic: str) -> list[dict[str, Any]]:
    out = cli("consume", topic, "--from", "earliest", "--json", "--max", "1000").stdout
    return [json.loads(line) for line in out.splitlines()]


def test_key_properties_raw_and_format(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    out = cli(
        "produce",
        name,
        '{"n": 1}',
        "two",
        "--key",
        "k",
        "-p",
        "a=b",
        "--property",
        "c=d=e",
        "--format",
        "%p|%k|%h|%v\\n",
    ).stdout
    assert out.splitlines() == ['0:0|k|a=b,c=d=e|{"n": 1}', "0:1|k|a=b,c=d=e|two"]
    cli("produce", name, '{"n": 3}', "--raw")
    messages = _read_all(cli, name)
    assert [m["value"] for m in messages] == [{"n": 1}, "two", '{"n": 3}']
    assert messages[0]["properties"] == {"a": "b", "c": "d=e"}
    assert messages[2]["key"] is None


def test_key_per_line(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    lines = 'k1:{"x": 1}\nno key here\nk2:a:b\n\n:empty key\n'
    assert len(cli("produce", name, "-K", ":", stdin=lines).stdout.split()) == 4
    messages = _read_all(cli, name)
    assert [(m["key"], m["value"]) for m in messages] == [
        ("k1", {"x": 1}),
        (None, "no key here"),
        ("k2", "a:b"),
        ("", "empty key"),
    ]


def test_file_lines_and_binary(cli: Cli, name: str, tmp_path: Path) -> None:
    cli("topics", "create", name)
    lines = tmp_path / "lines.txt"
    lines.write_text('{"a": 1}\r\nplain\n', encoding="utf-8")
    blob = bytes(range(256)) + b"\n\xff\xfe\x00"
    binary = tmp_path / "blob.bin"
    binary.write_bytes(blob)
    cli("produce", name, "--file", str(lines))
    cli("produce", name, "--file", str(binary), "--binary", "--key", "file")
    cli("produce", name, "--binary", stdin=b"\x00\x01 stdin \xff")
    messages = _read_all(cli, name)
    assert [m.get("value") for m in messages[:2]] == [{"a": 1}, "plain"]
    assert base64.b64decode(messages[2]["value_b64"]) == blob
    assert messages[2]["key"] == "file"
    assert base64.b64decode(messages[3]["value_b64"]) == b"\x00\x01 stdin \xff"
    # %v writes bytes raw: the value comes back byte for byte.
    raw = cli("consume", name, "--from", messages[2]["position"], "--max", "1", "--format", "%v")
    assert raw.stdout_bytes == blob


def test_binary_input_without_binary_is_a_usage_error(cli: Cli, cli_proc: Cli, name: str) -> None:
    cli("topics", "create", name)
    for run in (cli, cli_proc):  # the subprocess: no traceback from the real entry point
        failed = run("produce", name, stdin=b"\xff\xfe\x00\n", ok=False)
        assert failed.returncode == 2
        assert failed.stderr.strip() == (
            "error: the input is not UTF-8 text; use --binary to send raw bytes"
        )
    assert _read_all(cli, name) == []


def test_idempotent_producer(cli: Cli, name: str) -> None:
    cli("topics", "create", name)
    first = cli("produce", name, "a", "b", "--producer", "p1", "--sequence", "0", "--json")
    assert json_lines(first.stdout) == [
        {"position": "0:0", "duplicate": False},
        {"position": "0:1", "duplicate": False},
    ]
    again = cli("produce", name, "a", "b", "--producer", "p1", "--sequence", "0")
    assert "duplicate" in again.stderr
    assert again.stdout.split() == ["0:0", "0:1"]  # the original positions
    # stdin in batches of one: the sequence counts up per message.
    cli(
        "produce", name, "--producer", "p2", "--sequence", "10", "--batch-size", "1", stdin="x\ny\n"
    )
    replay = cli("produce", name, "y", "--producer", "p2", "--sequence", "11", "--json")
    assert json.loads(replay.stdout)["duplicate"] is True
    assert [m["value"] for m in _read_all(cli, name)] == ["a", "b", "x", "y"]


def test_usage_and_request_errors(cli: Cli, name: str, tmp_path: Path) -> None:
    cli("topics", "create", name)
    usage = [
        ("produce", name, "a", "--producer", "p"),
        ("produce", name, "a", "--sequence", "1"),
        ("produce", name, "--key", "k", "-K", ":"),
        ("produce", name, "a", "--binary"),
        ("produce", name, "-K", ":", "--binary"),
        ("produce", name, "a", "--property", "novalue"),
        ("produce", name, "--file", str(tmp_path / "missing.txt")),
        ("produce", name, "a", "--json", "--format", "%v"),
        ("produce", name, "a", "--format", "%z"),
        ("produce", name, "a", "--sequence", "-1", "--producer", "p"),
        ("produce",),
    ]
    for args in usage:
        failed = cli(*args, ok=False)
        assert failed.returncode == 2, (args, failed.stderr)
        assert failed.stderr.startswith("error: "), (args, failed.stderr)
        assert len(failed.stderr.strip().splitlines()) == 1, (args, failed.stderr)
    assert _read_all(cli, name) == []
    missing = cli("produce", f"{name}-missing", "a", ok=False)
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith("(not_found, HTTP 404)")
    closed = cli("produce", name, "a", "--txn", "txn-does-not-exist", ok=False)
    assert closed.returncode == 1
