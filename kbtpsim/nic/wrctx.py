"""A work request between its start and its retirement, and the CQE opcode of each
WR opcode (shared by the send pipeline, the WR handlers and the receive side)."""

from __future__ import annotations

import simpy

from kbtpsim.nic.cq import WcOpcode
from kbtpsim.nic.wqe import Opcode

WC_OPCODE = {
    Opcode.NOP: WcOpcode.NOP, Opcode.WAIT: WcOpcode.NOP, Opcode.ENABLE: WcOpcode.NOP,
    Opcode.SEND: WcOpcode.SEND, Opcode.SEND_WITH_IMM: WcOpcode.SEND,
    Opcode.SEND_WITH_INVALIDATE: WcOpcode.SEND, Opcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
    Opcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE, Opcode.RDMA_READ: WcOpcode.RDMA_READ,
    Opcode.CAS: WcOpcode.COMP_SWAP, Opcode.FETCH_ADD: WcOpcode.FETCH_ADD,
    Opcode.MASKED_CAS: WcOpcode.MASKED_COMP_SWAP,
    Opcode.MASKED_FETCH_ADD: WcOpcode.MASKED_FETCH_ADD, Opcode.LOCAL_INV: WcOpcode.LOCAL_INV,
}


class WrContext:
    """A WR between its start and its retirement."""

    __slots__ = ("byte_len", "done", "index", "opcode", "pieces", "sampled", "signaled",
                 "wr_id")

    def __init__(self, env: simpy.Environment, index: int, wr_id: int, opcode: Opcode,
                 signaled: bool) -> None:
        self.index = index
        self.wr_id = wr_id
        self.opcode = opcode
        self.signaled = signaled
        self.done = env.event()
        self.byte_len = 0
        self.pieces: list[tuple[int, int]] = []
        #: RDMA Read: when the responder's DMA read the first octets; an atomic: when its
        #: result's write lands at the responder, which may be after this WR's CQE is
        #: made (its posted write queued behind others) (ps; Cqe.sampled)
        self.sampled: int | None = None
