"""Keeping a simulation's clock running until the last pending CQE write lands.

A CQE counts on its CQ when its DMA write is issued and is visible to a polling CPU when
the write lands (``Cqe.time``). A run without a time limit must not end before that
instant, so it needs an event there; an event with no callback does nothing else. One
:class:`ClockHold` per environment keeps one such event pending, at the earliest
instant it was asked for, and moves it on to the latest one when it fires: a run ends at
the same instant as with one event per CQE (the latest of them), at a fraction of the
events, and since these events act on nothing, every other event keeps its order.
"""

from __future__ import annotations

import weakref

import simpy

from kbtpsim.nic.wake import call_at


class ClockHold:
    """One pending event, at or before the latest instant the clock must reach."""

    __slots__ = ("env", "pending", "until")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.until = 0  #: the latest instant asked for
        self.pending = False  #: an event is scheduled (at or before ``until``)

    def hold(self, t: int) -> None:
        """The clock must reach ``t`` (ps) before the run can run out of events."""
        if t > self.until:
            self.until = t
            if not self.pending:
                self.pending = True
                call_at(self.env, t, self._reached)

    def _reached(self, _ev: simpy.Event) -> None:
        env = self.env
        if self.until > env.now:
            call_at(env, self.until, self._reached)
        else:
            self.pending = False


_HOLDS: weakref.WeakKeyDictionary[simpy.Environment, ClockHold] = \
    weakref.WeakKeyDictionary()


def clock_hold(env: simpy.Environment) -> ClockHold:
    """The :class:`ClockHold` of ``env`` (one per environment)."""
    hold = _HOLDS.get(env)
    if hold is None:
        hold = _HOLDS[env] = ClockHold(env)
    return hold
