"""Wake-ups of the QP pipeline stages that run as chains of callbacks.

A stage written as a chain of callbacks (the transmitter, the completer, the WQE
fetcher, the receiver) waits on the same simpy events a process would, so a run has the
same events in the same order, without the cost of resuming a generator on each. Where a
process would wait on a :class:`Signal`, the chain *arms* a :class:`Wake` and returns;
:meth:`Wake.fire` on an armed wake schedules one event at the current time whose callback
continues the chain (a Signal's wait and fire, event for event).

:meth:`Wake.fire_last` saves that event where it cannot change the order of anything:
called as the last action of the only callback of the event being processed, when no
other event is due at the current time, the event it would schedule is the next one
processed, so the stage continues at once instead (the same state changes in the same
order; only simpy's event count is lower).
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush
from typing import Any

import simpy

#: simpy's priority of an ordinary event (``simpy.events.NORMAL``)
_NORMAL = 1


class Due:
    """A scheduled instant: what simpy's event loop needs of an event (``callbacks``,
    ``_ok``), and the value a callback (or a process resumed by it) reads. Cheaper than
    a ``simpy.Timeout``, and queued the same way (:func:`call_at`), so the run processes
    the same instants in the same order."""

    __slots__ = ("_value", "callbacks")
    _ok = True
    ok = True

    def __init__(self, callbacks: list[Callable[[Any], None]], value: Any = None) -> None:
        self.callbacks: list[Callable[[Any], None]] | None = callbacks
        self._value = value

    @property
    def value(self) -> Any:
        return self._value


def call_at(env: simpy.Environment, at: int, fn: Callable[[Any], None] | None = None,
            value: Any = None) -> Due:
    """Schedule ``fn(due)`` at time ``at`` (>= now), exactly where
    ``env.timeout(at - env.now, value)`` with ``fn`` as its callback would be (same time,
    priority and place in simpy's event counter), without building a Timeout. Without
    ``fn``, a process may yield the returned :class:`Due` as it would the timeout."""
    now = env._now  # type: ignore[attr-defined]
    if at < now:
        raise ValueError(f"cannot schedule at {at} ps, before now ({now} ps)")
    due = Due([] if fn is None else [fn], value)
    heappush(env._queue, (at, _NORMAL, next(env._eid), due))  # type: ignore[attr-defined]
    return due


class Signal:
    """A re-armable wake-up: one waiter calls :meth:`wait`, anyone calls :meth:`fire`."""

    __slots__ = ("env", "ev")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.ev: simpy.Event | None = None

    def wait(self) -> simpy.Event:
        self.ev = self.env.event()
        return self.ev

    def fire(self) -> None:
        ev = self.ev
        if ev is not None:
            self.ev = None
            ev.succeed()


class Wake:
    """Where a stage waits for someone to fire it; ``fn(event)`` continues the stage."""

    __slots__ = ("armed", "env", "fn")

    def __init__(self, env: simpy.Environment, fn: Callable[[Any], None]) -> None:
        self.env = env
        self.fn = fn
        self.armed = True  #: a new stage waits for its first fire

    def arm(self) -> None:
        """The stage waits (as ``yield signal.wait()`` would)."""
        self.armed = True

    def fire(self) -> None:
        """Continue an armed stage at the current time, through one event."""
        if self.armed:
            self.armed = False
            call_at(self.env, self.env._now, self.fn)  # type: ignore[attr-defined]

    def fire_last(self) -> None:
        """:meth:`fire`, as the last action of the only callback of the event being
        processed: with no other event due now, the stage continues at once instead of
        through an event."""
        if self.armed:
            env = self.env
            queue = env._queue  # type: ignore[attr-defined]
            if not queue or queue[0][0] > env._now:  # type: ignore[attr-defined]
                self.armed = False
                self.fn(None)
            else:
                self.fire()
