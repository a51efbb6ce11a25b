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
  process closes, so a closed engine's reference cycles are collected again.

Both are process-wide (the collector is); the cost is that a frozen object which later
becomes part of an unreachable cycle is only reclaimed after that last close. An engine
that rebuilds itself after a storage failure releases its freeze (its old state is
garbage then) and does not freeze again.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_paused = 0  # recoveries in progress that paused collection
_resume = False  # collection was enabled before the first of them
_frozen = 0  # open engines that froze


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
