"""CPU contention: the share of each target core that other work on the host takes.

A KV-cache block server rarely owns its host: the inference engine, its tokenizer and
scheduler threads, interrupt handling and the kernel share the cores. ``target.cpu.
background: f`` models that as time slices during which the KBTP server thread cannot
run on a core (docs/decisions.md, E8):

* **Periodic per core.** Each core alternates a *background slice* of ``slice_ps``
  (``target.cpu.slice``, default 50 us) with a *server window* of
  ``slice_ps * (1 - f) / f``, so the other work takes ``f`` of the core (exactly
  ``slice / (slice + window)`` after rounding the window to a picosecond, at least 1 ps).
  This is what a fair scheduler does with one competing runnable thread per core: the
  competitor runs for its quantum, then the server for its share (Linux CFS gives each
  runnable task a slice in proportion to its weight; the quantum is the ``slice``).
* **Seeded phases.** The cores' patterns are not synchronised: each core's pattern is
  shifted by a phase drawn uniformly from ``[0, period)`` by a generator seeded from the
  scenario seed and the target's name, so the same scenario and seed give the same
  pattern and results, and a different seed moves the slices.
* **Preempt and resume.** The server thread is descheduled at a slice boundary and
  resumes where it stopped: work in flight when a background slice starts is extended
  by the slice; work that would start inside one starts when it ends
  (:meth:`Background.finish`). The NIC is never delayed: only work that takes a core
  (:meth:`kbtpsim.system.cpu.TargetCpu.spend`) is.

Sans-IO: pure arithmetic on integer picoseconds, no simpy.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: ``target.cpu.slice`` default: 50 us, in ps.
DEFAULT_SLICE_PS = 50_000_000


@dataclass(frozen=True, slots=True)
class Background:
    """Other work taking ``fraction`` of every core in slices of ``slice_ps``.

    ``seed`` (with the core index) draws each core's phase; ``phases`` gives them
    explicitly instead (one per core, each in ``[0, period_ps)``; tests)."""

    fraction: float
    slice_ps: int = DEFAULT_SLICE_PS
    seed: int | str = 0
    phases: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.fraction, bool) or not 0 <= self.fraction < 1:
            raise ValueError(f"background fraction must be in [0, 1), got {self.fraction!r}")
        if isinstance(self.slice_ps, bool) or self.slice_ps <= 0:
            raise ValueError(f"background slice must be positive, got {self.slice_ps!r} ps")

    @property
    def active(self) -> bool:
        """False for ``fraction == 0``: the cores are the server's alone."""
        return self.fraction > 0

    @property
    def window_ps(self) -> int:
        """The server's window between two background slices (>= 1 ps)."""
        f = self.fraction
        return max(1, round(self.slice_ps * (1 - f) / f))

    @property
    def period_ps(self) -> int:
        return self.slice_ps + self.window_ps

    @property
    def share(self) -> float:
        """The background's exact share of a core (``fraction`` up to rounding)."""
        return self.slice_ps / self.period_ps if self.active else 0.0

    def core_phases(self, cores: int) -> tuple[int, ...]:
        """Each core's phase: its background slices are ``[phase + k * period,
        phase + k * period + slice)`` for every integer k."""
        if self.phases is not None:
            if len(self.phases) != cores or \
                    any(not 0 <= p < self.period_ps for p in self.phases):
                raise ValueError(f"phases: {cores} values in [0, {self.period_ps}) "
                                 f"expected, got {self.phases!r}")
            return self.phases
        rng = random.Random(f"kbtpsim.cpu.background/{self.seed}")
        return tuple(rng.randrange(self.period_ps) for _ in range(cores))


@dataclass(frozen=True, slots=True)
class CoreSchedule:
    """One core's pattern: :class:`Background` with the core's ``phase``."""

    slice_ps: int
    period_ps: int
    phase: int

    def _pos(self, t: int) -> int:
        return (t - self.phase) % self.period_ps

    def runnable_at(self, t: int) -> int:
        """The first time >= ``t`` at which the server may run on this core."""
        p = self._pos(t)
        return t + self.slice_ps - p if p < self.slice_ps else t

    def finish(self, start: int, work: int) -> int:
        """When ``work`` ps of server work that asks for the core at ``start`` is done:
        it runs only outside background slices, resuming after each one."""
        if work <= 0:
            return start
        t = self.runnable_at(start)
        left = self.period_ps - self._pos(t)  # server time before the next slice
        if work <= left:
            return t + work
        work -= left
        t += left  # a background slice starts here
        window = self.period_ps - self.slice_ps
        full, rest = divmod(work, window)
        if rest == 0:
            return t + full * self.period_ps
        return t + full * self.period_ps + self.slice_ps + rest

    def _cumulative(self, t: int) -> int:
        """Background time on this core in ``[phase, t)`` (negative before it)."""
        k, p = divmod(t - self.phase, self.period_ps)
        return k * self.slice_ps + min(p, self.slice_ps)

    def background_in(self, start: int, end: int) -> int:
        """Background time on this core in ``[start, end)``."""
        return self._cumulative(end) - self._cumulative(start) if end > start else 0


def schedules(background: Background, cores: int) -> tuple[CoreSchedule, ...]:
    """Every core's :class:`CoreSchedule` (empty when the background is inactive)."""
    if not background.active:
        return ()
    return tuple(CoreSchedule(background.slice_ps, background.period_ps, p)
                 for p in background.core_phases(cores))


__all__ = ["DEFAULT_SLICE_PS", "Background", "CoreSchedule", "schedules"]
