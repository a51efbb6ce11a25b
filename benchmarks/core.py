"""The benchmark framework: figures, targets, the group registry, shared helpers.

A *group* (B1, B2, ...) is a function ``(Settings) -> list[Figure]`` registered with
:func:`group`. It runs its workloads ``settings.runs`` times (each in a fresh data
directory) and reports the median of each figure. :func:`resolve` then fills in the
ratios to the named baselines and checks each figure's target against the other
figures of the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

REPO_ROOT = Path(__file__).resolve().parent.parent
VALUE_SIZE = 100
"""Every benchmark message value is ``bytes`` of this length."""

_STARTED = time.perf_counter()


# -- figures and targets ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """A goal from the issue: ``value op threshold``, or ``value / ref op threshold``."""

    op: Literal[">=", "<="]
    threshold: float
    ref: str | None = None
    """Another figure's id: the target is on the ratio to it; None: on the value itself."""

    def describe(self, unit: str) -> str:
        """E.g. ``>= 0.80 x B1-ceiling`` or ``<= 20 ms``."""
        if self.ref is None:
            return f"{self.op} {self.threshold:g} {unit}"
        return f"{self.op} {self.threshold:.2f} x {self.ref}"

    def spec(self) -> list[Any]:
        """``[op, threshold, ref]``: the target as plain JSON (see :meth:`from_spec`)."""
        return [self.op, self.threshold, self.ref]

    @classmethod
    def from_spec(cls, spec: Sequence[Any]) -> Target:
        """The target of a :meth:`spec`."""
        op, threshold, ref = spec
        if op not in (">=", "<="):
            raise ValueError(f"unknown target operator {op!r}")
        return cls(op, float(threshold), ref)

    def measure(self, value: float, values: dict[str, float]) -> float | None:
        """What the target compares: the ratio to ``ref`` or the value (None if unknown)."""
        if self.ref is None:
            return value
        ref = values.get(self.ref)
        if ref is None or ref == 0:
            return None
        return value / ref

    def paired(self, samples: Sequence[float], by_id: dict[str, Sequence[float]]) -> float | None:
        """Median of the run-by-run ratios to ``ref`` (runs are interleaved, so this
        cancels slow phases of the machine better than the ratio of the medians)."""
        if self.ref is None:
            return None
        ref = by_id.get(self.ref, ())
        if len(ref) != len(samples) or len(samples) < 2 or not all(ref):
            return None
        return statistics.median(v / r for v, r in zip(samples, ref, strict=True))

    def met(self, measured: float) -> bool:
        """Whether ``measured`` (from :meth:`measure`) reaches the target."""
        return measured >= self.threshold if self.op == ">=" else measured <= self.threshold


@dataclass(frozen=True, slots=True)
class Figure:
    """One reported number: the median of ``samples`` (one per run)."""

    id: str
    value: float
    unit: str
    baseline: str | None = None
    """The figure ``ratio`` divides by (in bench-results.json)."""
    target: Target | None = None
    samples: tuple[float, ...] = ()

    @classmethod
    def of(
        cls,
        id: str,
        samples: Sequence[float],
        unit: str,
        *,
        baseline: str | None = None,
        target: Target | None = None,
    ) -> Figure:
        """The figure whose value is the median of ``samples``."""
        if not samples:
            raise ValueError(f"figure {id} has no samples")
        return cls(id, statistics.median(samples), unit, baseline, target, tuple(samples))

    @property
    def spread(self) -> float | None:
        """(max - min) / median of the samples, a rough noise indicator."""
        if len(self.samples) < 2 or self.value == 0:
            return None
        return (max(self.samples) - min(self.samples)) / abs(self.value)


@dataclass(frozen=True, slots=True)
class Settings:
    """How to run: quick (smaller workloads) or full, and how many runs per figure."""

    quick: bool = False
    runs: int = 3

    def size(self, full: int, quick: int) -> int:
        """The workload size for this mode."""
        return quick if self.quick else full


GroupFn = Callable[[Settings], list[Figure]]


class Skipped(Exception):
    """Raised by a group (or a peer system) that cannot run on this machine, saying why
    (a server or a client is not installed): reported as skipped, never a failure."""


