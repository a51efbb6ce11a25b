"""The command line reads option values as typer's pydantic adapters do, without pydantic.

``txnstream.api.cli._coercion`` coerces plain values (str, bool, int, float with bounds,
Path, lists of them) itself so that a command starts without importing pydantic (issue
31, item 3). Here every such option of every command reads a set of awkward inputs both
ways: the same value, or the same one-line error.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from typer import _coercion, core

from txnstream.api.cli import app
from txnstream.api.cli._coercion import plain_parse

INPUTS: dict[Any, list[Any]] = {
    str: ["x", "", " a b ", "ü", "-1", "0:15", "@2026-11-27T04:00:00Z"],
    bool: ["true", "FALSE", " yes ", "", "0", "1", "on", "Off", "t", "maybe", "2", True, False],
    int: [
        *("0", "1", "-1", " 7 ", "+3", "1_000", "2.0", "2.", "1.5", "1e3", "0x10", "", "many"),
        *("\u0663", "99999999999999999999", "30000", "30001", "10000", "10001", "65536", 5),
    ],
    float: [
        *("0", "0.05", "0.1", "0.5", "1", "1.5", "inf", "-inf", "nan", "1e3", ".5", "1."),
        *("x", "", "\u0663", " 2 ", "1_0.5", "3600", "3601", "60", "61", 2, 2.5),
    ],
}


def _options() -> list[tuple[str, Any]]:
    """(command path and option, parameter) of every option a plain coercion reads."""
    found = []

    def walk(command: Any, path: str) -> None:
        for param in command.params:
            descriptor = getattr(param, "type_descriptor", None)
            if descriptor is not None and plain_parse(descriptor) is not None:
                found.append((f"{path} {param.opts[0] if param.opts else param.name}", param))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "txnstream")
    return found


OPTIONS = _options()


def _read(runtime: Any, param: Any, value: Any) -> tuple[str, Any]:
    ctx = typer.Context(typer.main.get_command(app))
    try:
        return "value", runtime.coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        return "error", exc.format_message()


def _inputs(annotation: Any, tmp_path: Path) -> list[Any]:
    if isinstance(annotation, type) and issubclass(annotation, Path):
        existing = tmp_path / "existing"
        existing.write_text("x")
        return [str(existing), str(tmp_path / "missing"), str(tmp_path), "-"]
    if getattr(annotation, "__origin__", None) is list:
        return [["a", "b"], ("x", ""), "one", []]
    return INPUTS[annotation]


def test_every_plain_option_is_coerced_here() -> None:
    """The client commands' options all take the pydantic-free way (and some exist)."""
    assert len(OPTIONS) > 100
    names = {where for where, _ in OPTIONS}
    for expected in ("topics list --url", "consume --max", "produce --batch-size", "produce"):
        assert any(name.startswith(f"txnstream {expected}") for name in names), expected
    for _, param in OPTIONS:
        runtime = param.get_runtime_param()
        assert not isinstance(runtime, _coercion.AdapterRuntimeParam), param.name


@pytest.mark.parametrize(("where", "param"), OPTIONS, ids=[where for where, _ in OPTIONS])
def test_values_read_as_typer_reads_them(where: str, param: Any, tmp_path: Path) -> None:
    descriptor = param.type_descriptor
    ours = core.build_runtime_param(descriptor)  # type: ignore[attr-defined]
    typers = _coercion.build_runtime_param(descriptor)  # pydantic's adapters
    assert isinstance(typers, _coercion.AdapterRuntimeParam)
    for value in _inputs(descriptor.annotation, tmp_path):
        expected = _read(typers, param, value)
        got = _read(ours, param, value)
        if expected[0] == "value" and isinstance(expected[1], float) and math.isnan(expected[1]):
            assert got[0] == "value", (where, value, got)
            assert math.isnan(got[1]), (where, value, got)
            continue
        assert got == expected, (where, value)
        assert type(got[1]) is type(expected[1]), (where, value)
