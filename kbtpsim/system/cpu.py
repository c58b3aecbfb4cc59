"""A target host CPU: ``cores`` cores, per-operation processing costs, busy-time accounting.

The software target runs each received request on one core (a FIFO ``simpy.Resource``):
it notices the receive completion (polling delay), processes the request (a cost per
opcode), and posts the resulting work requests (the NIC profile's ``cpu_post_ns`` per WR,
``cpu_doorbell_ns`` per doorbell). Every nanosecond a core spends is charged to an
*account*, normally the KBTP opcode name of the request it serves, so "target CPU time per
operation" is ``busy_ns(op) / count(op)``.

The per-opcode costs are **estimates** (no published figure for a KBTP target exists):
a table lookup and validation is a few hundred nanoseconds of software on a server core;
an allocation adds a ring access; HELLO builds a session. Override them with
:class:`CpuCosts` (``CpuCosts(per_op_ns={"LOAD": 500})``, unknown names are rejected).

CPU contention (:mod:`kbtpsim.system.contention`, ``target.cpu.background``): with a
:class:`~kbtpsim.system.contention.Background`, each core runs other work in periodic
slices during which the server thread is descheduled. A granted request holds a
numbered core (the free core the server may run on soonest, then the lowest number);
:meth:`TargetCpu.spend` on it takes ``ps`` of server time, resumed after every slice
that falls inside it, so its wall time grows while the busy time charged stays ``ps``.
Server busy time and background time are reported apart (:meth:`TargetCpu.utilisation`,
:meth:`TargetCpu.background_ns`).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import simpy
from simpy.resources.resource import Release, Request

from kbtpsim.nic.profile import NicProfile
from kbtpsim.system.contention import Background, CoreSchedule, schedules

PS_PER_NS = 1000

#: Default processing cost per KBTP opcode, in ns (estimates; see the module docstring).
DEFAULT_OP_NS: Mapping[str, float] = MappingProxyType({
    "HELLO": 2000.0,
    "GOODBYE": 1000.0,
    "LOAD": 300.0,
    "STORE": 400.0,
    "ALLOC_STORE": 600.0,
    "FREE": 500.0,
    "BIND": 500.0,
    "READ_DONE": 200.0,  #: handling the RDMA Read completion of a non-inline store
    "TIMER": 300.0,  #: one call of Target.advance (ticket timeouts, retention)
    "DIRECT": 300.0,  #: noticing a one-sided DIRECT_ALLOC FetchAdd on a Head counter
    "DISCONNECT": 1000.0,  #: a connection failed or closed
    "OTHER": 300.0,  #: anything else (unknown or malformed messages)
})


@dataclass(frozen=True, slots=True)
class CpuCosts:
    """CPU costs in ns. ``per_op_ns`` overrides entries of :data:`DEFAULT_OP_NS`;
    ``post_ns``/``doorbell_ns``/``poll_ns`` default to the NIC profile's ``cpu_post_ns``,
    ``cpu_doorbell_ns`` and ``cpu_poll_ns``."""

    per_op_ns: Mapping[str, float] = field(default_factory=dict)
    post_ns: float | None = None
    doorbell_ns: float | None = None
    poll_ns: float | None = None

    def __post_init__(self) -> None:
        unknown = set(self.per_op_ns) - set(DEFAULT_OP_NS)
        if unknown:
            raise ValueError(f"CpuCosts.per_op_ns: unknown operations {sorted(unknown)}")
        for name, value in [*self.per_op_ns.items(), ("post_ns", self.post_ns),
                            ("doorbell_ns", self.doorbell_ns), ("poll_ns", self.poll_ns)]:
            if value is not None and value < 0:
                raise ValueError(f"CpuCosts.{name}: must be >= 0, got {value!r}")
        merged = dict(DEFAULT_OP_NS)
        merged.update(self.per_op_ns)
        object.__setattr__(self, "per_op_ns", MappingProxyType(merged))

    def op_ps(self, op: str) -> int:
        """Processing cost of ``op`` (an opcode name; unknown names cost ``OTHER``)."""
        ns = self.per_op_ns.get(op, self.per_op_ns["OTHER"])
        return round(ns * PS_PER_NS)


class _Cores(simpy.Resource):
    """A ``simpy.Resource`` whose granted requests hold a numbered core, and which
    knows the core each holding process holds."""

    def __init__(self, env: simpy.Environment, capacity: int) -> None:
        super().__init__(env, capacity)
        self.free: list[int] = list(range(capacity))
        self.core_of: dict[Any, int] = {}  #: holding process -> its core
        self._held: dict[int, int] = {}  #: id(request) -> its core
        self.schedules: tuple[CoreSchedule, ...] = ()

    def _pick(self) -> int:
        if not self.schedules:
            return self.free[0]
        now = int(self._env.now)
        return min(self.free, key=lambda c: (self.schedules[c].runnable_at(now), c))

    def _do_put(self, event: Request) -> None:
        if len(self.users) < self.capacity:
            core = self._pick()
            self.free.remove(core)
            self._held[id(event)] = core
            self.core_of[event.proc] = core
        super()._do_put(event)

    def _do_get(self, event: Release) -> None:
        request = event.request
        if request in self.users:
            core = self._held.pop(id(request))
            self.free.append(core)
            self.free.sort()
            if self.core_of.get(request.proc) == core:
                del self.core_of[request.proc]
        super()._do_get(event)


class TargetCpu:
    """``cores`` cores shared by everything the target host does, with accounting."""

    def __init__(self, env: simpy.Environment, profile: NicProfile, cores: int = 1,
                 costs: CpuCosts | None = None) -> None:
        if cores <= 0:
            raise ValueError(f"cores must be positive, got {cores!r}")
        self.env = env
        self.cores = cores
        self.costs = costs = costs or CpuCosts()
        self.resource = _Cores(env, cores)
        self.background = Background(0.0)
        self._stalled = 0  #: wall time spends were extended by background slices
        #: with background, spends in progress: (core, start, ps, account); their part
        #: not yet run is not busy time yet (busy_ns)
        self._inflight: dict[int, tuple[CoreSchedule, int, int, str]] = {}
        self._spends = 0
        self.post_ps = round((profile.cpu_post_ns if costs.post_ns is None
                              else costs.post_ns) * PS_PER_NS)
        self.doorbell_ps = round((profile.cpu_doorbell_ns if costs.doorbell_ns is None
                                  else costs.doorbell_ns) * PS_PER_NS)
        self.poll_ps = round((profile.cpu_poll_ns if costs.poll_ns is None
                              else costs.poll_ns) * PS_PER_NS)
        self._busy: dict[str, int] = {}
        self._count: dict[str, int] = {}

    def set_background(self, background: Background) -> None:
        """Other work takes ``background.fraction`` of every core from time 0 (set
        before the simulation runs)."""
        if self.env.now or self.resource.count or self.resource.queue:
            raise RuntimeError("set_background: the CPU is already in use")
        self.background = background
        self.resource.schedules = schedules(background, self.cores)

    # ------------------------------------------------------------------ use
    def request(self) -> simpy.resources.resource.Request:
        """A core (``with cpu.request() as core: yield core``)."""
        return self.resource.request()

    def spend(self, account: str, ps: int) -> Generator[simpy.Event, Any, None]:
        """Process helper: keep the held core busy for ``ps`` and charge ``account``."""
        if ps > 0:
            self._busy[account] = self._busy.get(account, 0) + ps
            sched = self._schedule()
            if sched is None:
                yield self.env.timeout(ps)
                return
            now = int(self.env.now)
            wall = sched.finish(now, ps) - now
            self._stalled += wall - ps
            token = self._spends = self._spends + 1
            self._inflight[token] = (sched, now, ps, account)
            try:
                yield self.env.timeout(wall)
            finally:
                del self._inflight[token]

    def _schedule(self) -> CoreSchedule | None:
        """The background pattern of the core the active process holds (None without
        background; core 0's for a process that holds none)."""
        scheds = self.resource.schedules
        if not scheds:
            return None
        return scheds[self.resource.core_of.get(self.env.active_process, 0)]

    def charge(self, account: str, ps: int) -> None:
        """Charge ``ps`` of busy time the held core already spent until now (e.g.
        spinning on a CQ while a process waited for an event) to ``account``; with
        background, the slices that fell in ``[now - ps, now)`` are not the server's."""
        if ps > 0:
            sched = self._schedule()
            if sched is not None:
                now = int(self.env.now)
                ps -= sched.background_in(now - ps, now)
            self._busy[account] = self._busy.get(account, 0) + ps

    def count(self, account: str, n: int = 1) -> None:
        """Count ``n`` operations of ``account`` (the denominator of :meth:`per_op_ns`)."""
        self._count[account] = self._count.get(account, 0) + n

    # ------------------------------------------------------------------ report
    def busy_ns(self, account: str | None = None) -> float:
        """Core time charged to ``account`` (all accounts if None), in ns."""
        if account is None:
            return (sum(self._busy.values()) - self._not_run(None)) / PS_PER_NS
        return (self._busy.get(account, 0) - self._not_run(account)) / PS_PER_NS

    def _not_run(self, account: str | None) -> int:
        """With background: the part of the spends in progress (of ``account``; all if
        None) that has not run yet. A spend is charged when it starts; one that a slice
        stretches over a long wall time would otherwise count as busy before it ran."""
        if not self._inflight:
            return 0
        now = int(self.env.now)
        left = 0
        for sched, start, ps, acc in self._inflight.values():
            if account is None or acc == account:
                ran = (now - start) - sched.background_in(start, now)
                left += ps - min(ps, max(0, ran))
        return left

    def ops(self, account: str) -> int:
        return self._count.get(account, 0)

    def per_op_ns(self, account: str) -> float:
        """Mean core time per counted operation of ``account`` (0 if none)."""
        n = self._count.get(account, 0)
        return self.busy_ns(account) / n if n else 0.0

    def report(self) -> dict[str, dict[str, float]]:
        """``{account: {"ops", "busy_ns", "per_op_ns"}}`` for every account used."""
        names = sorted(set(self._busy) | set(self._count))
        return {name: {"ops": float(self.ops(name)), "busy_ns": self.busy_ns(name),
                       "per_op_ns": self.per_op_ns(name)} for name in names}

    def utilisation(self) -> float:
        """Fraction of core time the server was busy since time 0 (background slices
        are not the server's: see :meth:`background_share`)."""
        now = self.env.now
        busy = sum(self._busy.values()) - self._not_run(None)
        return busy / (now * self.cores) if now else 0.0

    def background_ns(self, start_ps: int = 0, end_ps: int | None = None) -> float:
        """Core time the background took in ``[start_ps, end_ps)`` (default: until now),
        all cores together, in ns."""
        end = int(self.env.now) if end_ps is None else end_ps
        return sum(s.background_in(start_ps, end) for s in self.resource.schedules) \
            / PS_PER_NS

    def background_share(self) -> float:
        """Fraction of core time the background took since time 0."""
        now = int(self.env.now)
        return self.background_ns() * PS_PER_NS / (now * self.cores) if now else 0.0

    def background_report(self, start_ps: int, end_ps: int,
                          server_share: float) -> dict[str, float] | None:
        """results.json ``cpu.background`` over ``[start_ps, end_ps)`` (None without
        background): the configured ``fraction`` and ``slice_ns``; ``share``, the core
        time the background took; ``server_of_available``, the server's busy time
        (``server_share`` of all core time, i.e. ``cpu.utilisation``) over the core time
        the background left it; ``stalled_ns``, the wall time the server's work was
        extended by slices over the whole run."""
        if not self.background.active:
            return None
        capacity = max(1, end_ps - start_ps) * self.cores
        bg = self.background_ns(start_ps, end_ps) * PS_PER_NS
        free = capacity - bg
        return {"fraction": self.background.fraction,
                "slice_ns": self.background.slice_ps / PS_PER_NS,
                "share": round(bg / capacity, 6),
                "server_of_available": round(min(1.0, server_share * capacity / free), 6)
                if free > 0 else 0.0,
                "stalled_ns": round(self.stalled_ns(), 3)}

    def stalled_ns(self) -> float:
        """Wall time the server's work was extended by background slices (waiting for
        a slice to end, or resuming after one), summed over every spend, in ns."""
        return self._stalled / PS_PER_NS
