"""The adapter rule for ``api/http``: project code only through the ``txnstream.api`` root.

An ast walk over every module of the package: an import of a project module must resolve
to exactly ``txnstream.api`` (or ``txnstream``, which re-exports it) or to a module of
``txnstream.api.http`` itself, never to a private engine module (``txnstream.api._engine``),
another adapter or a lower layer (``txnstream.ledger`` ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "txnstream.api.http"
PACKAGE_DIR = REPO / "api" / "http"
PUBLIC = frozenset({"txnstream", "txnstream.api"})


def _package_of(path: Path) -> str:
    """The package a relative import in ``path`` starts from (``txnstream.api.http``)."""
    return ".".join(("txnstream", *path.relative_to(REPO).parts[:-1]))


def _imports(source: str, package: str) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in ``source``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            # `from . import _x`, `from txnstream.api import _engine`, `... import spark`
            # import modules: check those names too.
            found.extend(
                (node.lineno, f"{name}.{alias.name}")
                for alias in node.names
                if alias.name.startswith("_") or _is_module(f"{name}.{alias.name}")
            )
    return found


def _is_module(dotted: str) -> bool:
    path = REPO.joinpath(*dotted.split(".")[1:])
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _allowed(name: str) -> bool:
    if name.split(".")[0] != "txnstream":
        return True
    return name in PUBLIC or name == PACKAGE or name.startswith(f"{PACKAGE}.")


def _violations(root: Path) -> list[str]:
    return [
        f"{path.relative_to(REPO)}:{line}: imports {name}"
        for path in sorted(root.rglob("*.py"))
        for line, name in _imports(path.read_text(), _package_of(path))
        if not _allowed(name)
    ]


def test_http_imports_project_code_only_from_the_api_root() -> None:
    assert PACKAGE_DIR.is_dir()
    assert _violations(PACKAGE_DIR) == []


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ("from txnstream.ledger import Position\n", "txnstream.ledger"),
        ("import txnstream.dispatcher\n", "txnstream.dispatcher"),
        ("from txnstream.api._engine import Engine\n", "txnstream.api._engine"),
        ("from .._metrics import render\n", "txnstream.api._metrics"),
        ("from .. import _engine\n", "txnstream.api._engine"),
        ("from txnstream.api import Engine, _engine\n", "txnstream.api._engine"),
        ("from txnstream.api import spark\n", "txnstream.api.spark"),
        ("from txnstream.api.client import Client\n", "txnstream.api.client"),
        ("from txnstream import Engine\nfrom ._json import ok\nfrom . import _json\n", None),
        ("from txnstream.api import Engine\n", None),
        ("import fastapi\nfrom typing import _SpecialForm\n", None),
    ],
)
def test_the_walk_catches_each_kind_of_import(source: str, bad: str | None) -> None:
    names = [name for _, name in _imports(source, PACKAGE)]
    assert [name for name in names if not _allowed(name)] == ([] if bad is None else [bad])
