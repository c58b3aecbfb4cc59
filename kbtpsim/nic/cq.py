"""Completion queues and CQEs.

A CQE is generated inside the NIC (it counts at once toward :meth:`CompletionQueue.reach`,
which WAIT uses) and becomes visible to a polling CPU when its DMA write lands
(``Cqe.time``). A CQ that holds ``depth`` unpolled CQEs overruns: :class:`CqOverrun`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import IntEnum

import simpy

from kbtpsim.nic.errors import CqOverrun, WcStatus


class WcOpcode(IntEnum):
    """Kind of completed work (values of ``ibv_wc_opcode``)."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    BIND_MW = 5
    LOCAL_INV = 6
    MASKED_COMP_SWAP = 9
    MASKED_FETCH_ADD = 10
    NOP = 32  # model: NOP, WAIT, ENABLE and untaken conditionals
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


@dataclass(frozen=True, slots=True)
class Cqe:
    """One completion. ``time`` is when a polling CPU can see it (ps)."""

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qpn: int
    wqe_index: int
    byte_len: int = 0
    imm: int | None = None
    invalidated_stag: int | None = None
    time: int = 0


class CompletionQueue:
    """A CQ of ``depth`` entries, number ``cqn`` on its NIC."""

    __slots__ = ("_entries", "_waiters", "count", "cqn", "depth", "env")

    def __init__(self, env: simpy.Environment, cqn: int, depth: int) -> None:
        if depth <= 0:
            raise ValueError(f"CQ depth must be positive, got {depth!r}")
        self.env = env
        self.cqn = cqn
        self.depth = depth
        self.count = 0  #: CQEs generated so far (absolute, as WAIT counts)
        self._entries: deque[Cqe] = deque()
        self._waiters: list[tuple[int, simpy.Event]] = []

    def push(self, cqe: Cqe) -> None:
        """Add a CQE (called by the NIC)."""
        if len(self._entries) >= self.depth:
            raise CqOverrun(f"CQ {self.cqn} overran its depth {self.depth}")
        self._entries.append(cqe)
        self.count += 1
        if cqe.time > self.env.now:  # the DMA write lands then: keep the clock running
            self.env.timeout(cqe.time - self.env.now)
        if self._waiters:
            ready = [w for w in self._waiters if w[0] <= self.count]
            if ready:
                self._waiters = [w for w in self._waiters if w[0] > self.count]
                for _, ev in ready:
                    ev.succeed()

    def reach(self, count: int) -> simpy.Event:
        """An event that fires once ``count`` CQEs have been generated."""
        ev = self.env.event()
        if self.count >= count:
            ev.succeed()
        else:
            self._waiters.append((count, ev))
        return ev

    def poll(self, max_entries: int = 16) -> list[Cqe]:
        """Up to ``max_entries`` CQEs visible to the CPU now, oldest first."""
        out: list[Cqe] = []
        now = self.env.now
        entries = self._entries
        while entries and len(out) < max_entries and entries[0].time <= now:
            out.append(entries.popleft())
        return out

    def wait(self, n: int = 1):  # type: ignore[no-untyped-def]
        """Process helper: poll until ``n`` CQEs are visible; returns them."""
        got: list[Cqe] = []
        while len(got) < n:
            got += self.poll(n - len(got))
            if len(got) < n:
                nxt = self._entries[0].time if self._entries else None
                if nxt is not None and nxt > self.env.now:
                    yield self.env.timeout(nxt - self.env.now)
                else:
                    ev = self.reach(self.count + 1)
                    yield ev
        return got

    def __len__(self) -> int:
        return len(self._entries)
