"""The receive side of a QP: receive ring, incoming requests and responses.

Requests (SEND, WRITE, READ, atomics) are served in arrival order: the STag check of the
first packet decides the whole message (a refused one is answered by a NAK carrying
REM_ACCESS_ERR / REM_INV_REQ_ERR / REM_OP_ERR); WRITE and SEND payloads are placed by posted
DMA writes that land one PCIe latency later; READ and atomic responses go out through the
QP's transmitter, in order. A SEND consumes the next receive WQE, whose scatter list may
point anywhere the NIC may write, including other QPs' WQEs. Receive WQEs are DMA-read when
they are posted (``rq_prefetch`` in effect: the snapshot is taken then) or, if the message
arrives first, when it arrives. A message that finds no receive waits for one (an
infinitely retried RNR).

Placement order: ``in_order`` places every packet in arrival order; ``rdmap`` (RFC 5040)
adds a per-packet random delay of up to ``ooo_jitter_ns`` to WRITE placement, and a SEND is
delivered (its CQE) only after all earlier WRITE data is placed (rules 3, 5 and 10).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy

from kbtpsim.atomics import compare_swap, fetch_add, masked_compare_swap, masked_fetch_add
from kbtpsim.nic.cq import WcOpcode
from kbtpsim.nic.errors import RingFull, WcStatus
from kbtpsim.nic.memory import SparseMemory
from kbtpsim.nic.packet import Packet, PktKind
from kbtpsim.nic.protection import (
    R_LOCAL_WRITE,
    R_REMOTE_ATOMIC,
    R_REMOTE_READ,
    R_REMOTE_WRITE,
    MemoryRegion,
)
from kbtpsim.nic.qpstate import QpState
from kbtpsim.nic.units import Gen
from kbtpsim.nic.wqe import Opcode, Sge, decode_recv, encode_recv

if TYPE_CHECKING:
    from kbtpsim.nic.nicview import NicView
    from kbtpsim.nic.wrctx import WrContext


class Signal:
    """A re-armable wake-up: one waiter calls :meth:`wait`, anyone calls :meth:`fire`."""

    __slots__ = ("env", "ev")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.ev: simpy.Event | None = None

    def wait(self) -> simpy.Event:
        self.ev = self.env.event()
        return self.ev

    def fire(self) -> None:
        ev = self.ev
        if ev is not None:
            self.ev = None
            ev.succeed()


def gather(mem: SparseMemory, pieces: list[tuple[int, int]], offset: int,
           length: int) -> bytes | memoryview:
    """``length`` bytes at ``offset`` of the concatenation of the ``(addr, len)`` pieces: a
    snapshot, without a copy where memory shares the octets (``SparseMemory.view``)."""
    out: list[bytes | memoryview] = []
    for addr, ln in pieces:
        if offset >= ln:
            offset -= ln
            continue
        n = min(ln - offset, length)
        out.append(mem.view(addr + offset, n))
        length -= n
        offset = 0
        if not length:
            break
    if len(out) == 1:
        return out[0]
    return b"".join(out)


def scatter(pieces: list[tuple[int, int]], offset: int,
            data: bytes | memoryview) -> list[tuple[int, bytes | memoryview]]:
    """Split ``data`` at message ``offset`` over the ``(addr, len)`` pieces."""
    out = []
    pos = 0
    for addr, ln in pieces:
        if offset >= ln:
            offset -= ln
            continue
        n = min(ln - offset, len(data) - pos)
        out.append((addr + offset, data[pos : pos + n]))
        pos += n
        offset = 0
        if pos >= len(data):
            break
    return out


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


class RxSide:
    """Receive-side half of :class:`~kbtpsim.nic.qp.QueuePair` (a mixin)."""

    __slots__ = (
        "_rq_sig",
        "_rx_sig",
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
        "rx_msg",
        "rxq",
    )

    nic: NicView
    env: simpy.Environment
    qpn: int
    state: QpState
    txq: deque[Packet]
    inflight: dict[int, WrContext]

    def _init_rx(self, rq_depth: int, rq_addr: int, rq_mr: MemoryRegion) -> None:
        self.rq_depth = rq_depth
        self.rq_addr = rq_addr
        self.rq_mr = rq_mr
        self.rq_stride = self.nic.profile.rq_wqe_size
        self.rq_post = 0
        self.rq_consumed = 0
        self.rq_dbrec: int | None = None  #: the receive doorbell record (attach_rq_doorbell)
        self.rq_wr_ids = [0] * rq_depth
        self.rq_fetch: dict[int, tuple[simpy.Event, list[bytes]]] = {}
        self.rxq: deque[Packet] = deque()
        self.rx_msg: RxMessage | None = None
        self.placing = 0  #: rdmap: WRITE packets received but not yet placed
        self.placing_waiters: list[simpy.Event] = []
        self.rcqe_at = 0  #: time of the latest receive CQE (they are written in order)
        self._rx_sig = Signal(self.env)
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

    def deliver(self, pkt: Packet) -> None:
        """A packet arrives from the link."""
        self.rxq.append(pkt)
        self._rx_sig.fire()

    # ------------------------------------------------------------------ internals
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

    def _place(self, addr: int, data: bytes | memoryview, extra_ps: int = 0,
               then: Callable[[], None] | None = None) -> int:
        """Issue a posted DMA write of ``data`` (in order behind earlier ones); ``then`` runs
        when it is visible. Returns that time."""
        nic = self.nic
        env = self.env
        visible = nic.pcie.write_visible(addr, len(data)) + extra_ps
        ev = env.timeout(visible - env.now)
        if then is None:
            ev.callbacks.append(lambda _e: nic.store(addr, data))
        else:
            ev.callbacks.append(lambda _e: (nic.store(addr, data), then()))
        return visible

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

    def _send(self, pkt: Packet) -> None:
        self.txq.append(pkt)
        self._tx_sig.fire()  # type: ignore[attr-defined]

    def _nak(self, seq: int, status: WcStatus) -> None:
        """Refuse a request; an access or invalid-request error also moves this responder
        QP to the error state (IB: IBV_EVENT_QP_ACCESS_ERR / QP_REQ_ERR)."""
        self._send(Packet(PktKind.NAK, seq, status=status))
        if status is not WcStatus.REM_OP_ERR and self.state is not QpState.ERROR:
            self.to_error()  # type: ignore[attr-defined]

    def _receiver(self) -> Gen:
        nic = self.nic
        env = self.env
        rxq = self.rxq
        handlers = {
            PktKind.ACK: self._r_ack, PktKind.NAK: self._r_ack, PktKind.SEND: self._r_send,
            PktKind.WRITE: self._r_write, PktKind.READ_REQ: self._r_read,
            PktKind.ATOMIC_REQ: self._r_atomic, PktKind.READ_RESP: self._r_read_resp,
            PktKind.ATOMIC_RESP: self._r_atomic_resp,
        }
        xlat = nic.pt.xlat_ps  # indirect keys' translation cost (kbtpsim.nic.keys)
        read_ps = round(nic.profile.read_req_cycles * nic.profile.cycle_ps)
        while True:
            if not rxq:
                yield self._rx_sig.wait()
                continue
            pkt = rxq.popleft()
            cost = nic.rx_ps + xlat.get(pkt.rkey, 0)
            if pkt.kind is PktKind.READ_REQ:
                cost += read_ps
            yield env.timeout(nic.rx_unit.reserve(cost, pkt) - env.now)
            yield from handlers[pkt.kind](pkt)

    def _r_ack(self, pkt: Packet) -> Gen:
        ctx = self.inflight.pop(pkt.seq, None)
        if ctx is not None and not ctx.done.triggered:
            ctx.done.succeed(WcStatus.SUCCESS if pkt.kind is PktKind.ACK
                             else WcStatus(pkt.status))
        return
        yield

    def _responder_down(self) -> bool:
        return self.state is QpState.ERROR

    def _take_recv(self) -> Gen:
        """The next receive WQE (waiting for one to be posted): (index, scatter list)."""
        while self.rq_consumed >= self.rq_post:
            yield self._rq_sig.wait()
        idx = self.rq_consumed
        self.rq_consumed = idx + 1
        ev, box = self.rq_fetch.pop(idx)
        if not box:
            yield ev
        return idx, decode_recv(box[0], self.nic.profile.wqe_field_byte_order)

    def _r_send(self, pkt: Packet) -> Gen:
        if pkt.first:
            if self._responder_down():
                self.rx_msg = RxMessage(pkt.seq, -1, [], WcStatus.REM_OP_ERR)
            else:
                idx, sges = yield from self._take_recv()
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

    def _r_write(self, pkt: Packet) -> Gen:
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
            idx, _sges = yield from self._take_recv()
            self._recv_cqe(self.env.now, idx, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM,
                           pkt.total, pkt.imm)
        self._send(Packet(PktKind.ACK, pkt.seq))

    def _r_read(self, pkt: Packet) -> Gen:
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
        return
        yield

    def _r_atomic(self, pkt: Packet) -> Gen:
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
        return
        yield

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

            self._place(addr, new.to_bytes(8, order), then=landed)  # type: ignore[arg-type]

        ev.callbacks.append(rmw)
        self._send(resp)

    def _r_read_resp(self, pkt: Packet) -> Gen:
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
        return
        yield

    def _r_atomic_resp(self, pkt: Packet) -> Gen:
        ctx = self.inflight.pop(pkt.seq, None)
        if ctx is None:
            return
        self._place(ctx.pieces[0][0], pkt.payload or bytes(8), then=lambda: _succeed(ctx))
        return
        yield



def _succeed(ctx: WrContext) -> None:
    if not ctx.done.triggered:
        ctx.done.succeed(WcStatus.SUCCESS)


__all__ = ["RxSide", "Signal", "gather", "scatter"]
