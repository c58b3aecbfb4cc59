"""Reliable-connected queue pairs: rings, doorbells and the send-side pipeline.

A QP's send ring is real bytes: ``sq_depth`` slots of ``NicProfile.sq_wqe_size`` octets in
host memory (or NIC device memory), registered as ``qp.sq_mr`` so that NIC operations can
overwrite WQEs. ``post_send`` encodes a WR into the next slot; ``ring_doorbell`` makes the NIC
see it (MMIO, BlueFlame when one WQE is pending). Four stages run each QP's send side (the
executor a simpy process, the others chains of callbacks on the same events,
:mod:`kbtpsim.nic.wake`):

* fetcher: DMA-reads WQEs in batches, up to ``prefetch_depth`` beyond the executing one,
  never past the doorbell (or, on a *managed* QP, past the ENABLEd index) and, unless the
  profile says ``prefetch_past_wait``, never past an unsatisfied WAIT. Fetched bytes are a
  snapshot: a WQE modified after its fetch executes stale.
* executor: decodes and starts WQEs in order (FENCE waits for earlier READs/atomics);
* transmitter: sends the QP's packets in order when their payload DMA completes;
* completer: retires WRs in order and writes CQEs (signaled WRs and all errors).

WRs run in :class:`~kbtpsim.nic.sq_ops.SendOps`; :class:`~kbtpsim.nic.rx.RxSide` serves
incoming requests and responses. The QP sees its NIC through
:class:`~kbtpsim.nic.nicview.NicView`: no import of :mod:`kbtpsim.nic.nic` (which imports it).
The first error completion moves the QP to ``QpState.ERROR``: later WRs complete with
``WR_FLUSH_ERR``, and so do posted and future receives.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy

from kbtpsim.nic.cq import CompletionQueue
from kbtpsim.nic.errors import CapabilityError, NicError, RingFull, WcStatus, WqeDecodeError
from kbtpsim.nic.packet import Packet
from kbtpsim.nic.protection import MemoryRegion
from kbtpsim.nic.qpstate import QpState
from kbtpsim.nic.rx import RxSide
from kbtpsim.nic.sq_ops import SendOps
from kbtpsim.nic.units import Gen
from kbtpsim.nic.wake import Signal, Wake, call_at
from kbtpsim.nic.wqe import (
    ATOMIC_OPS,
    MASKED_OPS,
    RECV_FIELDS,
    SEND_OPS,
    WRITE_OPS,
    Opcode,
    WorkRequest,
    ctrl_word,
    decode_wqe,
    encode_wqe,
    field_layout,
)
from kbtpsim.nic.wrctx import WC_OPCODE, WrContext

if TYPE_CHECKING:
    from kbtpsim.nic.network import LinkDirection
    from kbtpsim.nic.nicview import NicView

__all__ = ["WC_OPCODE", "QueuePair", "WrContext"]


class QueuePair(RxSide, SendOps):
    """One RC queue pair. Create with :meth:`Nic.create_qp`; connect with ``connect``."""

    __slots__ = (
        "_cmp_sig",
        "_db_posted",
        "_exec_sig",
        "_fetch_sig",
        "_rd_sig",
        "_tx_sig",
        "db_index",
        "enable_limit",
        "env",
        "exec_index",
        "fault_hook",
        "fetch_barrier",
        "fetch_gen",
        "fetch_index",
        "fetch_issue",
        "fetched",
        "halted",
        "inflight",
        "last_rd",
        "managed",
        "next_seq",
        "nic",
        "out",
        "peer",
        "pending",
        "post_index",
        "posted",
        "qpn",
        "rd_outstanding",
        "recv_cq",
        "retired",
        "send_cq",
        "sq_addr",
        "sq_depth",
        "sq_mr",
        "state",
        "stride",
        "txq",
        "wr_ids",
    )

    def __init__(self, nic: NicView, qpn: int, send_cq: CompletionQueue, recv_cq: CompletionQueue,
                 sq_depth: int, rq_depth: int, managed: bool, sq_addr: int, rq_addr: int,
                 sq_mr: MemoryRegion, rq_mr: MemoryRegion) -> None:
        env = nic.env
        self.env = env
        self.nic = nic
        self.qpn = qpn
        self.send_cq = send_cq
        self.recv_cq = recv_cq
        self.managed = managed
        self.sq_depth = sq_depth
        self.stride = nic.profile.sq_wqe_size
        self.sq_addr = sq_addr
        self.sq_mr = sq_mr
        self.state = QpState.INIT
        self.peer: QueuePair | None = None
        self.out: LinkDirection | None = None
        self.post_index = 0  #: WQEs posted by software
        self._db_posted = 0  #: post_index at the last doorbell
        self.db_index = 0  #: WQEs the NIC knows of through doorbells
        self.enable_limit = 0  #: managed QPs: WQEs with index < this may run
        self.fetch_index = 0  #: WQEs whose bytes have arrived (in order)
        self.fetch_issue = 0  #: WQEs whose fetch DMA has been issued
        self.fetch_gen = 0  #: bumped when issued fetches must be discarded
        self.fetch_barrier = -1  #: index of a fetched, not yet executed WAIT
        self.exec_index = 0
        self.halted = False  #: a WR failed at execution: flush the rest
        #: fault injection (kbtpsim.oracle.faults): called as ``hook(phase, index)`` with
        #: phase "fetch" before a WQE fetch is issued and "exec" before a fetched WQE
        #: executes; returns extra delay in ps (0: none). None (default): no faults
        self.fault_hook: Callable[[str, int], int] | None = None
        self.retired = 0
        self.fetched: dict[int, bytes] = {}
        self.wr_ids = [0] * sq_depth
        self.posted: list[WorkRequest | None] = [None] * sq_depth
        self.pending: deque[WrContext] = deque()
        self.txq: deque[Packet] = deque()
        self.inflight: dict[int, WrContext] = {}
        self.next_seq = 0
        self.last_rd: simpy.Event | None = None
        self.rd_outstanding = 0
        self._fetch_sig = Wake(env, self._fetch_next)
        self._exec_sig = Signal(env)
        self._tx_sig = Wake(env, self._tx_next)
        self._cmp_sig = Wake(env, self._cmp_run)
        self._rd_sig = Signal(env)
        self._init_rx(rq_depth, rq_addr, rq_mr)
        env.process(self._executor())

    # ------------------------------------------------------------------ software API
    def wqe_addr(self, index: int) -> int:
        """Address of the ring slot that WQE ``index`` occupies."""
        return self.sq_addr + (index % self.sq_depth) * self.stride

    def wqe_field_addr(self, index: int, field: str) -> int:
        """Address of ``field`` (see :func:`~kbtpsim.nic.wqe.field_layout`) of the WQE posted
        at ``index``, e.g. ``"raddr"``, ``"sge0.addr"``, ``"compare"``, ``"ctrl_word"``."""
        wr = self.posted[index % self.sq_depth]
        if wr is None:
            raise NicError(f"no WQE posted at index {index} of QP {self.qpn}")
        layout = field_layout(wr)
        if field not in layout:
            raise NicError(f"{wr.opcode.name} WQE has no field {field!r} "
                           f"(fields: {', '.join(layout)})")
        return self.wqe_addr(index) + layout[field][0]

    def ctrl_word(self, index: int, wr: WorkRequest | None = None, *,
                  qpn: int | None = None) -> int:
        """The u64 a (masked) CAS on the first 8 octets of WQE ``index`` sees, for ``wr``
        (default: the WR posted there) encoded with QP number ``qpn`` (default: this QP's).

        CAS-on-WQE operands: ``compare = qp.ctrl_word(i, qpn=expected_key)`` for a disarmed
        WQE whose QPN octets a READ fills, ``swap = qp.ctrl_word(i, armed_wr)``."""
        if wr is None:
            wr = self.posted[index % self.sq_depth]
            if wr is None:
                raise NicError(f"no WQE posted at index {index} of QP {self.qpn}")
        prof = self.nic.profile
        raw = encode_wqe(wr, prof.wqe_field_byte_order, index=index,
                         qpn=self.qpn if qpn is None else qpn)
        return ctrl_word(raw, prof.atomic_byte_order)

    def recv_field_addr(self, index: int, sge: int, field: str) -> int:
        """Address of ``field`` (``count``, ``lkey``, ``addr``) of scatter entry ``sge`` of
        receive WQE ``index``."""
        if field not in RECV_FIELDS or not 0 <= sge < self.nic.profile.max_sge:
            raise NicError(f"no receive field {field!r} in entry {sge}")
        return self.recv_wqe_addr(index) + 16 * sge + RECV_FIELDS[field][0]

    def post_send(self, wr: WorkRequest) -> int:
        """Encode ``wr`` into the next send slot; returns its WQE index (no doorbell)."""
        prof = self.nic.profile
        if self.post_index - self.retired >= self.sq_depth:
            raise RingFull(f"send ring of QP {self.qpn} is full ({self.sq_depth} WQEs)")
        op = wr.opcode
        if op in (Opcode.WAIT, Opcode.ENABLE) and not prof.wait_enable:
            raise CapabilityError(f"profile {prof.name!r} has no WAIT/ENABLE")
        if op in MASKED_OPS and not prof.masked_atomics:
            raise CapabilityError(f"profile {prof.name!r} has no masked atomics")
        if wr.cond is not None and not prof.native_conditional:
            raise CapabilityError(f"profile {prof.name!r} has no native conditional WRs")
        if len(wr.sges) > prof.max_sge:
            raise ValueError(f"{len(wr.sges)} SGEs exceed max_sge {prof.max_sge}")
        if wr.inline_data is not None and len(wr.inline_data) > prof.max_inline:
            raise ValueError(f"{len(wr.inline_data)} inline octets exceed max_inline "
                             f"{prof.max_inline}")
        index = self.post_index
        raw = encode_wqe(wr, prof.wqe_field_byte_order, index=index, qpn=self.qpn,
                         size=self.stride)
        self.nic.host.memory.write(self.wqe_addr(index), raw)
        slot = index % self.sq_depth
        self.wr_ids[slot] = wr.wr_id
        self.posted[slot] = wr
        self.post_index = index + 1
        tracer = self.nic.tracer
        if tracer is not None:
            tracer.mark(self.nic.name, self.qpn, index, "posted", self.env.now,
                        opcode=wr.opcode.name)
        if self.state is QpState.ERROR:
            self._exec_sig.fire()
        return index

    def ring_doorbell(self) -> None:
        """MMIO doorbell for everything posted so far (BlueFlame if exactly one WQE)."""
        if self.managed:
            raise NicError(f"QP {self.qpn} is managed: only ENABLE starts its WQEs")
        pi = self.post_index
        if pi == self._db_posted:
            return
        bf = None
        if self.nic.profile.blueflame and pi - self._db_posted == 1:  # copy the WQE by MMIO
            bf = self.nic.host.memory.read(self.wqe_addr(pi - 1), self.stride)
        self._db_posted = pi
        nic = self.nic
        env = self.env
        end = nic.doorbell_unit.reserve(nic.doorbell_ps, self._label("doorbell", pi - 1),
                                        env.now + nic.mmio_ps)
        call_at(env, end, lambda _e: self._doorbell(pi, bf))

    def enable(self, limit: int) -> None:
        """Let a managed QP run WQEs with index < ``limit`` (what ENABLE does)."""
        if limit > self.enable_limit:
            self.enable_limit = limit
            self._fetch_sig.fire()

    # ------------------------------------------------------------------ processes
    def _doorbell(self, pi: int, bf: bytes | None) -> None:
        """The doorbell reached the NIC (MMIO, then the doorbell unit)."""
        if bf is not None and self.fetch_issue == pi - 1 and self.fetch_barrier < 0:
            self.fetched[pi - 1] = bf
            self.fetch_index = self.fetch_issue = pi
            if bf[3] == Opcode.WAIT and not self.nic.profile.prefetch_past_wait:
                self.fetch_barrier = pi - 1
            self._mark(pi - 1, "fetched")
            self._exec_sig.fire()
        if pi > self.db_index:
            self.db_index = pi
        self._fetch_sig.fire_last()  # the doorbell event's only callback ends here

    def _label(self, what: str, index: int) -> str:
        """A unit-span label naming the WR (formatted only when tracing)."""
        return f"{what} qp{self.qpn}#{index}" if self.nic.tracer is not None else ""

    def _mark(self, index: int, phase: str) -> None:
        tracer = self.nic.tracer
        if tracer is not None:
            tracer.mark(self.nic.name, self.qpn, index, phase, self.env.now)

    def _fetch_next(self, _ev: simpy.Event | None = None) -> None:
        """Issue WQE fetch DMAs (pipelined: each batch's latency overlaps the next); a
        chain of callbacks (kbtpsim.nic.wake)."""
        nic = self.nic
        prof = nic.profile
        depth, stride = self.sq_depth, self.stride
        limit = self.enable_limit if self.managed else self.db_index
        top = min(limit, self.exec_index + 1 + prof.prefetch_depth)
        start = self.fetch_issue
        env = self.env
        if self.state is QpState.ERROR or start >= top or self.fetch_barrier >= 0:
            self._fetch_sig.arm()
            return
        if self.fault_hook is not None:  # a stalled WQE fetch (fault injection)
            stall = self.fault_hook("fetch", start)
            if stall:
                call_at(env, env.now + stall, self._fetch_next)
                return
        n = min(top - start, max(1, prof.pcie_mrrs // stride), depth - start % depth)
        label = self._label("fetch", start)
        issued = nic.fetch_unit.reserve(nic.fetch_ps, label)
        self.fetch_issue = start + n
        arrived = nic.pcie.read_done(self.wqe_addr(start), n * stride, label, issued)
        call_at(env, arrived, lambda _e, s=start, k=n, g=self.fetch_gen:
                self._fetch_arrived(s, k, g))
        call_at(env, issued, self._fetch_next)

    def _fetch_arrived(self, start: int, n: int, gen: int) -> None:
        """A fetch DMA completed: the bytes are a snapshot taken now."""
        if gen != self.fetch_gen:
            return
        nic = self.nic
        mem = nic.host.memory
        stop_at_wait = not nic.profile.prefetch_past_wait
        for i in range(start, start + n):
            raw = mem.read(self.wqe_addr(i), self.stride)
            self.fetched[i] = raw
            self.fetch_index = i + 1
            self._mark(i, "fetched")
            if raw[3] == Opcode.WAIT and stop_at_wait:
                # the fetch unit stops at a WAIT: later WQEs are fetched after it executes
                self.fetch_barrier = i
                self.fetch_issue = i + 1
                self.fetch_gen += 1
                break
        self._exec_sig.fire()

    def _executor(self) -> Gen:
        nic = self.nic
        env = self.env
        prof = nic.profile
        order = prof.wqe_field_byte_order
        handlers = {
            Opcode.NOP: self._x_nop, Opcode.WAIT: self._x_wait, Opcode.ENABLE: self._x_enable,
            Opcode.LOCAL_INV: self._x_local_inv, Opcode.RDMA_READ: self._x_read,
        }
        for op in SEND_OPS | WRITE_OPS:
            handlers[op] = self._x_send_write
        for op in ATOMIC_OPS:
            handlers[op] = self._x_atomic
        while True:
            idx = self.exec_index
            if self.state is QpState.ERROR or self.halted:
                if idx < self.post_index:
                    ctx = WrContext(env, idx, self.wr_ids[idx % self.sq_depth], Opcode.NOP, True)
                    self.fetched.pop(idx, None)
                    self._finish(ctx, WcStatus.WR_FLUSH_ERR)
                    self.exec_index = idx + 1
                else:
                    yield self._exec_sig.wait()
                continue
            raw = self.fetched.pop(idx, None)
            if raw is None:
                yield self._exec_sig.wait()
                continue
            if self.fault_hook is not None:  # a chain delayed at this WR (fault injection)
                delay = self.fault_hook("exec", idx)
                if delay:
                    yield env.timeout(delay)
                    if self.state is QpState.ERROR or self.halted:
                        continue  # failed meanwhile: the WR is flushed, not executed
            yield call_at(env, nic.decode_unit.reserve(nic.decode_ps,
                                                       self._label("decode", idx)))
            self._mark(idx, "started")
            try:
                wqe = decode_wqe(raw, order)
            except WqeDecodeError:
                wqe = None
            wr_id = self.wr_ids[idx % self.sq_depth]
            if wqe is None or (prof.wqe_checks and wqe.wr.opcode is not Opcode.NOP and (
                    wqe.qpn != self.qpn or wqe.index != idx & 0xFFFF)):
                ctx = WrContext(env, idx, wr_id, Opcode.NOP, True)
                self._finish(ctx, WcStatus.LOC_QP_OP_ERR)
                self.halted = True
            else:
                wr = wqe.wr
                ctx = WrContext(env, idx, wr_id, wr.opcode, wr.signaled)
                self.pending.append(ctx)
                self._cmp_sig.fire()
                if int(wr.flags) & 0x40 and self.last_rd is not None:  # FENCE
                    yield self.last_rd
                run = True
                if wr.cond is not None:
                    run = yield from self._condition(ctx, wr)
                if run:
                    if nic.tracer is not None and wr.opcode is not Opcode.NOP:
                        self._mark(idx, "executed")  # its operation, its condition held
                    yield from handlers[wr.opcode](ctx, wr)
                if ctx.done.triggered and ctx.done.value is not WcStatus.SUCCESS:
                    self.halted = True
            if idx == self.fetch_barrier:
                self.fetch_barrier = -1
                for stale in range(idx + 1, self.fetch_index):
                    self.fetched.pop(stale, None)
                self.fetch_index = self.fetch_issue = idx + 1
            self.exec_index = idx + 1
            self._fetch_sig.fire()

    def _finish(self, ctx: WrContext, status: WcStatus) -> None:
        """Complete ``ctx`` now (appending it if it is not pending yet)."""
        if not self.pending or self.pending[-1] is not ctx:
            self.pending.append(ctx)
            self._cmp_sig.fire()
        if not ctx.done.triggered:
            ctx.done.succeed(status)

    # transmitter: sends the QP's packets in order, each when its payload DMA is in (a
    # chain of callbacks on the events a process would wait for: kbtpsim.nic.wake)
    def _tx_next(self, _ev: simpy.Event | None = None) -> None:
        txq = self.txq
        if not txq:
            self._tx_sig.arm()
            return
        ready = txq[0].ready
        if ready is not None and not ready.processed:
            ready.callbacks.append(self._tx_go)  # type: ignore[union-attr]
        else:
            self._tx_go(None)

    def _tx_go(self, _ev: simpy.Event | None) -> None:
        nic = self.nic
        env = self.env
        out = self.out
        if nic.fast and (out is None or len(out.senders) == 1):
            self._tx_burst()
            return
        pkt = self.txq.popleft()
        # ready_at: 0 at full fidelity; at fast, a later packet's DMA end (sq_ops)
        call_at(env, nic.tx_unit.reserve(nic.tx_ps, pkt, pkt.ready_at), self._tx_sent, pkt)

    def _tx_sent(self, ev: simpy.Event) -> None:
        out, peer = self.out, self.peer
        if out is not None and peer is not None:
            out.send(ev.value, peer.arrive)
        self._tx_next()

    def _tx_burst(self) -> None:
        """Fast fidelity, on a link serialiser this QP alone sends through: every packet
        at the head of the queue whose payload is in (or whose DMA end is known) is
        booked now on the transmit unit and the link, in the QP's order, each from its
        own DMA end; one event when the last leaves the unit. (On a shared serialiser
        booking ahead would let a burst pass another QP's packet: per packet there.)"""
        nic = self.nic
        env = self.env
        txq = self.txq
        out, peer = self.out, self.peer
        tx = nic.tx_unit
        tx_ps = nic.tx_ps
        if tx._free[0] > env.now:
            nic.fast_contended += 1
        nic.fast_bursts += 1
        end = env.now
        while txq:
            pkt = txq[0]
            ready = pkt.ready
            if ready is not None and not ready.processed:
                break
            txq.popleft()
            at = pkt.ready_at
            end = tx.reserve(tx_ps, pkt, at if at > end else end)
            if out is not None and peer is not None:
                out.send(pkt, peer.arrive, end)
        call_at(env, end, self._tx_next)

    # completer: retires WRs in order and writes CQEs (a chain of callbacks)
    def _cmp_run(self, _ev: simpy.Event | None = None) -> None:
        nic = self.nic
        pending = self.pending
        while True:
            if not pending:
                self._cmp_sig.arm()
                return
            ctx = pending[0]
            if not ctx.done.triggered:
                ctx.done.callbacks.append(self._cmp_run)  # type: ignore[union-attr]
                return
            pending.popleft()
            status: WcStatus = ctx.done.value
            if status is not WcStatus.SUCCESS and self.state is not QpState.ERROR:
                self.to_error()
            elif self.state is QpState.ERROR:
                status = WcStatus.WR_FLUSH_ERR
            self.retired += 1
            if ctx.signaled or status is not WcStatus.SUCCESS:
                nic.post_cqe(self.send_cq, self._label("cqe", ctx.index), wr_id=ctx.wr_id,
                             status=status, opcode=WC_OPCODE[ctx.opcode], qpn=self.qpn,
                             wqe_index=ctx.index, byte_len=ctx.byte_len,
                             sampled=ctx.sampled)
            tracer = nic.tracer
            if tracer is not None:
                tracer.mark(nic.name, self.qpn, ctx.index, "finished", self.env.now,
                            status=status.name)

    def to_error(self) -> None:
        """Move to the error state: flush the send and receive queues, and wake a message
        waiting for a receive WQE (it is dropped: the receiver would otherwise stall, and
        the acknowledgements queued behind it with it)."""
        self.state = QpState.ERROR
        self._exec_sig.fire()
        self._flush_rq()
        self._rq_sig.fire()