@dataclass(frozen=True, slots=True)
class Group:
    """A registered figure group."""

    name: str
    title: str
    run: GroupFn
    figure_ids: tuple[str, ...]


_REGISTRY: dict[str, Group] = {}


def group(name: str, title: str, figure_ids: Sequence[str]) -> Callable[[GroupFn], GroupFn]:
    """Register a figure group; ``figure_ids`` are the ids it must return, in table order."""

    def register(fn: GroupFn) -> GroupFn:
        if name in _REGISTRY:
            raise ValueError(f"benchmark group {name} registered twice")
        _REGISTRY[name] = Group(name, title, fn, tuple(figure_ids))
        return fn

    return register


def registry() -> dict[str, Group]:
    """Every registered group, in registration order."""
    return dict(_REGISTRY)


# -- results ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """A figure with its ratio and target check resolved against the whole result set."""

    figure: Figure
    ratio: float | None
    target_measured: float | None = None
    target_met: bool | None = None
    target_paired: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The bench-results.json entry."""
        f = self.figure
        return {
            "id": f.id,
            "value": _round(f.value),
            "unit": f.unit,
            "baseline": f.baseline,
            "ratio": None if self.ratio is None else round(self.ratio, 4),
        }


def resolve(figures: Sequence[Figure]) -> list[Row]:
    """Ratios to baselines and target checks (a missing baseline gives ``None``)."""
    values = {f.id: f.value for f in figures}
    by_id = {f.id: f.samples for f in figures}
    rows = []
    for f in figures:
        ratio = None
        if f.baseline is not None:
            base = values.get(f.baseline)
            ratio = f.value / base if base else None
        measured = met = paired = None
        if f.target is not None:
            measured = f.target.measure(f.value, values)
            met = None if measured is None else f.target.met(measured)
            paired = f.target.paired(f.samples, by_id)
        rows.append(Row(f, ratio, measured, met, paired))
    return rows


def _round(value: float) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    digits = max(0, 4 - math.floor(math.log10(abs(value))))
    return round(value, digits)


def format_table(rows: Sequence[Row]) -> str:
    """A fixed-width table: id, value, unit, baseline, ratio, spread, target, status.

    ``spread`` is (max - min) / median of the runs; ``actual`` is what the target
    compares (the ratio of the medians, or the value); ``paired`` is the median of the
    run-by-run ratios, a second opinion on a noisy machine.
    """
    header = (
        "id",
        "value",
        "unit",
        "baseline",
        "ratio",
        "spread",
        "target",
        "actual",
        "paired",
        "status",
    )
    lines: list[tuple[str, ...]] = [header]
    for row in rows:
        f = row.figure
        target = actual = paired = status = ""
        if row.target_paired is not None:
            paired = f"{row.target_paired:.2f} x"
        if f.target is not None:
            target = f.target.describe(f.unit)
            if row.target_measured is not None:
                m = row.target_measured
                actual = f"{m:.2f} x" if f.target.ref is not None else _fmt(m)
                status = "ok" if row.target_met else "MISS"
            else:
                status = "n/a"
        lines.append(
            (
                f.id,
                _fmt(f.value),
                f.unit,
                f.baseline or "-",
                "-" if row.ratio is None else f"{row.ratio:.3f}",
                "-" if f.spread is None else f"{f.spread:.0%}",
                target,
                actual,
                paired,
                status,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    right = {1, 4, 5, 7, 8}
    out = []
    for n, line in enumerate(lines):
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(line)
        ]
        out.append("  ".join(cells).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def _fmt(value: float) -> str:
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


# -- helpers for groups ----------------------------------------------------------------


def progress(message: str) -> None:
    """A progress line on stderr, with the time since the benchmark started."""
    print(f"[{time.perf_counter() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def make_values(count: int, size: int = VALUE_SIZE, seed: int = 1) -> list[bytes]:
    """``count`` distinct pseudo-random ``bytes`` values of ``size`` bytes."""
    rng = random.Random(seed)
    return [rng.randbytes(size) for _ in range(count)]


@contextlib.contextmanager
def fresh_dir(tag: str) -> Iterator[Path]:
    """A new empty temporary data directory, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"txnstream-bench-{tag}-") as path:
        yield Path(path)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear interpolation between closest ranks."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    k = (len(ordered) - 1) * q / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass(slots=True)
