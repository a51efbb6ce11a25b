"""The README's Spark example, run as printed on the session's SparkSession (which its
``getOrCreate()`` returns; only its data directory is moved to a temporary one, as the
session's JVM has its own working directory): the copy holds the same JSON values as the
source, not their bytes (issue 31 item 12)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from txnstream.api import Engine

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> str:
    section = README.read_text(encoding="utf-8").split("## The data pipeline on Spark", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found
    return found.group(1)


def test_the_readme_example_copies_json_values(
    spark: SparkSession, tmp_path: Path, capsys: Any
) -> None:
    code = _example()
    assert "spark.stop()" in code
    assert '"./spark-data"' in code
    code = code.replace('"./spark-data"', repr(str(tmp_path / "spark-data")))
    # The session is shared with the other tests: the example must not stop it.
    exec(compile(code.replace("spark.stop()", "pass"), "README.md", "exec"), {"__name__": "ex"})
    assert capsys.readouterr().out.strip().endswith("2")

    async def copied() -> list[Any]:
        async with Engine.open(tmp_path / "spark-data") as engine:
            result = await engine.fetch("orders-copy")
            return [entry.value for entry in result.entries if entry.kind == "data"]

    values = asyncio.run(copied())
    assert sorted(values, key=lambda v: v["id"]) == [{"id": 1}, {"id": 2}]
