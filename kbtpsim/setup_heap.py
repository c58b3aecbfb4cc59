"""Garbage collection around a simulation's set-up.

An offloaded target's set-up builds hundreds of thousands of objects that live for the
whole run (every credit slot's queues, work requests and WQE bytes). While it does,
CPython's cyclic collector runs its full passes over an ever larger heap; afterwards each
full pass of the run walks all of them again, for nothing: they are not garbage.
:class:`SetupHeap` pauses the collector while the set-up builds and then freezes what it
built (``gc.freeze``: moved out of the collector's generations), so the run's passes walk
only what the run allocates. Leaving the context unfreezes it, so a process that
simulates run after run (a sweep, the tests) still collects each finished run.

Nothing simulated depends on it (no object the model uses has a finaliser), so results
are unchanged; measured in docs/performance.md.
"""

from __future__ import annotations

import gc
from types import TracebackType


class SetupHeap:
    """``with SetupHeap() as heap: ...; heap.pause(); <set-up>; heap.built(); <run>``."""

    def __init__(self) -> None:
        self._enabled = False
        self._paused = False
        self._frozen = False

    def __enter__(self) -> SetupHeap:
        self._enabled = gc.isenabled()
        return self

    def pause(self) -> None:
        """The set-up begins: no collection until :meth:`built`."""
        if self._enabled and not self._paused and not self._frozen:
            gc.disable()
            self._paused = True

    def built(self) -> None:
        """The set-up is done: freeze what it allocated, collect again as usual from here
        on. Its own garbage (the chain graphs it compiled and dropped: 4 MB on
        eval-ablation) is frozen too, and collected once the run is over: one full
        collection now would cost more than a short run saves (0.1 to 0.2 s)."""
        if self._paused:
            gc.freeze()
            self._frozen = True
            self._paused = False
            gc.enable()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        if self._paused:  # left during the set-up (an error)
            self._paused = False
            gc.enable()
