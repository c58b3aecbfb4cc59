"""What each send-queue work request does once the executor has decoded it.

:class:`SendOps` is a mixin of :class:`~kbtpsim.nic.qp.QueuePair` (it holds no state of
its own): NOP, WAIT, ENABLE, LOCAL_INV, native conditionals, SEND/WRITE segmentation and
payload gather, RDMA Read and atomic requests (bounded by ``max_rd_atomic``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import simpy

from kbtpsim.nic.errors import WcStatus
from kbtpsim.nic.packet import Packet, PktKind
from kbtpsim.nic.protection import R_LOCAL_READ, R_LOCAL_WRITE
from kbtpsim.nic.sg import gather
from kbtpsim.nic.units import Gen
from kbtpsim.nic.wake import Signal, Wake
from kbtpsim.nic.wqe import WRITE_OPS, Opcode, Sge, WorkRequest
from kbtpsim.nic.wrctx import WrContext

if TYPE_CHECKING:
    from kbtpsim.nic.network import LinkDirection
    from kbtpsim.nic.nicview import NicView


class SendOps:
    """The WR handlers of a QP's executor (a mixin: the state is the QP's)."""

    __slots__ = ()

    nic: NicView
    env: simpy.Environment
    peer: Any
    out: LinkDirection | None
    txq: deque[Packet]
    inflight: dict[int, WrContext]
    next_seq: int
    last_rd: simpy.Event | None
    rd_outstanding: int
    _tx_sig: Wake
    _rd_sig: Signal
    fault_hook: Callable[[str, int], int] | None

    def _x_nop(self, ctx: WrContext, wr: WorkRequest) -> Gen:
        ctx.done.succeed(WcStatus.SUCCESS)
        return
        yield

    def _x_wait(self, ctx: WrContext, wr: WorkRequest) -> Gen:
        cq = self.nic.cqs.get(wr.target)
        if cq is None:
            ctx.done.succeed(WcStatus.LOC_QP_OP_ERR)
            return
        yield cq.reach(wr.count)
        ctx.done.succeed(WcStatus.SUCCESS)

    def _x_enable(self, ctx: WrContext, wr: WorkRequest) -> Gen:
        qp = self.nic.qps.get(wr.target)
        if qp is None or not qp.managed:
            ctx.done.succeed(WcStatus.LOC_QP_OP_ERR)
            return
        qp.enable(wr.count)
        ctx.done.succeed(WcStatus.SUCCESS)
        return
        yield

    def _x_local_inv(self, ctx: WrContext, wr: WorkRequest) -> Gen:
        ok = self.nic.pt.invalidate(wr.imm)
        ctx.done.succeed(WcStatus.SUCCESS if ok else WcStatus.LOC_PROT_ERR)
        return
        yield

    def _condition(self, ctx: WrContext, wr: WorkRequest) -> Gen:
        cond = wr.cond
        assert cond is not None
        nic = self.nic
        addr = nic.pt.translate(cond.lkey, cond.addr, 8, R_LOCAL_READ)
        if addr < 0:
            ctx.done.succeed(WcStatus.LOC_PROT_ERR)
            return False
        yield from nic.pcie.read(addr, 8, "cond")
        value = nic.host.memory.read_u64(addr, nic.profile.atomic_byte_order)
        if (value ^ cond.compare) & cond.mask:
            ctx.opcode = Opcode.NOP
            ctx.done.succeed(WcStatus.SUCCESS)
            return False
        return True

    def _local_pieces(self, ctx: WrContext, sges: tuple[Sge, ...], need: int) -> bool:
        pt = self.nic.pt
        for sge in sges:
            addr = pt.translate(sge.lkey, sge.addr, sge.length, need)
            if addr < 0:
                ctx.done.succeed(WcStatus.LOC_PROT_ERR)
                return False
            ctx.pieces.append((addr, sge.length))
        return True

    def _new_seq(self, ctx: WrContext) -> int:
        seq = self.next_seq
        self.next_seq = seq + 1
        self.inflight[seq] = ctx
        return seq

    def _x_send_write(self, ctx: WrContext, wr: WorkRequest) -> Gen:
        if self.peer is None:
            ctx.done.succeed(WcStatus.LOC_QP_OP_ERR)
            return
        inline = wr.inline_data
        if inline is None and not self._local_pieces(ctx, wr.sges, R_LOCAL_READ):
            return
        total = wr.length
        ctx.byte_len = total
        kind = PktKind.WRITE if wr.opcode in WRITE_OPS else PktKind.SEND
        seq = self._new_seq(ctx)
        mtu = self.nic.profile.mtu
        n = max(1, -(-total // mtu))
        pkts = []
        for i in range(n):
            off = i * mtu
            ln = min(mtu, total - off)
            pkts.append(Packet(
                kind, seq, first=i == 0, last=i == n - 1, offset=off, length=ln, total=total,
                raddr=wr.remote_addr, rkey=wr.rkey, imm=wr.imm, opcode=wr.opcode,
                payload=None if inline is None else inline[off : off + ln],
                ready=None))
        if inline is None and total:
            self.dma_gather(ctx.pieces, pkts)
        elif inline is None:
            for p in pkts:
                p.payload = b""
        self.txq.extend(pkts)
        self._tx_sig.fire()
        return
        yield

    def _rd_slot(self, ctx: WrContext) -> Gen:
        limit = self.nic.profile.max_rd_atomic
        while self.rd_outstanding >= limit:
            yield self._rd_sig.wait()
        self.rd_outstanding += 1
        ctx.done.callbacks.append(self._rd_release)
        self.last_rd = ctx.done

    def _rd_release(self, _ev: Any) -> None:
        self.rd_outstanding -= 1
        self._rd_sig.fire()

    def _x_read(self, ctx: WrContext, wr: WorkRequest) -> Gen:
        seq = yield from self._responder_request(ctx, wr, wr.length)
        if seq is None:
            return
        self.txq.append(Packet(PktKind.READ_REQ, seq, total=wr.length, raddr=wr.remote_addr,
                               rkey=wr.rkey))
        self._tx_sig.fire()

    def _x_atomic(self, ctx: WrContext, wr: WorkRequest) -> Gen:
        seq = yield from self._responder_request(ctx, wr, 8)
        if seq is None:
            return
        self.txq.append(Packet(
            PktKind.ATOMIC_REQ, seq, total=8, raddr=wr.remote_addr, rkey=wr.rkey,
            opcode=wr.opcode, operands=(wr.swap_add, wr.compare, wr.swap_mask, wr.compare_mask)))
        self._tx_sig.fire()

    def _responder_request(self, ctx: WrContext, wr: WorkRequest, byte_len: int) -> Gen:
        """The common start of an RDMA Read or atomic: a connected QP, writable local
        buffers (the response lands there), a slot among the outstanding Reads/atomics;
        returns the request's sequence number, or None when the WR has failed."""
        if self.peer is None:
            ctx.done.succeed(WcStatus.LOC_QP_OP_ERR)
            return None
        if not self._local_pieces(ctx, wr.sges, R_LOCAL_WRITE):
            return None
        yield from self._rd_slot(ctx)
        ctx.byte_len = byte_len
        return self._new_seq(ctx)

    # ------------------------------------------------------------------ shared helpers
    def dma_gather(self, pieces: list[tuple[int, int]], pkts: list[Packet]) -> None:
        """Read the packets' payload by DMA: one latency (overlapping earlier transfers),
        then each packet's transfer in order; ``pkt.ready`` fires when its data is in."""
        env = self.env
        pcie = self.nic.pcie
        mem = self.nic.host.memory
        addr = pieces[0][0] if pieces else 0
        first = env.now

        def fill(ev: simpy.Event) -> None:
            pkt = ev.value
            pkt.payload = gather(mem, pieces, pkt.offset, pkt.length)
            pkt.sampled = env.now
            # in now (None: ready), and no cycle packet -> event -> packet left for the
            # garbage collector, which held each packet's payload until its next pass
            pkt.ready = None

        out = self.out
        if self.nic.fast and len(pkts) > 1 and (out is None or len(out.senders) == 1):
            # only where the transmitter books the burst ahead (QueuePair._tx_burst): on a
            # shared serialiser each packet is sent when its own DMA ends, as at full
            # fidelity, and reading every payload at the first's end would move the
            # transmit unit's bookings and the octets' snapshot (docs/performance.md)
            self._gather_fast(pieces, pkts, addr, first)
            return
        for pkt in pkts:
            done = pcie.read_done(addr, pkt.length, pkt, first)
            ev = env.timeout(done - env.now, pkt)
            ev.callbacks.append(fill)
            pkt.ready = ev

    def _gather_fast(self, pieces: list[tuple[int, int]], pkts: list[Packet], addr: int,
                     first: int) -> None:
        """Fast fidelity: the same PCIe reservations, but one event for the message (when
        the first packet's data is in, every packet's payload is read); the others carry
        their DMA end in ``ready_at`` and the transmitter books them in closed form."""
        env = self.env
        pcie = self.nic.pcie
        mem = self.nic.host.memory
        for pkt in pkts:
            pkt.ready_at = pcie.read_done(addr, pkt.length, pkt, first)

        def fill(_ev: simpy.Event) -> None:
            now = env.now
            for pkt in pkts:
                pkt.payload = gather(mem, pieces, pkt.offset, pkt.length)
                pkt.sampled = now

        ev = env.timeout(pkts[0].ready_at - env.now)
        ev.callbacks.append(fill)
        pkts[0].ready = ev
