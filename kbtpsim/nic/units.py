"""NIC units with occupancy, reserved analytically.

A :class:`Unit` is ``capacity`` first-come-first-served servers (doorbell, WQE fetch,
decode, transmit, receive, atomic and completion units). Every use has a duration known
when it is requested, so a request is served in call order by the earliest free server:
:meth:`Unit.reserve` returns the time the use ends, and the caller waits with *one* simpy
timeout. This is exactly a FIFO ``simpy.Resource`` held for a fixed time, at a third of its
events, so contention between QPs shows up at low cost.

:class:`Pcie` is the host interface: a DMA read pays a round-trip latency without holding
anything (many reads are in flight) and then occupies the host-to-NIC direction for its bytes
plus TLP headers; a posted DMA write occupies the NIC-to-host direction and becomes visible
one latency later. NIC device memory (addresses from ``DM_BASE``) costs ``nic_mem_ns`` and no
PCIe. :class:`AtomicLocks` is the lock table atomics serialise through, hashed by address.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator
from typing import Any

import simpy

from kbtpsim.nic.trace import Tracer

Gen = Generator[simpy.Event, Any, Any]

#: Start of NIC device memory in every host's address space (WQE rings may live there).
DM_BASE = 0x7F00_0000_0000


class Unit:
    """``capacity`` FIFO servers; each use is held for a given time in ps."""

    __slots__ = ("_free", "busy_ps", "capacity", "env", "name", "nic", "tracer")

    def __init__(self, env: simpy.Environment, name: str, capacity: int = 1,
                 nic: str = "", tracer: Tracer | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"unit {name!r} needs at least one server")
        self.env = env
        self.name = name
        self.capacity = capacity
        self.nic = nic
        self.tracer = tracer
        self.busy_ps = 0
        self._free = [0] * capacity  # a heap of the times each server frees up

    def reserve(self, duration: int, label: Any = "", earliest: int | None = None) -> int:
        """Book one server for ``duration`` from ``earliest`` (default now) or as soon as
        one is free after that; returns the end time. ``label`` (a string, or an object with
        a ``label()`` method, formatted only when tracing) names the use in traces."""
        now = self.env.now
        if earliest is not None and earliest > now:
            now = earliest
        free = self._free
        start = free[0] if free[0] > now else now
        end = start + duration
        if self.capacity == 1:
            free[0] = end
        else:
            heapq.heapreplace(free, end)
        self.busy_ps += duration
        if self.tracer is not None and duration:
            name = label if isinstance(label, str) else label.label()
            self.tracer.span(self.nic, self.name, name, start, end)
        return end

    def use(self, duration: int, label: Any = "") -> Gen:
        """Process helper: wait until a reserved use of ``duration`` ends."""
        if duration > 0:
            yield self.env.timeout(self.reserve(duration, label) - self.env.now)


class Pcie:
    """The host interface of one NIC: two directions, latency and TLP overhead."""

    __slots__ = ("_mps", "_ovh", "_ps_per_byte", "_xfer", "env", "lat_ps", "nicmem_ps",
                 "rd", "read_lat_ps", "wr")

    def __init__(self, env: simpy.Environment, *, gbps: float, latency_ns: float,
                 mem_ns: float, nic_mem_ns: float, mps: int, tlp_overhead: int,
                 nic: str = "", tracer: Tracer | None = None) -> None:
        self.env = env
        self._ps_per_byte = 8000.0 / gbps
        self._mps = mps
        self._ovh = tlp_overhead
        self.lat_ps = round(latency_ns * 1000)
        self.read_lat_ps = round((2 * latency_ns + mem_ns) * 1000)
        self.nicmem_ps = round(nic_mem_ns * 1000)
        self.rd = Unit(env, "pcie.rd", 1, nic, tracer)  # host -> NIC (read completions)
        self.wr = Unit(env, "pcie.wr", 1, nic, tracer)  # NIC -> host (posted writes)
        self._xfer: dict[int, int] = {}  # xfer_ps by size (a few sizes recur)

    def xfer_ps(self, nbytes: int) -> int:
        """Time ``nbytes`` of payload occupy one direction, TLP headers included."""
        ps = self._xfer.get(nbytes)
        if ps is None:
            tlps = max(1, -(-nbytes // self._mps))
            ps = self._xfer[nbytes] = round((nbytes + tlps * self._ovh) * self._ps_per_byte)
        return ps

    def read_done(self, addr: int, nbytes: int, label: Any = "",
                  earliest: int | None = None) -> int:
        """Issue a DMA read (now, or at ``earliest``); returns when its data has arrived."""
        t0 = self.env.now if earliest is None else max(earliest, self.env.now)
        if addr >= DM_BASE:
            return t0 + self.nicmem_ps
        return self.rd.reserve(self.xfer_ps(nbytes), label, t0 + self.read_lat_ps)

    def read(self, addr: int, nbytes: int, label: Any = "") -> Gen:
        """Process helper: a DMA read."""
        yield self.env.timeout(self.read_done(addr, nbytes, label) - self.env.now)

    def write_visible(self, addr: int, nbytes: int, label: Any = "",
                      earliest: int | None = None) -> int:
        """Issue a posted DMA write; returns when it is visible in memory."""
        t0 = self.env.now if earliest is None else max(earliest, self.env.now)
        if addr >= DM_BASE:
            return t0 + self.nicmem_ps
        return self.wr.reserve(self.xfer_ps(nbytes), label, t0) + self.lat_ps


class AtomicLocks:
    """A table of ``slots`` locks; an atomic on ``addr`` holds lock ``(addr >> 3) % slots``.

    Each lock is a free time: an atomic starts when its lock frees up."""

    __slots__ = ("free",)

    def __init__(self, slots: int) -> None:
        self.free = [0] * slots

    def slot(self, addr: int) -> int:
        return (addr >> 3) % len(self.free)