class Samples:
    """Per-figure samples collected over the runs of a group."""

    by_id: dict[str, list[float]] = field(default_factory=dict)

    def add(self, figure_id: str, value: float) -> None:
        """Record one run's value of ``figure_id``."""
        self.by_id.setdefault(figure_id, []).append(value)

    def __getitem__(self, figure_id: str) -> list[float]:
        return self.by_id[figure_id]


# -- memory ----------------------------------------------------------------------------


def _status_kb(name: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb() -> float:
    """This process's resident set size in MiB (``VmRSS``; psutil as a fallback)."""
    kb = _status_kb("VmRSS")
    if kb is not None:
        return kb / 1024
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        raise RuntimeError("cannot read RSS: no /proc/self/status and no psutil") from None
    return float(psutil.Process(os.getpid()).memory_info().rss) / (1024 * 1024)


def release_free_memory() -> None:
    """Return freed heap memory to the OS (glibc ``malloc_trim``), so RSS shows live data.

    Without it, memory freed by an earlier phase stays resident and a later phase that
    reuses it shows no growth. A no-op where glibc is not available.
    """
    gc.collect()
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim(0)


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` (the peak RSS) to the current RSS; False where Linux cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return _status_kb("VmHWM") is not None


def peak_rss_mb() -> float | None:
    """The peak RSS since the last :func:`reset_peak_rss` (``VmHWM``), in MiB."""
    kb = _status_kb("VmHWM")
    return None if kb is None else kb / 1024


# -- event-loop stalls (L1) ------------------------------------------------------------


@dataclass(slots=True)
class _Stalls:
    """The longest event-loop steps seen, with the benchmark phase each happened in."""

    phase: str = "-"
    watching: bool = True
    mixed: bool = False
    """The current loop step entered or left an unwatched phase: do not count it."""
    worst: list[tuple[float, str]] = field(default_factory=list)

    def note(self, seconds: float, phase: str | None = None) -> None:
        worst = self.worst
        if len(worst) < 5 or seconds > worst[-1][0]:
            worst.append((seconds, phase or self.phase))
            worst.sort(reverse=True)
            del worst[5:]


STALLS = _Stalls()
"""Filled by every event loop the benchmarks run (see :func:`install_stall_watch`)."""


class _StallWatchLoop(asyncio.SelectorEventLoop):
    """An asyncio loop that records how long each of its steps keeps it from polling.

    A step is one ``_run_once``: the callbacks that were ready, run back to back; the
    time spent waiting in ``select`` is not part of it. Four ``perf_counter`` calls
    per step: no measurable overhead.
    """

    def __init__(self) -> None:
        super().__init__()
        self._waited = 0.0
        selector = self._selector  # type: ignore[attr-defined]
        select = selector.select

        def timed_select(timeout: float | None = None) -> Any:
            started = time.perf_counter()
            try:
                return select(timeout)
            finally:
                self._waited += time.perf_counter() - started

        selector.select = timed_select

    def _run_once(self) -> None:
        self._waited = 0.0
        started = time.perf_counter()
        super()._run_once()  # type: ignore[misc]
        if STALLS.watching and not STALLS.mixed:
            STALLS.note(time.perf_counter() - started - self._waited)
        STALLS.mixed = False


class _StallWatchPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _StallWatchLoop()


def install_stall_watch() -> None:
    """Make every later ``asyncio.run`` of this process use a stall-watching loop."""
    asyncio.set_event_loop_policy(_StallWatchPolicy())


@contextlib.contextmanager
def stall_phase(name: str, *, watched: bool = True) -> Iterator[None]:
    """Label the stalls recorded inside (``watched=False``: harness work, not counted)."""
    saved = STALLS.phase, STALLS.watching
    STALLS.phase, STALLS.watching = name, watched and saved[1]
    STALLS.mixed = STALLS.mixed or not watched
    try:
        yield
    finally:
        STALLS.phase, STALLS.watching = saved
        STALLS.mixed = STALLS.mixed or not watched


def collect_garbage() -> None:
    """``gc.collect()`` before a timed section: harness work, not an engine stall (L1)."""
    with stall_phase("gc", watched=False):
        gc.collect()
