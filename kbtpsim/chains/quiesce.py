"""Frees quiesced against the NIC's LOAD chains (decision C13).

Chains v2's LOAD reads the table entry, then (two steps later) the block, and does not
re-read the entry (decision O3's seqlock costs two steps and the data Write's
acknowledgement). A FREE of the handle on another connection, and a re-allocation of the
block, in between would let the chain deliver the block's new contents under the old
Generation. So the target returns a freed block to the ring only once no chain can
still read it under the old entry (``TargetConfig.free_quiesce``): the FREE clears the
entry at once (draft, "Block Free" 2), then waits; :class:`FreeQuiescence` tells the
target (``Target.quiesced``) when every other connection's credit that may have read the
entry before the unbind has finished, and the FREE then takes its Tail ticket, writes
its slot and completes (3, 4). A LOAD that read the entry before the unbind is
linearised before the FREE and delivers the old contents; one that reads it after sees
the FREE. The draft lets a free wait (it already waits for an unconsumed slot); only
FREE latency pays, and only while another connection has a request in its chain.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.system.server import SoftwareTargetServer
from kbtpsim.target import Effect
from kbtpsim.wire import Opcode

if TYPE_CHECKING:
    from kbtpsim.chains.server import _ChainConn


#: opcodes whose chains read or write a bound block under its entry (LOAD, STORE)
READS_BLOCKS = frozenset({Opcode.LOAD, Opcode.STORE})


class FreeQuiescence:
    """Mixed into :class:`~kbtpsim.chains.server.OffloadedTargetServer`: the grace marks
    of parked frees and their release (``_quiesce``, called after every target call and
    in every CPU pass while a free waits)."""

    _chain_conns: dict[int, _ChainConn]
    target: Any
    cpu: Any
    env: simpy.Environment
    log: list[Any]

    if TYPE_CHECKING:
        def _kick(self) -> None: ...
        def carry_out(self, effects: Any, account: str) -> Generator[simpy.Event, Any, Any]: ...

    def _init_quiescence(self) -> None:
        #: tail_via_nic (C20): blocks whose grace has passed, waiting for the CPU to take
        #: their Tail ticket through the NIC (:meth:`_return_blocks`)
        self._returning: list[int] = []
        self._tail_tickets: Any = None
        #: block -> {connection: credits it must have finished}
        self._grace: dict[int, dict[int, int]] = {}
        #: frees whose block waited for another connection's chain, and the total wait
        self.quiesce_waits = 0
        self.quiesce_wait_ps = 0
        self._parked_at: dict[int, int] = {}

    def _grace_marks(self) -> dict[int, int]:
        """For each chain connection, the credits that must have finished before a block
        unbound now may go back to the ring. Credits start one at a time past the gate:
        a later one reads the entry after the unbind and sees the free. Those running
        are the gate's count (if its request has arrived) and, since a LOAD of a sealed
        block releases the gate before its data Write ends (decision C16), earlier ones
        the CPU has not seen end. Only a LOAD or STORE matters (an ALLOC_STORE reads no
        bound block, and the freed block is not in the ring): the mark is the last such
        credit, plus one. The CPU reads the receive and gate CQ counts it polls and the
        requests' opcode octets."""
        marks: dict[int, int] = {}
        for cid, cc in self._chain_conns.items():
            cs = cc.chains
            if cs.software:
                continue
            last = min(cs.gate_cq.count, cs.recv_cq.count - 1)  # last credit started
            for credit in range(last, cs.finished - 1, -1):
                cr = cs.live.get(credit)
                if cr is None or cs.nic.host.memory.read(cr.bufs["hdr"] + 1, 1)[0] \
                        in READS_BLOCKS:
                    marks[cid] = credit + 1
                    break
        return marks

    def _grace_passed(self, marks: dict[int, int]) -> bool:
        for cid, need in marks.items():
            cc = self._chain_conns.get(cid)
            if cc is None:
                continue
            cs = cc.chains
            if cs.finished < need and not (cs.failed_at is not None and cs.drained()):
                return False
        return True

    def _quiesce(self, now: int) -> list[Effect]:
        """Give every parked free's block back to the target whose grace has passed
        (``Target.quiesced``, logged); new parked blocks get their marks first."""
        out: list[Effect] = []
        for block in self.target.quiescing:
            if block not in self._grace and block not in self._returning:
                self._grace[block] = self._grace_marks()
                self._parked_at[block] = now
        for block in list(self._grace):
            if self._grace_passed(self._grace[block]):
                if self._grace.pop(block):
                    self.quiesce_waits += 1
                    self.quiesce_wait_ps += now - self._parked_at[block]
                del self._parked_at[block]
                if self._tail_tickets is not None:  # its Tail ticket through the NIC
                    self._returning.append(block)
                    if not self._return_wake.triggered:
                        self._return_wake.succeed()
                    continue
                out += SoftwareTargetServer._call(self, ("quiesced", block), now)  # type: ignore[arg-type]
        return out

    def _start_returns(self, taker: Any) -> None:
        """``tail_via_nic`` (C20): the CPU takes its Tail tickets with ``taker``
        (:class:`~kbtpsim.chains.cpu_ticket.NicTicketTaker` on Tail), in a process of
        its own that wakes when a block's grace has passed."""
        self._tail_tickets = taker
        self._return_wake = self.env.event()
        self.env.process(self._returner())

    def _returner(self) -> Generator[simpy.Event, Any, None]:
        while True:
            yield self._return_wake
            self._return_wake = self.env.event()
            while self._returning:
                with self.cpu.request() as core:
                    yield core
                    yield from self._return_blocks()

    def _return_blocks(self) -> Generator[simpy.Event, Any, None]:
        """Process helper (on a held core; ``tail_via_nic``, decision C20): return the
        blocks whose grace has passed, each with a Tail ticket the CPU takes through its
        NIC (the NIC's atomic unit orders it against the FREE chains' FetchAdds on Tail),
        charged to ``FREE``, and post each return's effects (completions of the frees)
        before the next ticket: a FREE the target has completed no longer holds its
        connection's credit, so its COMPLETION must be in the credit's slots before that
        connection's process, which may run on the other core meanwhile, lets it go."""
        while self._returning:
            block = self._returning[0]  # listed until returned: a _quiesce meanwhile
            # (another connection's pass, on the other core) must not park it again
            ticket, at = yield from self._tail_tickets.take(self.cpu, "FREE")
            self._returning.pop(0)
            now = int(self.env.now)
            # for replay(): the return took effect at the ticket's FetchAdd
            self.log.append(("quiesced", block, at))
            effects = self.target.quiesced(block, now, ticket, at) + self._quiesce(now)
            self._kick()
            yield from self.carry_out(effects, "FREE")


__all__ = ["FreeQuiescence"]
