"""``txnstream drill replay`` and ``drill snapshot`` on small data directories."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
from drill_support import REPO, drill, make_data, rows, sql

import txnstream.snapshots._store as snapshot_store
from txnstream.api.support import replay_check
from txnstream.ledger import TxnId
from txnstream.snapshots import TxnBufferSnapshot
from txnstream.txn_buffer import OpenTxn

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # small sealed segments, so recovery also reads segments
    monkeypatch.setattr(snapshot_store, "SEGMENT_SIZE", 4)
    return make_data(tmp_path / "data")


def test_replay_reports_equal_states_from_snapshot(data: Path) -> None:
    result = drill("replay", "--data", str(data))
    assert result.exit_code == 0, result.output
    assert "result: equal (2 topic(s)" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("│ ")]
    assert len(rows) == 2
    assert all(row.rstrip().endswith("yes  │") for row in rows), rows
    assert "none (full)" not in result.stdout  # both topics recovered from a snapshot
    results = {r.topic: r for r in asyncio.run(replay_check(data))}
    a = results["a"]
    assert a.equal
    assert a.from_snapshot
    assert a.snapshot_entries == 8  # the tail: 3 x (data, abort), the open txn's data, a send
    assert a.full_entries > a.snapshot_entries
    assert a.open_txns == 1
    assert results["b"].producers == 1


def test_damaged_newest_snapshot_falls_back_and_stays_equal(data: Path) -> None:
    assert sql(
        data,
        "UPDATE snapshots SET data = x'c1' WHERE snapshot_id ="
        " (SELECT max(snapshot_id) FROM snapshots s WHERE s.topic_id = snapshots.topic_id)",
    )
    result = drill("replay", "--data", str(data))
    assert result.exit_code == 0, result.output
    assert "result: equal" in result.stdout
    assert "unusable" in result.stdout  # the fallback is reported, not hidden
    assert "MISMATCH" not in result.stdout


def test_every_snapshot_damaged_full_replay_still_equal(data: Path) -> None:
    assert sql(data, "UPDATE snapshots SET data = x'00ff'")
    assert sql(data, "DELETE FROM snapshot_segments")
    result = drill("replay", "--data", str(data))
    assert result.exit_code == 0, result.output
    assert result.stdout.count("none (full)") == 2
    assert "result: equal" in result.stdout


def test_a_wrong_but_valid_snapshot_is_a_mismatch(data: Path) -> None:
    """A snapshot that decodes fine but lies: the drill must say so and exit 1."""
    ((topic_id,),) = rows(data, "SELECT topic_id FROM topics WHERE name = 'a'")
    ((snapshot_id, blob),) = rows(
        data,
        "SELECT snapshot_id, data FROM snapshots WHERE topic_id = ?"
        " ORDER BY snapshot_id DESC LIMIT 1",
        (topic_id,),
    )
    real = TxnBufferSnapshot.decode(blob)
    assert real.position is not None
    ghost = OpenTxn(real.position, None, real.position)
    forged = dataclasses.replace(real, ongoing={**real.ongoing, TxnId(999_999): ghost})
    sql(
        data,
        "INSERT INTO snapshots (topic_id, snapshot_id, ledger_id, entry_id, taken_ms, data)"
        " VALUES (?, ?, ?, ?, 0, ?)",
        (
            topic_id,
            snapshot_id + 1,
            real.position.ledger_id,
            real.position.entry_id,
            forged.encode(),
        ),
    )
    result = drill("replay", "--data", str(data))
    assert result.exit_code == 1, result.output
    assert "result: MISMATCH in 1 of 2 topic(s)" in result.stdout
    assert "open txn-999999: only after snapshot recovery" in result.stdout


def test_replay_of_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    result = drill("replay", "--data", str(tmp_path / "nothing"))
    assert result.exit_code == 2
    assert "no txnstream database" in result.stderr


def test_snapshot_command_takes_one_and_shows_it(data: Path) -> None:
    result = drill("snapshot", "--data", str(data), "--topic", "a")
    assert result.exit_code == 0, result.output
    shown = {
        cells[0]: cells[1]
        for line in result.stdout.splitlines()
        if line.startswith("│ ")
        for cells in [[c.strip() for c in line.strip("│ ").split("│")]]
    }
    assert shown["aborted txns"] == "19"  # 16 of the first 24 transactions, 3 in the tail
    assert shown["open txns"].startswith("1 (txn-")
    assert shown["position"] != shown["stable position"]  # the open txn holds it back
    assert int(shown["snapshot bytes"]) > 0
    # the new snapshot covers the whole log: recovery replays nothing after it
    a = next(r for r in asyncio.run(replay_check(data)) if r.topic == "a")
    assert a.from_snapshot
    assert a.equal
    assert str(a.snapshot_position) == shown["position"]
    assert a.snapshot_entries == 0


def test_snapshot_command_unknown_topic(data: Path) -> None:
    result = drill("snapshot", "--data", str(data), "--topic", "nope")
    assert result.exit_code == 1
    assert "not found" in result.stderr


def test_console_entry_point_registers_the_drills(data: Path) -> None:
    """`python -m txnstream drill replay` works: the drill group is part of `main`'s app."""
    proc = subprocess.run(
        [sys.executable, "-m", "txnstream", "drill", "replay", "--data", str(data)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=50,
        check=False,
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "result: equal" in proc.stdout
