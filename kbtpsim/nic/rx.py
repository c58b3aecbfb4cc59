"""The responder side of a QP: incoming requests and responses.

Requests (SEND, WRITE, READ, atomics) are served in arrival order: the STag check of the
first packet decides the whole message (a refused one is answered by a NAK carrying
REM_ACCESS_ERR / REM_INV_REQ_ERR / REM_OP_ERR); WRITE and SEND payloads are placed by posted
DMA writes that land one PCIe latency later; READ and atomic responses go out through the
QP's transmitter, in order. A SEND consumes the next receive WQE (:mod:`kbtpsim.nic.rq`),
whose scatter list may point anywhere the NIC may write, including other QPs' WQEs.

Placement order: ``in_order`` places every packet in arrival order; ``rdmap`` (RFC 5040)
adds a per-packet random delay of up to ``ooo_jitter_ns`` to WRITE placement, and a SEND is
delivered (its CQE) only after all earlier WRITE data is placed (rules 3, 5 and 10).

The receiver (receive unit, then the packet's handler) is a chain of callbacks
(:mod:`kbtpsim.nic.wake`) that drives each handler's generator as a process would: it
continues on the events a handler yields, in the same order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy

from kbtpsim.atomics import compare_swap, fetch_add, masked_compare_swap, masked_fetch_add
from kbtpsim.nic.cq import WcOpcode
from kbtpsim.nic.errors import WcStatus
from kbtpsim.nic.packet import Packet, PktKind
from kbtpsim.nic.protection import (
    R_LOCAL_WRITE,
    R_REMOTE_ATOMIC,
    R_REMOTE_READ,
    R_REMOTE_WRITE,
    MemoryRegion,
)
from kbtpsim.nic.qpstate import QpState
from kbtpsim.nic.rq import RecvQueue
from kbtpsim.nic.sg import gather, scatter
from kbtpsim.nic.units import Gen
from kbtpsim.nic.wake import Signal, Wake, call_at
from kbtpsim.nic.wqe import Opcode

if TYPE_CHECKING:
    from kbtpsim.nic.wrctx import WrContext


_ATOMIC = {
    Opcode.CAS: lambda v, o: compare_swap(v, o[1], o[0]),
    Opcode.FETCH_ADD: lambda v, o: fetch_add(v, o[0]),
    Opcode.MASKED_CAS: lambda v, o: masked_compare_swap(v, o[1], o[3], o[0], o[2]),
    Opcode.MASKED_FETCH_ADD: lambda v, o: masked_fetch_add(v, o[0], o[2]),
}


class RxMessage:
    """State of the incoming message being received."""

    __slots__ = ("pieces", "rq_index", "seq", "status")

    def __init__(self, seq: int, rq_index: int, pieces: list[tuple[int, int]],
                 status: WcStatus) -> None:
        self.seq = seq
        self.rq_index = rq_index
        self.pieces = pieces
        self.status = status


class RxSide(RecvQueue):
    """Receive-side half of :class:`~kbtpsim.nic.qp.QueuePair` (a mixin)."""

    __slots__ = (
        "_rx_handlers",
        "_rx_read_ps",
        "_rx_wake",
        "rx_msg",
        "rxq",
    )

    txq: deque[Packet]
    inflight: dict[int, WrContext]

    def _init_rx(self, rq_depth: int, rq_addr: int, rq_mr: MemoryRegion) -> None:
        self._init_rq(rq_depth, rq_addr, rq_mr)
        self.rxq: deque[Packet] = deque()
        self.rx_msg: RxMessage | None = None
        self._rx_wake = Wake(self.env, self._rx_next)
        #: by packet kind: a handler that may wait returns a generator (driven on)
        self._rx_handlers: dict[PktKind, Callable[[Packet], Gen | None]] = {
            PktKind.ACK: self._r_ack, PktKind.NAK: self._r_ack, PktKind.SEND: self._r_send,
            PktKind.WRITE: self._r_write, PktKind.READ_REQ: self._r_read,
            PktKind.ATOMIC_REQ: self._r_atomic, PktKind.READ_RESP: self._r_read_resp,
            PktKind.ATOMIC_RESP: self._r_atomic_resp,
        }
        prof = self.nic.profile
        self._rx_read_ps = round(prof.read_req_cycles * prof.cycle_ps)

    def deliver(self, pkt: Packet) -> None:
        """A packet arrives from the link."""
        self.rxq.append(pkt)
        self._rx_wake.fire()

    def arrive(self, pkt: Packet) -> None:
        """:meth:`deliver`, as the only callback of the packet's arrival event (the
        link's): the receiver may continue at once (:meth:`Wake.fire_last`)."""
        self.rxq.append(pkt)
        self._rx_wake.fire_last()

    # ------------------------------------------------------------------ the receiver
    # receive unit, then the packet's handler, packet after packet (a chain of
    # callbacks, kbtpsim.nic.wake): the handler's generator is driven as a process
    # would drive it, continuing on each event it yields when that event is processed
    def _rx_next(self, _ev: simpy.Event | None = None) -> None:
        rxq = self.rxq
        if not rxq:
            self._rx_wake.arm()
            return
        nic = self.nic
        env = self.env
        pkt = rxq.popleft()
        cost = nic.rx_ps + nic.pt.xlat_ps.get(pkt.rkey, 0)  # indirect keys' translation
        if pkt.kind is PktKind.READ_REQ:
            cost += self._rx_read_ps
        call_at(env, nic.rx_unit.reserve(cost, pkt), self._rx_handle, pkt)

    def _rx_handle(self, ev: simpy.Event) -> None:
        pkt: Packet = ev.value
        gen = self._rx_handlers[pkt.kind](pkt)
        if gen is None:
            self._rx_next()
        else:
            self._rx_drive(gen, None)

    def _rx_drive(self, gen: Gen, value: object) -> None:
        """Run handler ``gen`` on: to its end (then the next packet), or until it yields
        an event not yet processed (it continues when that event is)."""
        while True:
            try:
                ev = gen.send(value)
            except StopIteration:
                break
            if ev.callbacks is not None:
                ev.callbacks.append(lambda e, g=gen: self._rx_resume(g, e))
                return
            if not ev.ok:
                raise ev.value  # no handler waits on an event that fails
            value = ev.value
        self._rx_next()

    def _rx_resume(self, gen: Gen, ev: simpy.Event) -> None:
        if not ev.ok:
            raise ev.value
        self._rx_drive(gen, ev.value)

    def _place(self, addr: int, data: bytes | memoryview, extra_ps: int = 0,
               then: Callable[[], None] | None = None) -> int:
        """Issue a posted DMA write of ``data`` (in order behind earlier ones); ``then`` runs
        when it is visible. Returns that time."""
        nic = self.nic
        env = self.env
        visible = nic.pcie.write_visible(addr, len(data)) + extra_ps
        if visible > self.dma_until:
            self.dma_until = visible
        if then is None:
            call_at(env, visible, lambda _e: nic.store(addr, data))
        else:
            call_at(env, visible, lambda _e: (nic.store(addr, data), then()))
        return visible

    def _send(self, pkt: Packet) -> None:
        self.txq.append(pkt)
        self._tx_sig.fire()  # type: ignore[attr-defined]

    def _nak(self, seq: int, status: WcStatus) -> None:
        """Refuse a request; an access or invalid-request error also moves this responder
        QP to the error state (IB: IBV_EVENT_QP_ACCESS_ERR / QP_REQ_ERR)."""
        self._send(Packet(PktKind.NAK, seq, status=status))
        if status is not WcStatus.REM_OP_ERR and self.state is not QpState.ERROR:
            self.to_error()  # type: ignore[attr-defined]

    def _r_ack(self, pkt: Packet) -> None:
        ctx = self.inflight.pop(pkt.seq, None)
        if ctx is not None and not ctx.done.triggered:
            ctx.done.succeed(WcStatus.SUCCESS if pkt.kind is PktKind.ACK
                             else WcStatus(pkt.status))

    def _responder_down(self) -> bool:
        return self.state is QpState.ERROR

    def _r_send(self, pkt: Packet) -> Gen:
        if pkt.first:
            got = None if self._responder_down() else (yield from self._take_recv())
            if got is None:  # an error QP, or one that went into error while it waited
                self.rx_msg = RxMessage(pkt.seq, -1, [], WcStatus.REM_OP_ERR)
            else:
                idx, sges = got
                pieces: list[tuple[int, int]] = []
                status = WcStatus.SUCCESS
                if pkt.total > sum(s.length for s in sges):
                    status = WcStatus.LOC_LEN_ERR
                else:
                    for s in sges:
                        a = self.nic.pt.translate(s.lkey, s.addr, s.length, R_LOCAL_WRITE)
                        if a < 0:
                            status = WcStatus.LOC_PROT_ERR
                            break
                        pieces.append((a, s.length))
                self.rx_msg = RxMessage(pkt.seq, idx, pieces, status)
        msg = self.rx_msg
        assert msg is not None
        vis = self.env.now
        if msg.status is WcStatus.SUCCESS:
            for addr, data in scatter(msg.pieces, pkt.offset, pkt.payload or b""):
                vis = self._place(addr, data)
        if not pkt.last:
            return
        self.rx_msg = None
        if msg.rq_index < 0:
            self._nak(pkt.seq, WcStatus.REM_OP_ERR)
            return
        if msg.status is not WcStatus.SUCCESS:
            self._recv_cqe(vis, msg.rq_index, msg.status, WcOpcode.RECV, 0)
            self._nak(pkt.seq, WcStatus.REM_INV_REQ_ERR if msg.status is WcStatus.LOC_LEN_ERR
                      else WcStatus.REM_OP_ERR)
            if self.state is not QpState.ERROR:
                self.to_error()  # type: ignore[attr-defined]
            return
        inval = None
        if pkt.opcode == Opcode.SEND_WITH_INVALIDATE:
            region = self.nic.pt.get(pkt.imm)
            if region is not None and region.qpn == self.qpn:
                self.nic.pt.invalidate(pkt.imm)
                inval = pkt.imm
        imm = pkt.imm if pkt.opcode == Opcode.SEND_WITH_IMM else None
        # the CQE's DMA write queues behind the data's (rdmap: behind all Write data too)
        self._recv_cqe(self.env.now, msg.rq_index, WcStatus.SUCCESS, WcOpcode.RECV, pkt.total,
                       imm, inval)
        self._send(Packet(PktKind.ACK, pkt.seq))

    def _r_write(self, pkt: Packet) -> Gen | None:
        nic = self.nic
        if pkt.first:
            status = WcStatus.SUCCESS
            base = nic.pt.translate(pkt.rkey, pkt.raddr, pkt.total, R_REMOTE_WRITE,
                                    self.qpn)
            if self._responder_down():
                status = WcStatus.REM_OP_ERR
            elif base < 0:
                status = WcStatus.REM_ACCESS_ERR
            self.rx_msg = RxMessage(pkt.seq, -1, [(base, pkt.total)], status)
        msg = self.rx_msg
        assert msg is not None
        if msg.status is WcStatus.SUCCESS and pkt.length:
            jitter = nic.jitter_ps() if nic.rdmap else 0
            addr = msg.pieces[0][0] + pkt.offset
            if nic.rdmap:
                self.placing += 1
                self._place(addr, pkt.payload or b"", jitter, self._write_placed)
            else:
                self._place(addr, pkt.payload or b"")
        if not pkt.last:
            return
        self.rx_msg = None
        if msg.status is not WcStatus.SUCCESS:
            self._nak(pkt.seq, msg.status)
            return
        if pkt.opcode == Opcode.RDMA_WRITE_WITH_IMM:
            return self._r_write_imm(pkt)
        self._send(Packet(PktKind.ACK, pkt.seq))
        return None

    def _r_write_imm(self, pkt: Packet) -> Gen:
        """The end of a WRITE_WITH_IMM: it consumes a receive (waiting for one)."""
        got = yield from self._take_recv()
        if got is None:  # the QP went into the error state while it waited
            self._nak(pkt.seq, WcStatus.REM_OP_ERR)
            return
        idx, _sges = got
        self._recv_cqe(self.env.now, idx, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM,
                       pkt.total, pkt.imm)
        self._send(Packet(PktKind.ACK, pkt.seq))

    def _r_read(self, pkt: Packet) -> None:
        nic = self.nic
        addr = nic.pt.translate(pkt.rkey, pkt.raddr, pkt.total, R_REMOTE_READ, self.qpn)
        if self._responder_down() or addr < 0:
            self._nak(pkt.seq, WcStatus.REM_OP_ERR if self._responder_down()
                      else WcStatus.REM_ACCESS_ERR)
            return
        mtu = nic.profile.mtu
        total = pkt.total
        n = max(1, -(-total // mtu))
        resps = []
        for i in range(n):
            off = i * mtu
            ln = min(mtu, total - off)
            resps.append(Packet(PktKind.READ_RESP, pkt.seq, first=i == 0, last=i == n - 1,
                                offset=off, length=ln, total=total,
                                payload=None if total else b""))
        if total:
            self.dma_gather([(addr, total)], resps)  # type: ignore[attr-defined]
        self.txq.extend(resps)
        self._tx_sig.fire()  # type: ignore[attr-defined]

    def _r_atomic(self, pkt: Packet) -> None:
        nic = self.nic
        addr = nic.pt.translate(pkt.rkey, pkt.raddr, 8, R_REMOTE_ATOMIC, self.qpn)
        if self._responder_down():
            self._nak(pkt.seq, WcStatus.REM_OP_ERR)
        elif addr < 0:
            self._nak(pkt.seq, WcStatus.REM_ACCESS_ERR)
        elif pkt.raddr % 8:
            self._nak(pkt.seq, WcStatus.REM_INV_REQ_ERR)
        else:
            self._atomic(pkt, addr)

    def _atomic(self, pkt: Packet, addr: int) -> None:
        """Read-modify-write under the address's lock: the lock is taken when free, the
        atomic unit runs, the old value is DMA-read; the new value's posted write is issued
        at once (PCIe ordering: a later read cannot pass it), which frees the lock."""
        nic = self.nic
        env = self.env
        order = nic.profile.atomic_byte_order
        locks = nic.locks.free
        slot = nic.locks.slot(addr)
        computed = nic.atomic_unit.reserve(nic.atomic_ps, pkt, locks[slot])
        read = nic.pcie.read_done(addr, 8, pkt, computed)
        locks[slot] = read + nic.pcie.xfer_ps(8)
        resp = Packet(PktKind.ATOMIC_RESP, pkt.seq, total=8)
        if read > self.dma_until:  # its result's write is issued then (rmw, below)
            self.dma_until = read
        resp.ready = ev = env.timeout(read - env.now)

        def rmw(_e: simpy.Event) -> None:
            # the atomic unit sees its own earlier results on this address even while
            # their posted writes are still queued behind other DMA writes
            pending = nic.atomic_pending.get(addr)
            old = pending[0] if pending is not None else \
                nic.host.memory.read_u64(addr, order)  # type: ignore[arg-type]
            new = _ATOMIC[Opcode(pkt.opcode)](old, pkt.operands)
            resp.payload = old.to_bytes(8, order)  # type: ignore[arg-type]
            token = object()
            nic.atomic_pending[addr] = (new, token)

            def landed() -> None:
                if nic.atomic_pending.get(addr, (0, None))[1] is token:
                    del nic.atomic_pending[addr]

            # the CQE's ``sampled``: when the new value becomes visible in memory, known
            # now; the response may reach the requester (and its CQE be made) before then
            resp.sampled = self._place(addr, new.to_bytes(8, order),  # type: ignore[arg-type]
                                       then=landed)

        ev.callbacks.append(rmw)
        self._send(resp)

    def _r_read_resp(self, pkt: Packet) -> None:
        ctx = self.inflight.get(pkt.seq)
        if ctx is None:
            return
        if pkt.first:
            ctx.sampled = pkt.sampled
        parts = scatter(ctx.pieces, pkt.offset, pkt.payload or b"")
        for k, (addr, data) in enumerate(parts):
            last = pkt.last and k == len(parts) - 1
            self._place(addr, data, then=(lambda c=ctx: _succeed(c)) if last else None)
        if pkt.last:
            self.inflight.pop(pkt.seq, None)
            if not parts:
                _succeed(ctx)

    def _r_atomic_resp(self, pkt: Packet) -> None:
        ctx = self.inflight.pop(pkt.seq, None)
        if ctx is None:
            return
        def done() -> None:  # the atomic's own write landed before (posted writes in order)
            ctx.sampled = pkt.sampled
            _succeed(ctx)

        self._place(ctx.pieces[0][0], pkt.payload or bytes(8), then=done)



def _succeed(ctx: WrContext) -> None:
    if not ctx.done.triggered:
        ctx.done.succeed(WcStatus.SUCCESS)


__all__ = ["RxSide", "Signal", "gather", "scatter"]  # Signal, gather, scatter: re-exported
