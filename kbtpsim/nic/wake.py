"""Wake-ups of the QP pipeline stages that run as chains of callbacks.

A stage written as a chain of callbacks (the transmitter, the completer, the WQE
fetcher) waits on the same simpy events a process would, so a run has the same events
in the same order, without the cost of resuming a generator on each. Where a process
would wait on a :class:`~kbtpsim.nic.rx.Signal`, the chain *arms* a :class:`Wake` and
returns; :meth:`Wake.fire` on an armed wake schedules one event at the current time
whose callback continues the chain (a Signal's wait and fire, event for event).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy


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
            ev = self.env.event()
            ev.callbacks.append(self.fn)
            ev.succeed()
