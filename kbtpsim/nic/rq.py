"""The receive queue of a QP: its ring, receive WQEs and receive completions.

Receive WQEs are real bytes in a ring (``qp.rq_mr``), DMA-read when they are posted (the
snapshot is taken then; ``rq_prefetch`` in effect) or, if a message arrives first, when
it arrives; a message that finds no receive waits for one (an infinitely retried RNR).
An optional *doorbell record* lets a NIC write re-post the ring's WQEs
(:meth:`RecvQueue.attach_rq_doorbell`). Receive CQEs are written in order; under
``rdmap`` placement (RFC 5040 rules 5 and 10) a receive's CQE waits for all earlier WRITE
data to be placed. :class:`RecvQueue` is the base of :class:`~kbtpsim.nic.rx.RxSide`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

from kbtpsim.nic.cq import WcOpcode
from kbtpsim.nic.errors import RingFull, WcStatus
from kbtpsim.nic.protection import MemoryRegion
from kbtpsim.nic.qpstate import QpState
from kbtpsim.nic.units import Gen
from kbtpsim.nic.wake import Signal
from kbtpsim.nic.wqe import Sge, decode_recv, encode_recv

if TYPE_CHECKING:
    from kbtpsim.nic.nicview import NicView


class RecvQueue:
    """The receive queue of :class:`~kbtpsim.nic.qp.QueuePair` (a mixin)."""

    __slots__ = (
        "_rq_sig",
        "dma_until",
        "placing",
        "placing_waiters",
        "rcqe_at",
        "rq_addr",
        "rq_consumed",
        "rq_dbrec",
        "rq_depth",
        "rq_fetch",
        "rq_mr",
        "rq_post",
        "rq_stride",
        "rq_wr_ids",
    )

    nic: NicView
    env: simpy.Environment
    qpn: int
    state: QpState

    def _init_rq(self, rq_depth: int, rq_addr: int, rq_mr: MemoryRegion) -> None:
        self.rq_depth = rq_depth
        self.rq_addr = rq_addr
        self.rq_mr = rq_mr
        self.rq_stride = self.nic.profile.rq_wqe_size
        self.rq_post = 0
        self.rq_consumed = 0
        self.rq_dbrec: int | None = None  #: the receive doorbell record (attach_rq_doorbell)
        self.rq_wr_ids = [0] * rq_depth
        self.rq_fetch: dict[int, tuple[simpy.Event, list[bytes]]] = {}
        self.placing = 0  #: rdmap: WRITE packets received but not yet placed
        self.placing_waiters: list[simpy.Event] = []
        self.rcqe_at = 0  #: time of the latest receive CQE (they are written in order)
        #: when every memory write this QP's NIC issued for it (placements, atomic
        #: results) is visible: a connection's recovery reads memory only after that
        self.dma_until = 0
        self._rq_sig = Signal(self.env)

    # ------------------------------------------------------------------ software API
    def recv_wqe_addr(self, index: int) -> int:
        """Address of the ring slot of receive WQE ``index``."""
        return self.rq_addr + (index % self.rq_depth) * self.rq_stride

    def post_recv(self, sges: list[Sge] | tuple[Sge, ...], wr_id: int = 0) -> int:
        """Post a receive with up to ``max_sge`` scatter entries; returns its index."""
        prof = self.nic.profile
        if len(sges) > prof.max_sge:
            raise ValueError(f"{len(sges)} SGEs exceed max_sge {prof.max_sge}")
        if self.rq_post - self.rq_consumed >= self.rq_depth:
            raise RingFull(f"receive ring of QP {self.qpn} is full ({self.rq_depth} WQEs)")
        index = self.rq_post
        raw = encode_recv(tuple(sges), prof.wqe_field_byte_order, self.rq_stride)
        self.nic.host.memory.write(self.recv_wqe_addr(index), raw)
        self.rq_wr_ids[index % self.rq_depth] = wr_id
        self.rq_post = index + 1
        if self.rq_dbrec is not None:
            self.nic.host.memory.write(self.rq_dbrec, self.rq_post.to_bytes(4, "big"))
        self._rq_posted(index)
        return index

    def attach_rq_doorbell(self, addr: int) -> None:
        """Give the receive queue a *doorbell record* at ``addr`` (4 octets, big-endian:
        the count of receive WQEs posted), as mlx5 has one (rdma-core
        ``providers/mlx5/qp.c``: ``mlx5_post_recv`` ends with ``qp->db[MLX5_RCV_DBR] =
        htobe32(qp->rq.head & 0xffff)``; the NIC reads it, there is no MMIO doorbell for
        receives). A NIC write that raises the count (a chain's loopback FetchAdd on it)
        posts the ring's next WQEs again, as they are in the ring, with their earlier
        ``wr_id``: a receive queue that a chain re-arms (chains v2)."""
        self.rq_dbrec = addr
        self.nic.host.memory.write(addr, self.rq_post.to_bytes(4, "big") + bytes(4))
        self._watch_dbrec()

    def _watch_dbrec(self) -> None:
        assert self.rq_dbrec is not None
        self.nic.watch(self.rq_dbrec).callbacks.append(self._dbrec_written)

    def _dbrec_written(self, _ev: simpy.Event) -> None:
        assert self.rq_dbrec is not None
        head = int.from_bytes(self.nic.host.memory.read(self.rq_dbrec, 4), "big")
        while (head - self.rq_post) & 0xFFFF_FFFF and (head - self.rq_post) & 0x8000_0000 == 0:
            if self.rq_post - self.rq_consumed >= self.rq_depth:
                break  # more than the ring holds: the extra count is ignored
            index = self.rq_post
            self.rq_post = index + 1
            self._rq_posted(index)
        self._watch_dbrec()

    def _rq_posted(self, index: int) -> None:
        """Receive WQE ``index`` became available to the NIC."""
        if self.state is QpState.ERROR:
            self._flush_rq()
            return
        # the NIC reads the receive WQE now (in the background): its snapshot
        addr = self.recv_wqe_addr(index)
        done = self.nic.pcie.read_done(addr, self.rq_stride, "recv wqe")
        ev = self.env.timeout(done - self.env.now)
        box: list[bytes] = []
        ev.callbacks.append(lambda _e: box.append(self.nic.host.memory.read(addr,
                                                                             self.rq_stride)))
        self.rq_fetch[index] = (ev, box)
        self._rq_sig.fire()

    def _flush_rq(self) -> None:
        while self.rq_consumed < self.rq_post:
            idx = self.rq_consumed
            self.rq_consumed += 1
            self.rq_fetch.pop(idx, None)
            self._recv_cqe(0, idx, WcStatus.WR_FLUSH_ERR, WcOpcode.RECV, 0)

    def _recv_cqe(self, at: int, idx: int, status: WcStatus, opcode: WcOpcode, byte_len: int,
                  imm: int | None = None, inval: int | None = None) -> None:
        """Write a receive CQE (in order, not before ``at``; rdmap: after all Write data)."""
        at = self.rcqe_at = max(at, self.rcqe_at, self.env.now)
        fields = {"wr_id": self.rq_wr_ids[idx % self.rq_depth], "status": status,
                  "opcode": opcode, "qpn": self.qpn, "wqe_index": idx, "byte_len": byte_len,
                  "imm": imm, "invalidated_stag": inval}
        if self.nic.rdmap and self.placing:
            self.env.process(self._recv_cqe_after_writes(fields))
        else:
            self.nic.post_cqe(self.recv_cq, "recv cqe", at,  # type: ignore[attr-defined]
                              **fields)

    def _recv_cqe_after_writes(self, fields: dict) -> Gen:
        yield from self._all_writes_placed()
        self.rcqe_at = max(self.rcqe_at, self.env.now)
        self.nic.post_cqe(self.recv_cq, "recv cqe", **fields)  # type: ignore[attr-defined]

    def _write_placed(self) -> None:
        self.placing -= 1
        if not self.placing and self.placing_waiters:
            waiters, self.placing_waiters = self.placing_waiters, []
            for ev in waiters:
                ev.succeed()

    def _all_writes_placed(self) -> Gen:
        """rdmap (RFC 5040 rules 5, 10): a Send is delivered after earlier Write data."""
        if self.placing:
            ev = self.env.event()
            self.placing_waiters.append(ev)
            yield ev

    def _take_recv(self) -> Gen:
        """The next receive WQE (waiting for one to be posted): (index, scatter list);
        None if the QP is, or goes, into the error state meanwhile (the message is then
        dropped: an error QP receives nothing, and its flushed receive queue is empty)."""
        while self.rq_consumed >= self.rq_post:
            if self.state is QpState.ERROR:  # type: ignore[attr-defined]
                return None
            yield self._rq_sig.wait()
        idx = self.rq_consumed
        self.rq_consumed = idx + 1
        ev, box = self.rq_fetch.pop(idx)
        if not box:
            yield ev
        return idx, decode_recv(box[0], self.nic.profile.wqe_field_byte_order)


__all__ = ["RecvQueue"]
