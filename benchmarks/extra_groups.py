"""Groups whose modules run their own repetitions: H (HTTP), R (recovery), S (Spark).

Each module exposes ``run(quick) -> list[dict]`` (medians already taken); this adapter
turns their dicts into :class:`~benchmarks.core.Figure` rows for ``run.py``'s table,
with their targets (``target_spec``) and per-run samples, so that the one table of a
``make bench`` run checks every target, paired ratios included.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from benchmarks.core import Figure, Settings, Target, group


def _adapt(module: str) -> Callable[[Settings], list[Figure]]:
    def run(settings: Settings) -> list[Figure]:
        produced: list[dict[str, Any]] = importlib.import_module(module).run(settings.quick)
        return [
            Figure(
                d["id"],
                float(d["value"]),
                d["unit"],
                d.get("baseline"),
                Target.from_spec(d["target_spec"]) if d.get("target_spec") else None,
                tuple(float(v) for v in d.get("samples", ())),
            )
            for d in produced
        ]

    return run


group("H", "HTTP produce, long-poll latency, and the bare-endpoint ceiling", ())(
    _adapt("benchmarks.h_http")
)
group("R", "recovery from a snapshot vs full replay; periodic snapshot cost", ())(
    _adapt("benchmarks.r_recovery")
)
if importlib.util.find_spec("pyspark") and importlib.util.find_spec("benchmarks.spark_bench"):
    group("S", "Spark batch read and exactly-once write", ())(_adapt("benchmarks.spark_bench"))
