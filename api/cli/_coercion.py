"""typer's value coercion without pydantic for the plain types the commands declare.

typer (0.29) checks every option's value with a pydantic ``TypeAdapter`` built when the
option is first parsed: importing pydantic and building the adapters of a client
command's few options took ~120-170 ms, about half of ``txnstream topics list``'s start
(issue 31, item 3). :func:`install` has typer coerce ``str``, ``bool``, ``int``,
``float`` (with ``min``/``max``), ``Path`` and lists of them here instead, with pydantic's
rules and messages (``tests/cli/test_cli_coercion.py`` compares the two option by option);
anything else (choices, dates, ``parser=``, ``clamp``, files) still goes to typer's
pydantic adapters, as do all options if typer's internals are not the ones this module
knows: the commands then parse the same, only slower to start.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args, get_origin

import typer

_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
# pydantic's integers from strings: ASCII digits, "_" between digits, a ".0..." tail
_INT = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.0+)?")

Parse = Callable[[Any], Any]


def parse_str(value: Any) -> str:
    """A command-line string (bytes, which Python 3's command line never gives, decoded
    as file names are)."""
    if value is None:
        raise ValueError("None is not a valid string")
    if isinstance(value, bytes):
        encoding = sys.getfilesystemencoding()
        return value.decode(encoding, "replace")
    return str(value)


def parse_bool(value: Any) -> bool:
    """pydantic's lax booleans (``yes``/``no``, ``on``/``off``, ``1``/``0``...); empty is
    false (typer's rule)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "":
            return False
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    raise ValueError("Input should be a valid boolean, unable to interpret input")


def parse_int(value: Any) -> int:
    """pydantic's lax integers: ``" 7 "``, ``"+3"``, ``"1_000"`` and ``"2.0"``, not
    ``"1.5"``, ``"1e3"`` or non-ASCII digits."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = value.strip() if isinstance(value, str) else None
    if text is None or not _INT.fullmatch(text):
        raise ValueError("Input should be a valid integer, unable to parse string as an integer")
    return int(text.split(".")[0])


def parse_float(value: Any) -> float:
    """pydantic's lax numbers: what :class:`float` reads, in ASCII."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    try:
        if not isinstance(value, str) or not value.isascii():
            raise ValueError
        return float(value)
    except ValueError:
        raise ValueError(
            "Input should be a valid number, unable to parse string as a number"
        ) from None


def _shown(bound: float) -> str:
    """A bound as pydantic writes it: ``60`` for 60.0, ``0.1``."""
    return str(int(bound)) if isinstance(bound, float) and bound.is_integer() else str(bound)


def bounded(parse: Parse, low: Any, high: Any) -> Parse:
    """``parse``, then pydantic's ``le``/``ge`` checks (NaN passes neither)."""

    def check(value: Any) -> Any:
        number = parse(value)
        if high is not None and not number <= high:  # first, as pydantic (NaN fails both)
            raise ValueError(f"Input should be less than or equal to {_shown(high)}")
        if low is not None and not number >= low:
            raise ValueError(f"Input should be greater than or equal to {_shown(low)}")
        return number

    return check


def _leaf(annotation: Any, info: Any) -> Parse | None:
    """How to coerce one value of ``annotation``, or None: typer's adapter does it."""
    if annotation is bool:
        return parse_bool
    if annotation is str:
        return parse_str
    if annotation in (int, float):
        parse = parse_int if annotation is int else parse_float
        if info.min is None and info.max is None:
            return parse
        return bounded(parse, info.min, info.max)
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return _path(annotation, info)
    return None


def _path(annotation: type[Path], info: Any) -> Parse | None:
    from typer._param_types import coerce_cli_path

    path_type = info.path_type or annotation
    if not (isinstance(path_type, type) and issubclass(path_type, Path)):
        return None

    def parse(value: Any) -> Any:
        # typer's own checks (exists, dir_okay...); a Path in hand needs no pydantic
        if isinstance(value, (str, os.PathLike)) and not isinstance(value, path_type):
            value = path_type(value)
        return coerce_cli_path(value, info, path_type=path_type)

    return parse


def plain_parse(descriptor: Any) -> Parse | None:
    """The coercion of a typer parameter's type descriptor, or None if it is not plain."""
    info = descriptor.parameter_info
    if descriptor.file_annotation is not None or info.parser is not None or info.clamp:
        return None
    annotation = descriptor.annotation
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        parse_item = _leaf(item, info)
        if parse_item is None:
            return None
        each: Parse = parse_item

        def parse_list(value: Any) -> list[Any]:
            values = value if isinstance(value, (list, tuple)) else [value]
            return [each(one) for one in values]

        return parse_list
    return _leaf(annotation, info)


def install() -> None:
    """Have typer coerce plain option values here (once, process-wide)."""
    try:
        from typer import _coercion, core
    except ImportError:  # another typer: its own coercion (slower to start, same result)
        return
    original = getattr(core, "build_runtime_param", None)
    base = getattr(_coercion, "RuntimeParam", None)
    if original is None or base is None or getattr(original, "_txnstream", False):
        return

    @dataclass(frozen=True)
    class PlainRuntimeParam(base):  # type: ignore[misc, valid-type]
        """Coercion of a plain value by a function raising ValueError."""

        parse: Parse

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return self.parse(value)
            except ValueError as exc:
                raise typer.BadParameter(str(exc), ctx=ctx, param=param) from None
            except typer.BadParameter as exc:  # typer's path checks: name the option
                exc.ctx = exc.ctx or ctx
                exc.param = exc.param or param
                raise

    def build_runtime_param(descriptor: Any) -> Any:
        parse = plain_parse(descriptor)
        if parse is None:
            return original(descriptor)
        return PlainRuntimeParam(
            parameter_info=descriptor.parameter_info, annotation=descriptor.annotation, parse=parse
        )

    build_runtime_param._txnstream = True  # type: ignore[attr-defined]
    # what _TyperParameter.get_runtime_param calls, looked up in typer.core at each call
    core.build_runtime_param = build_runtime_param  # type: ignore[attr-defined]
