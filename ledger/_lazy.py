"""Lazy package attributes (PEP 562), as pydantic's ``__init__`` loads its names."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(
    package: str, names: Mapping[str, str], exported: list[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each of ``names`` is imported from its
    module (relative to ``package`` when it starts with a dot) on first use and kept as a
    plain attribute; ``exported`` (its ``__all__``) is what ``dir()`` adds."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        vars(importlib.import_module(package))[name] = value  # once loaded, a plain attribute
        return value

    def dir_() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *exported})

    return getattr_, dir_
