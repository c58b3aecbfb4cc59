"""What the target CPU writes into a connection's chains (mixed into
:class:`~kbtpsim.chains.post.ChainServer`): the session octet and the ALLOC_STORE quota
octets of credits still held behind the gate, the gate ENABLE that releases the next
credit after the CPU served one, and the *CPU slots*: NOP WQEs after each credit's chain
on the connection QP that the CPU rewrites with its own work requests while it holds
that credit's gate (the managed connection QP is the only path to the initiator)."""

from __future__ import annotations

from dataclasses import replace

from kbtpsim.chains.vocab import session_octets
from kbtpsim.chains.wr_build import CPU_WR, _Credit
from kbtpsim.nic import Cqe, Nic, QueuePair, WorkRequest, WqeFlags
from kbtpsim.nic.wqe import Opcode, encode_wqe


class CpuControl:
    """The CPU's writes into the chains of one connection (module docstring)."""

    nic: Nic
    conn: QueuePair
    gate: QueuePair
    live: dict[int, _Credit]
    session: bool
    software: bool
    credits: int
    cpu_slots: int
    alloc_arms: list[str]
    device_memory: bool
    mmio_writes: int
    wrs_posted: int
    _cpu_slot_index: dict[int, int]
    _cpu_slot_used: dict[int, int]
    _cpu_cqes: list[Cqe]

    def set_session(self, established: bool, after: int) -> None:
        """The CPU processed credit ``after`` (HELLO, GOODBYE) and the session is now
        ``established`` or not: set the session octet of every later live credit (their
        chains wait for ``after``'s gate, which the CPU has not released yet) and of the
        credits posted from now on. Without it no fast path serves a request (software:
        MALFORMED, request before HELLO)."""
        self.session = established
        for n, cr in self.live.items():
            if n > after:
                for at in session_octets(cr.bufs):
                    self.nic.host.memory.write(at, b"\x01" if established else b"\x00")
                    self.mmio_writes += self.device_memory

    def sync_credits(self, after: int, established: bool, allowed: int,
                     keep_disarmed: set[int] | frozenset[int] = frozenset()) -> None:
        """The CPU served credit ``after`` (later credits wait for its gate): set the later
        credits' session octets to ``established``, and arm or disarm their ALLOC_STORE
        allowance so that at most ``allowed`` (quota - usage) of them are armed (an
        allocation in software may have used one, a FREE returned one). Credits in
        ``keep_disarmed`` are never armed."""
        if established != self.session:
            self.set_session(established, after)
        if not self.alloc_arms:
            return
        later = [n for n in sorted(self.live) if n > after]
        armed = [n for n in self.armed_credits() if n > after]
        for n in armed[allowed:]:
            self.disarm(n)
        for n in [n for n in later if n not in armed and n not in keep_disarmed
                  ][:max(0, allowed - len(armed))]:
            self.arm(n)

    def armed_credits(self) -> list[int]:
        """Live credits armed for ALLOC_STORE whose chain has not reported yet."""
        return [n for n, cr in sorted(self.live.items()) if cr.alloc_armed]

    def arm(self, credit: int) -> None:
        """Give ``credit`` an ALLOC_STORE allowance (set its quota octet); same rule as
        :meth:`disarm`: only for a credit whose chain is still held behind the gate."""
        cr = self.live[credit]
        if self.alloc_arms and not cr.alloc_armed:
            cr.alloc_armed = True
            for arm in self.alloc_arms:
                self.nic.host.memory.write(cr.bufs[arm] + 7, b"\x01")
                self.mmio_writes += self.device_memory

    def disarm(self, credit: int) -> None:
        """Withdraw ``credit``'s ALLOC_STORE allowance (its quota octet) before its chain
        runs: only for a credit behind one the CPU has not released yet (its chain waits
        for the gate, so it cannot have read the octet)."""
        cr = self.live[credit]
        if cr.alloc_armed:
            cr.alloc_armed = False
            for arm in self.alloc_arms:
                self.nic.host.memory.write(cr.bufs[arm] + 7, b"\x00")
                self.mmio_writes += self.device_memory

    def release(self, credit: int) -> None:
        """The CPU served ``credit``: let the next credit's chain start."""
        self._cpu_slot_used.pop(credit, None)
        self._cpu_slot_index.pop(credit - 2 * self.credits, None)  # long re-posted
        if not self.software:
            self._release_gate(credit)
            self.mmio_writes += 1  # the CPU's ENABLE of the gate QP: a doorbell write

    def _release_gate(self, credit: int) -> None:
        """The CPU's ENABLE of the gate NOP that lets the credit after ``credit`` start."""
        self.gate.enable(credit + 1)  # one gate NOP per credit, in order

    # ------------------------------------------------------------------ CPU slots
    def cpu_slots_free(self, credit: int) -> int:
        """CPU slots of ``credit`` not written yet (0 without slots)."""
        if credit not in self._cpu_slot_index:
            return 0
        return self.cpu_slots - self._cpu_slot_used.get(credit, 0)

    def cpu_post(self, credit: int, wr: WorkRequest) -> int:
        """Write ``wr`` (the CPU's) into the next CPU slot of ``credit``, a finished credit
        whose gate the CPU still holds: the slot's WQE has not been fetched (its QP is
        enabled only up to the credit's own chain). Its CQE comes back through
        :meth:`take_cpu_cqes` with ``wr_id | CPU_WR``. Returns the WQE index."""
        if self.cpu_slots_free(credit) <= 0:
            raise RuntimeError(f"credit {credit}: no free CPU slot on the connection QP "
                               f"({self.cpu_slots} per credit)")
        used = self._cpu_slot_used.get(credit, 0)
        index = self._cpu_slot_index[credit] + used
        self._cpu_slot_used[credit] = used + 1
        qp = self.conn
        prof = self.nic.profile
        if wr.opcode in (Opcode.WAIT, Opcode.ENABLE):
            raise ValueError("CPU slots take data-path work requests only")
        # signaled: every slot yields one CQE (the later credits' WAIT counts rely on it)
        wr = replace(wr, flags=wr.flags | WqeFlags.SIGNALED)
        raw = encode_wqe(wr, prof.wqe_field_byte_order, index=index, qpn=qp.qpn,
                         size=qp.stride)
        self.nic.host.memory.write(qp.wqe_addr(index), raw)
        slot = index % qp.sq_depth
        qp.posted[slot] = wr
        qp.wr_ids[slot] = wr.wr_id | CPU_WR
        self.wrs_posted += 1
        return index

    def cpu_enable(self, credit: int) -> None:
        """Let the CPU slots of ``credit`` written so far run (the CPU's ENABLE)."""
        used = self._cpu_slot_used.get(credit, 0)
        if credit in self._cpu_slot_index and used:
            self.conn.enable(self._cpu_slot_index[credit] + used)

    def take_cpu_cqes(self) -> list[Cqe]:
        """CQEs of the CPU's slot work requests seen by :meth:`poll` (``wr_id`` without
        :data:`CPU_WR`), oldest first."""
        out = [replace(c, wr_id=c.wr_id & ~CPU_WR) for c in self._cpu_cqes
               if c.wr_id != CPU_WR]  # an unused slot's NOP
        self._cpu_cqes.clear()
        return out


__all__ = ["CpuControl"]
