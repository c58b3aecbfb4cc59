"""Posting a credit slot's recycle segment (:mod:`.recycle` plans it) on the slot's
recycler, once: mixed into :class:`~kbtpsim.chains.v2.server.RecyclingChainServer`.
Each step of the plan becomes one work request: a loopback Write from the pristine
images (scratch, modified WQEs), a FetchAdd advancing a WAIT or ENABLE count in a WQE,
the WAIT for them on the recycler's own CQ, the FetchAdd on the receive doorbell record,
and the ENABLE of the slot's master through its next round."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kbtpsim.nic import MemoryRegion, Nic, QueuePair, Sge, WorkRequest, WqeFlags
from kbtpsim.nic.wqe import Opcode, field_layout


class SegmentPosting:
    """Posts recycle segments (module docstring)."""

    nic: Nic
    _slots: dict[int, Any]  #: slot -> its round-0 facts (server._Slot)
    recyclers: list[QueuePair]
    masters: list[QueuePair]
    slot_size: int
    pristine: MemoryRegion
    scratch: MemoryRegion
    sink_addr: int
    sink: MemoryRegion
    dbrec_addr: int
    dbrec: MemoryRegion

    if TYPE_CHECKING:
        def queues(self) -> dict[str, QueuePair]: ...

    def _post_segment(self, s: int, scratch_at: int) -> None:
        """Post credit slot ``s``'s recycle segment on its recycler (once)."""
        slot = self._slots[s]
        plan = slot.plan
        assert plan is not None and slot.wqe_copies is not None
        qps = self.queues()
        order = self.nic.profile.atomic_byte_order
        shift = 32 if order == "big" else 0  # the count is the word's first 4 octets
        sig = WqeFlags.SIGNALED
        rec = self.recyclers[slot.recycler]
        signaled_before = 0
        master = self.masters[s]
        master_end = slot.segments[f"master#{s}"][1]
        for i, st in enumerate(plan.steps):
            wr_id = s << 16 | i  # on the recycler's own CQ, which only its WAITs count
            if st.kind == "restore_scratch":
                wr = WorkRequest(Opcode.RDMA_WRITE, (Sge(slot.pristine, self.slot_size,
                                                         self.pristine.lkey),),
                                 sig, remote_addr=scratch_at, rkey=self.scratch.rkey,
                                 wr_id=wr_id)
            elif st.kind in ("restore_wqes", "restore_ctrl"):
                role, first, n = st.span
                q = qps[role]
                # a WAIT/ENABLE whose count is advanced: everything before the count
                # (its control segment, CAS-armed on cx5; its condition segment, whose
                # mask a C21 patch frees)
                last = first + n - 1
                length = field_layout(q.posted[last % q.sq_depth])["wait_index"][0] \
                    + (n - 1) * q.stride if st.kind == "restore_ctrl" or st.upto_count \
                    else n * q.stride
                wr = WorkRequest(Opcode.RDMA_WRITE, (Sge(slot.wqe_copies[(role, first)],
                                                         length, self.pristine.lkey),),
                                 sig, remote_addr=q.wqe_addr(first), rkey=q.sq_mr.rkey,
                                 wr_id=wr_id)
            elif st.kind == "advance":
                c = st.count
                assert c is not None
                q = rec if c.qp == "recycler" else qps[c.qp]
                if c.qp == "recycler":  # its own WAIT/ENABLE (no condition)
                    probe = WorkRequest(Opcode.WAIT if c.opcode == "WAIT" else Opcode.ENABLE)
                else:
                    probe = q.posted[c.index % q.sq_depth]
                off = field_layout(probe)["wait_index"][0]
                wr = WorkRequest(Opcode.FETCH_ADD, (Sge(self.sink_addr, 8, self.sink.lkey),),
                                 sig, remote_addr=q.wqe_addr(c.index) + off,
                                 rkey=q.sq_mr.rkey, swap_add=c.delta << shift, wr_id=wr_id)
            elif st.kind == "wait":
                wr = WorkRequest(Opcode.WAIT, target=rec.send_cq.cqn,
                                 count=slot.rec_base // len(plan.steps)
                                 * plan.signaled + signaled_before, wr_id=wr_id)
            elif st.kind == "rearm_recv":
                wr = WorkRequest(Opcode.FETCH_ADD, (Sge(self.sink_addr, 8, self.sink.lkey),),
                                 sig, remote_addr=self.dbrec_addr, rkey=self.dbrec.rkey,
                                 swap_add=1 << 32, wr_id=wr_id)
            elif st.kind == "nop":  # a step a mutant took out (kbtpsim.oracle.mutants)
                wr = WorkRequest(Opcode.NOP, flags=sig if st.signaled else WqeFlags.NONE,
                                 wr_id=wr_id)
            else:  # enable_master: through this credit's next round
                wr = WorkRequest(Opcode.ENABLE, target=master.qpn,
                                 count=master_end + master.sq_depth, wr_id=wr_id)
            idx = rec.post_send(wr)
            assert idx == slot.rec_base + i, (idx, slot.rec_base, i)
            signaled_before += st.signaled


__all__ = ["SegmentPosting"]
