"""The target CPU takes shared-ring Tickets through its own NIC.

When chains allocate from the shared ring, Head is modified by two agents: the NIC's
masked FetchAdds (a DMA read, then a posted write of the new value) and the CPU's
software allocations. A CPU read-modify-write of Head in host memory is not atomic
against the NIC's: one that lands between the NIC's read and its posted write takes the
same Ticket, and the NIC's write then puts Head back (two allocations of one slot).

A real server orders its own ticket-taking against the NIC's atomics by issuing its
FetchAdd through the same NIC, so that one atomic unit (with its per-address lock)
serialises every update of Head: RFC 7306 section 5 and the verbs specification
guarantee atomicity only among atomics of the same device (``IBV_ATOMIC_HCA``), not
against CPU accesses. :class:`NicTicketTaker` does that with a loopback QP: the CPU
posts a masked FetchAdd (draft, "Free-Block Ring": Add Data ``0x0000000100000010``,
Add Mask ``bit 63 | bit 31 | bit n+3``) on Head, rings the doorbell (an MMIO write),
and polls its CQ for the result; it spins on its core meanwhile (the time is charged to
the allocation's account as busy CPU time).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from kbtpsim.atomics import RING_ADD_DATA, ring_add_mask
from kbtpsim.chains.layout import RingKeys
from kbtpsim.nic import Access, Nic, Sge, WcStatus, WorkRequest, WqeFlags, connect
from kbtpsim.nic.memory import ByteOrder
from kbtpsim.nic.wqe import Opcode
from kbtpsim.system.cpu import TargetCpu

Gen = Generator[simpy.Event, Any, Any]


class NicTicketTaker:
    """Masked FetchAdds on the shared ring's Head (or, ``counter="tail"``, its Tail: the
    CPU's frees once chains free too, decision C20), posted by the CPU through its NIC."""

    def __init__(self, nic: Nic, ring: RingKeys, n_slots: int,
                 counter: str = "head") -> None:
        self.nic = nic
        self.ring = ring
        if counter == "head":
            self.counter_to, self.counter_rkey = ring.head_to, ring.head.rkey
        elif counter == "tail" and ring.tail is not None:
            self.counter_to, self.counter_rkey = ring.tail_to, ring.tail.rkey
        else:
            raise ValueError(f"NicTicketTaker: no key for counter {counter!r}")
        self.counter = counter
        self.add_mask = ring_add_mask(n_slots)
        self.cq = nic.create_cq(1 << 10)
        self.qp = nic.create_qp(self.cq, self.cq, sq_depth=64)
        connect(self.qp, self.qp)
        self.result_addr = nic.host.alloc(8, 8)
        self.result_mr = nic.register_mr(self.result_addr, 8, Access.LOCAL_WRITE)
        self.lock = simpy.Resource(nic.env, capacity=1)  #: one result word
        self.taken = 0  #: tickets taken this way
        self._ids = 0

    def take(self, cpu: TargetCpu, account: str) -> Gen:
        """Process helper (on a held core): take one Ticket; returns (ticket, time the
        atomic executed at the NIC in ps). Charges posting, the doorbell and the spin
        until the CQE is seen to ``account``."""
        env = self.nic.env
        with self.lock.request() as mine:
            yield mine
            start = int(env.now)
            self._ids += 1
            yield from cpu.spend(account, cpu.post_ps)
            self.qp.post_send(WorkRequest(
                Opcode.MASKED_FETCH_ADD, (Sge(self.result_addr, 8, self.result_mr.lkey),),
                WqeFlags.SIGNALED, remote_addr=self.counter_to,
                rkey=self.counter_rkey, swap_add=RING_ADD_DATA, swap_mask=self.add_mask,
                wr_id=self._ids))
            yield from cpu.spend(account, cpu.doorbell_ps)  # the doorbell is an MMIO write
            self.qp.ring_doorbell()
            got = yield from self.cq.wait(1)
            cqe = got[0]
            # the core spun on the CQ meanwhile: busy time, then the poll that saw it
            spun = int(env.now) - start - cpu.post_ps - cpu.doorbell_ps
            if spun > 0:
                cpu.charge(account, spun)
            yield from cpu.spend(account, cpu.poll_ps)
            if cqe.status is not WcStatus.SUCCESS:
                raise RuntimeError(f"the CPU's FetchAdd on {self.counter} failed: "
                                   f"{cqe.status.name}")
            order: ByteOrder = "big" if self.nic.profile.atomic_byte_order == "big" \
                else "little"
            old = self.nic.host.memory.read_u64(self.result_addr, order)
            self.taken += 1
            return old >> 32, cqe.time


__all__ = ["NicTicketTaker"]
