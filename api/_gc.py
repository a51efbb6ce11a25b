"""How an engine keeps CPython's cyclic garbage collector off the event loop.

CPython's full collection walks every tracked object. An engine's recovered state (ten
thousand topics are ~400,000 objects) plus the imported libraries make each one a
100-400 ms step on a small machine, taken whenever enough new objects survived: in the
middle of a produce, at random. The remedy long-running CPython servers use is
:func:`gc.freeze`: objects that exist once the process has settled move to a permanent
generation that collections no longer walk; they are still freed by reference counting.

With ``EngineConfig.gc_freeze`` (the default) an engine therefore

* pauses automatic collection while it recovers (recovery makes long-lived objects only;
  collecting in between would walk the growing state again and again), and
* freezes what exists once it is open, then unfreezes when the last such engine of the
  process closes, so a closed engine's reference cycles are collected again, and
* collects the young generation every :data:`YOUNG_THRESHOLD` net new containers instead
  of CPython's 700, from its open to its close (:func:`hold_young_threshold`).

All are process-wide (the collector is); the cost is that a frozen object which later
becomes part of an unreachable cycle is only reclaimed after that last close. An engine
that rebuilds itself after a storage failure releases its freeze (its old state is
garbage then) and does not freeze again; it keeps the young threshold.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_paused = 0  # recoveries in progress that paused collection
_resume = False  # collection was enabled before the first of them
_frozen = 0  # open engines that froze
_young = 0  # open engines that hold the young threshold
_host_thresholds: tuple[int, int, int] | None = None  # what we raised it from

YOUNG_THRESHOLD = 5000
"""Net new containers (tuples, lists, dicts, objects) between two collections of the
young generation while an engine is open. A delivery batch holds thousands at once (a
row and a decoded body per message, until its messages are made): at CPython's 700 a
consumer's receive + ack of 1,000 ran a young collection per batch, and one of the middle
generation per ten, each walking objects about to be freed anyway (PostgreSQL, one
consumer: 50 young collections per 50,000 messages, ~7% of the drain's time; at 5,000,
one; the drain 1.12-1.13x as fast: medians of 30 drains each way, interleaved, twice).
A young collection of 5,000 objects still takes well under a millisecond."""


@contextlib.contextmanager
def collection_paused(enabled: bool = True) -> Iterator[None]:
    """Pause automatic collection for the block (nests; restores the caller's setting)."""
    global _paused, _resume
    if not enabled:
        yield
        return
    if _paused == 0:
        _resume = gc.isenabled()
        gc.disable()
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0 and _resume:
            gc.enable()


def freeze() -> None:
    """Move every tracked object to the permanent generation (an engine is open)."""
    global _frozen
    _frozen += 1
    gc.freeze()


def release() -> None:
    """An engine that froze closed; the last one returns frozen objects to collection."""
    global _frozen
    if _frozen == 0:
        return
    _frozen -= 1
    if _frozen == 0:
        gc.unfreeze()


def hold_young_threshold() -> None:
    """Raise the young generation's threshold to :data:`YOUNG_THRESHOLD` (an engine
    opened); never lowers it, and leaves a disabled one (0) alone."""
    global _young, _host_thresholds
    _young += 1
    if _young > 1:
        return
    current = gc.get_threshold()
    if 0 < current[0] < YOUNG_THRESHOLD:
        _host_thresholds = current
        gc.set_threshold(YOUNG_THRESHOLD, current[1], current[2])


def release_young_threshold() -> None:
    """An engine that held the young threshold closed; the last one restores the host's
    thresholds, unless the host set others meanwhile."""
    global _young, _host_thresholds
    if _young == 0:
        return
    _young -= 1
    if _young or _host_thresholds is None:
        return
    host, _host_thresholds = _host_thresholds, None
    if gc.get_threshold() == (YOUNG_THRESHOLD, host[1], host[2]):
        gc.set_threshold(*host)
