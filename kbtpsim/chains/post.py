"""Posting chains on the NIC model: one :class:`ChainServer` per connection.

``ChainServer(nic, chain, layout, credits)`` creates the connection's queues (the managed
connection QP to connect to the initiator, a managed loopback *worker*, an unmanaged
loopback *master* running the WAIT/ENABLE sequence, a managed loopback *gate*), registers
per-credit scratch memory and pre-posts ``credits`` chains. The CPU side then:

* :meth:`ChainServer.poll` -- read CQEs (chain CQ, receive CQ) and return the credits that
  finished, each as a :class:`Finished` saying whether the NIC served it (a commit Write
  completed) or the CPU must (``needs_cpu``), with the request octets;
* :meth:`ChainServer.release` -- after serving a fallback, let the next credit run
  (what the chain's conditional ENABLE of the gate does on the fast path);
* :meth:`ChainServer.refill` -- re-post finished credits, in one batch.

``cpu_slots=K`` (default 0) adds K NOP WQEs on the connection QP after each credit's chain
(unsignaled; the next credit's master ENABLEs run them as no-ops). While the CPU serves a
credit (its gate held), :meth:`ChainServer.cpu_post` rewrites that credit's NOPs with the
CPU's own work requests (COMPLETION Send, LOAD data Write, store RDMA Read: the managed
connection QP is the only path to the initiator) and :meth:`ChainServer.cpu_enable` lets
them run. Their CQEs (``wr_id`` with :data:`CPU_WR`) are returned by
:meth:`ChainServer.take_cpu_cqes`, not counted as chain CQEs. Those methods, and the
session and quota octets the CPU writes, are in :mod:`kbtpsim.chains.cpu_control`;
polling and :class:`Finished` in :mod:`kbtpsim.chains.completions`.
"""

from __future__ import annotations

from kbtpsim.chains.compiler import CONSTS, SESSION_OCTET, VARIANTS
from kbtpsim.chains.completions import CreditCompletions, Finished
from kbtpsim.chains.cpu_control import CpuControl
from kbtpsim.chains.failure import ChainFailure
from kbtpsim.chains.ir import Chain, Role, WrTemplate
from kbtpsim.chains.layout import ChainLayout, RingKeys
from kbtpsim.chains.lowering import RSTG
from kbtpsim.chains.scratch import ScratchBuffers
from kbtpsim.chains.vocab import session_octets
from kbtpsim.chains.wr_build import _LOC, COMMIT_TAG, CPU_WR, ROLE_BITS, WrResolution, _Credit
from kbtpsim.nic import (
    Access,
    Cqe,
    MemoryRegion,
    Nic,
    QueuePair,
    Sge,
    WorkRequest,
    WqeFlags,
    connect,
)
from kbtpsim.nic.wqe import Opcode


class ChainServer(CreditCompletions, CpuControl, ChainFailure, ScratchBuffers,
                  WrResolution):
    """Pre-posted chains of one connection (see module docstring)."""

    def __init__(self, nic: Nic, chain: Chain, layout: ChainLayout, credits: int,
                 table_key: MemoryRegion | None, pool_key: MemoryRegion,
                 device_memory: bool = True, ring: RingKeys | None = None,
                 alloc_budget: int = 0, cpu_slots: int = 0,
                 readers: MemoryRegion | None = None) -> None:
        self.nic = nic
        #: the LOADs' reader counts (decision C20), None without a NIC FREE
        self.readers_key = readers
        self.chain = chain
        self.layout = layout
        self.credits = credits
        #: every template's WR with its addresses zeroed (field offsets, armed control
        #: words), built at the first credit
        self._shapes: dict[str, WorkRequest] = {}
        self._fixed_of: dict[str, tuple[WqeFlags, int]] = {}
        self.table_key = table_key
        self.pool_key = pool_key
        self.ring = ring
        self.templates = list(chain.wrs())
        #: template name -> its position (the low bits of its wr_id)
        self._position = {w.name: i for i, w in enumerate(self.templates)}
        names = {w.name for w in self.templates}
        #: arm words of the ALLOC_STORE variants (octet 7: the CPU's quota octet)
        self.alloc_arms = [f"arm_{v}" for v in ("alloc_inline", "alloc_read")
                           if f"commit_{v}" in names]
        #: the FetchAdds that take a ticket: on Head (ALLOC_STORE) or Tail (FREE, C20)
        self.ticket_fas = {i for i, w in enumerate(self.templates)
                         if w.name.endswith(("_fa_head", "_fa_tail"))}
        #: ALLOC_STORE's Generation adds (the entry becomes VALID), by position
        self.binds = {i for i, w in enumerate(self.templates)
                      if w.name.endswith("_gen") and w.opcode is Opcode.MASKED_FETCH_ADD}
        #: a FREE's unbinds (decision C20), by position
        self.unbinds = {i for i, w in enumerate(self.templates)
                        if w.name.startswith("fr_unbind_")}
        #: the table-entry Read every variant's tests use (its sample time is a LOAD's
        #: linearisation point) and the STOREs' table-entry Writes, by position
        #: (the LOAD's own Read instead where it has one: decision C15)
        self.entry_reads = {i for i, w in enumerate(self.templates)
                            if w.part in VARIANTS and VARIANTS[w.part].op == "LOAD"
                            and w.opcode is Opcode.RDMA_READ
                            and w.remote_kind == "strided_table"} or {
            i for i, w in enumerate(self.templates)
            if w.part == "dispatch" and w.opcode is Opcode.RDMA_READ
            and w.remote_kind == "strided_table"}
        self.entry_writes = {i for i, w in enumerate(self.templates)
                             if w.opcode is Opcode.RDMA_WRITE and w.remote_kind == "strided_table"
                             and w.part in VARIANTS and VARIANTS[w.part].op == "STORE"}
        #: (WR, address field) -> octet ranges (offset, length) that patches write at run
        #: time: posted as all ones, so that a WR that runs before its patch landed (only
        #: possible once a flushed connection QP's CQEs satisfied the steps' WAIT counts
        #: early) faults on its key instead of writing where the initial value points
        self.patched: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for w in self.templates:
            if w.cond is not None or w.disarmed:  # a conditional patch (native, or armed
                continue  # by a CAS on its WQE): the initial value is its "else"
            for pl in w.places:
                m = _LOC.match(pl.dest)
                if m and m.group(1) == "wqe" and m.group(3) in ("raddr", "sge0.addr"):
                    self.patched.setdefault((m.group(2), m.group(3)), []).append(
                        (int(m.group(4) or 0) + pl.offset, pl.length))
        #: the variants' COMPLETION Sends, by position -> variant
        self.completion_sends = {i: w.part for i, w in enumerate(self.templates)
                                 if w.role is Role.CONN and w.part in VARIANTS
                                 and w.opcode in (Opcode.SEND, Opcode.SEND_WITH_INVALIDATE)}
        #: Read-source requests' data Reads from the initiator, by position
        self.data_reads = {i for i, w in enumerate(self.templates)
                           if w.role is Role.CONN and w.opcode is Opcode.RDMA_READ
                           and w.remote_kind == "initiator"}
        if self.alloc_arms and ring is None:
            raise ValueError("an ALLOC_STORE chain needs the ring's keys (ring=)")
        #: credits the CPU may still arm for ALLOC_STORE when it posts them: it sets this
        #: to quota - usage - len(armed_credits()) before each refill
        self.alloc_budget = alloc_budget
        #: ALLOC_STORE chains that took a ticket but found the slot not ready (-> CPU)
        self.slot_not_ready = 0
        #: the connection's session is established: credits posted now get the session
        #: octet (:data:`~kbtpsim.chains.compiler.SESSION_OCTET`); :meth:`set_session`
        self.session = False
        self.per_credit = {r: [w for w in self.templates if w.role is r] for r in Role}
        self.signaled = sum(1 for w in self.templates
                            if w.role in (Role.WORKER, Role.CONN) and w.signaled)
        n_work = len(self.per_credit[Role.WORKER])
        #: worker lanes (chains v2, kbtpsim.chains.v2.lanes): lane -> its WRs per credit
        self.lane_wrs: dict[str, int] = {}
        for w in self.per_credit[Role.WORKER]:
            if w.lane:
                self.lane_wrs[w.lane] = self.lane_wrs.get(w.lane, 0) + 1
        n_lane_free = n_work - sum(self.lane_wrs.values())
        n_conn = len(self.per_credit[Role.CONN])
        n_master = len(self.per_credit[Role.MASTER])
        depth = self.RING_ROUNDS * credits
        #: no fast path at all: every receive goes straight to the CPU
        self.software = n_work == 0
        #: NOP slots per credit on the connection QP for the CPU's work requests
        self.cpu_slots = 0 if self.software else cpu_slots
        #: CQEs one credit puts on the chain CQ: its signaled WRs and its CPU slots
        self.per_credit_cqes = self.signaled + self.cpu_slots
        self._cpu_slot_index: dict[int, int] = {}  #: credit -> index of its first slot
        self._cpu_slot_used: dict[int, int] = {}  #: credit -> slots written so far
        self._cpu_cqes: list[Cqe] = []
        #: credits taken by the CPU before their chain ended (take_early), still running
        self._early: set[int] = set()
        #: statuses of failed chain or CPU work requests (the connection QP is broken)
        self.errors: list[str] = []
        #: when the connection failed (its first error CQE, or :meth:`stop`), else None
        self.failed_at: int | None = None
        ccq_depth = self._ccq_depth(self.cpu_slots)
        if ccq_depth is None:
            self.chain_cq = nic.create_cq(1 << 16)
        else:  # its CQEs in host memory: a chain tests a data Read's (decision C24)
            ccq_addr = nic.host.alloc(64 * ccq_depth, 4096)
            self.chain_cq = nic.create_cq(ccq_depth, buffer_addr=ccq_addr)
            self.ccq_mr = nic.register_mr(ccq_addr, 64 * ccq_depth, Access.LOCAL_WRITE)
        # the receive CQ has its buffer in host memory (as on mlx5): a chain's marker reads
        # the receive's byte count from the CQE (credit n's receive is CQE number n)
        rdepth = self._rcq_depth()
        self.rcq_addr = nic.host.alloc(64 * rdepth, 4096)
        self.recv_cq = nic.create_cq(rdepth, buffer_addr=self.rcq_addr,
                                     ignore_overrun=self.RING_ROUNDS == 1)
        self.rcq_mr = nic.register_mr(self.rcq_addr, 64 * rdepth, Access.LOCAL_WRITE)
        self.gate_cq = nic.create_cq(1 << 12)
        self.master_cq = nic.create_cq(1 << 12)
        managed = not self.software
        #: send rings and the small scratch words in NIC device memory (fetches and
        #: condition reads cost nic_mem_ns instead of a PCIe round trip)
        dm = device_memory and managed
        self.device_memory = dm
        self.conn = nic.create_qp(self.chain_cq, self.recv_cq,
                                  sq_depth=max(1, n_conn + self.cpu_slots) * depth,
                                  rq_depth=depth, managed=managed, sq_in_nic_memory=dm)
        self.qps = {Role.CONN: self.conn}
        self.lane_qps: dict[str, QueuePair] = {}
        if managed:
            self._create_chain_queues(n_lane_free, n_master, depth, dm)
        # scratch: per-credit buffers, then shared constants
        sizes = self._buffer_sizes()
        self.stg_size = sizes.pop("stg", 16)
        #: per credit, the staging of a Read-source store's data (decision C24), beside
        #: the inline data's, in host memory
        self.rstg_size = (sizes.pop(RSTG, 0) + 4095) // 4096 * 4096
        self.slot_size = sum(sizes.values())
        total = self.slot_size * credits + 64
        mem = nic.host
        rights = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
        self.scratch_addr = nic.dm_alloc(total, 4096) if dm else mem.alloc(total, 4096)
        self.scratch = nic.register_mr(self.scratch_addr, total, rights)
        staged = (self.stg_size + self.rstg_size) * credits
        self.staging_addr = mem.alloc(staged, 4096)
        self.staging = nic.register_mr(self.staging_addr, staged, rights)
        self.sizes = sizes
        consts = dict(CONSTS)
        consts["k_bs"] = layout.block_size.to_bytes(4, "big")
        consts["k_st_bs"] = bytes(2) + consts["k_bs"]  # C21: Status OK, Data Length
        self.consts: dict[str, int] = {}
        at = self.scratch_addr + self.slot_size * credits
        for name, raw in consts.items():
            self.consts[name] = at
            mem.memory.write(at, raw)
            at += len(raw)
        self.posted = 0  #: credits posted so far
        self.finished = 0  #: credits the CPU has seen finish
        self.live: dict[int, _Credit] = {}
        self.free_slots: list[int] = []
        #: CPU accounting
        self.wrs_posted = 0
        self.doorbells = 0
        #: doorbells the last refill rang (chains v2: one per recycler it granted)
        self.grant_doorbells = 1
        #: the CPU's MMIO writes outside posting: each gate ENABLE of :meth:`release`,
        #: and each octet written into a live credit's scratch in NIC device memory
        #: (session and quota octets: :meth:`set_session`, :meth:`arm`, :meth:`disarm`)
        self.mmio_writes = 0
        self._watch_cqs()
        for _ in range(credits):
            self._post_credit()
        self._doorbell()

    #: master WRs of the CPU-slot barrier (:meth:`_post_slot_barrier`)
    BARRIER_WRS = 2
    #: rounds of credits a send ring holds: 2 (v1: a credit is re-posted into the next
    #: free WQEs while the others run); 1 for chains that re-arm themselves in place
    RING_ROUNDS = 2

    def _create_chain_queues(self, n_work: int, n_master: int, depth: int,
                             dm: bool) -> None:
        """The managed worker (and its lanes), the master and the gate, all loopback."""
        nic = self.nic
        self.worker = nic.create_qp(self.chain_cq, self.chain_cq,
                                    sq_depth=max(1, n_work) * depth, managed=True,
                                    sq_in_nic_memory=dm)
        self.master = nic.create_qp(self.master_cq, self.master_cq,
                                    sq_depth=max(1, n_master + self._barrier_wrs())
                                    * depth, managed=self.RING_ROUNDS == 1,
                                    sq_in_nic_memory=dm)
        self.gate = nic.create_qp(self.gate_cq, self.gate_cq, sq_depth=depth,
                                  managed=True, sq_in_nic_memory=dm)
        for lane, n in self.lane_wrs.items():
            self.lane_qps[lane] = nic.create_qp(self.chain_cq, self.chain_cq,
                                                sq_depth=n * depth, managed=True,
                                                sq_in_nic_memory=dm)
        for qp in (self.worker, self.master, self.gate, *self.lane_qps.values()):
            connect(qp, qp)
        self.qps.update({Role.WORKER: self.worker, Role.MASTER: self.master,
                         Role.GATE: self.gate})

    def _master_of(self, number: int) -> QueuePair:
        """The master QP that runs credit ``number``'s WAIT/ENABLE sequence."""
        return self.master

    def queues(self) -> dict[str, QueuePair]:
        """Every send queue of the chains by name: ``conn``, ``worker``, ``master``,
        ``gate`` and ``worker@LANE`` for each lane."""
        out = {r.value: q for r, q in self.qps.items()}
        out.update({f"worker@{lane}": q for lane, q in self.lane_qps.items()})
        return out

    def _queue(self, name: str, number: int = 0) -> QueuePair:
        """The QP ``qp:NAME`` names for credit ``number`` (a role, or ``worker@LANE``)."""
        if "@" in name:
            return self.lane_qps[name.split("@", 1)[1]]
        return self.qps[Role(name)]

    def _qp_of(self, w: WrTemplate, number: int = 0) -> QueuePair:
        """The QP a template of credit ``number`` is posted on."""
        return self.lane_qps[w.lane] if w.lane else self.qps[w.role]

    @property
    def repost_wrs_per_credit(self) -> int:
        """WQEs the CPU writes to re-post one finished credit (its chain and CPU slots)."""
        return len(self.templates) + self.cpu_slots

    def _rcq_depth(self) -> int:
        """Depth of the receive CQ (whose buffer the chains read)."""
        return 1 << 12

    def _ccq_depth(self, cpu_slots: int) -> int | None:
        """Depth of the connection QP's CQ if a chain reads its CQEs in memory, else
        None (no buffer). Chains v1 never do: their worker QPs share that CQ, so a WR's
        CQE has no fixed place in it."""
        return None

    def _barrier_wrs(self) -> int:
        """Room on the master ring per credit besides the templates (the CPU-slot
        barrier's WRs, reserved whether used or not)."""
        return self.BARRIER_WRS

    def _doorbell(self) -> None:
        if not self.software:
            self.master.ring_doorbell()
        self.doorbells += 1

    # ------------------------------------------------------------------ posting
    def _post_credit(self) -> None:
        number = self.posted
        slot = number % self.credits
        cr = _Credit(number, self._init_buffers(slot))
        if self.session:
            for at in session_octets(cr.bufs):
                self.nic.host.memory.write(at, b"\x01")
        if self.alloc_arms and self.alloc_budget > 0:  # quota: allow one ALLOC_STORE
            self.alloc_budget -= 1
            cr.alloc_armed = True
            for arm in self.alloc_arms:
                self.nic.host.memory.write(cr.bufs[arm] + 7, b"\x01")
        # index assignment, then shapes (for field offsets), then the real WRs
        counters: dict[QueuePair, int] = {}  # each queue's next index, from its post index
        # the CPU-slot barrier follows the master's WAIT for the gate (since decision
        # C25 a LOAD may be dispatched before it: that WAIT is no longer the first)
        masters = [w.name for w in self.per_credit[Role.MASTER]]
        first_master = "wait_prev" if "wait_prev" in masters else next(iter(masters), None)
        for w in self.templates:
            if w.role is Role.RECV:
                continue
            q = self._qp_of(w, number)
            at = counters.get(q)
            if at is None:
                at = q.post_index
            cr.index[w.name] = (q, at)
            counters[q] = at + 1
            if self.cpu_slots and w.name == first_master:
                counters[q] += self.BARRIER_WRS  # the previous credit's CPU slots (below)
        if not self._shapes:  # a shape depends on its template only (its wr_id is
            for w in self.templates:  # neither encoded nor compared): built once
                if w.role is not Role.RECV:
                    self._shapes[w.name] = self._build(cr, w, shape=True)
        for role in (Role.WORKER, Role.CONN, Role.GATE, Role.MASTER):
            if role not in self.qps:
                continue
            qp = self.qps[role]
            for w in self.per_credit[role]:
                wr = self._build(cr, w, shape=False)
                idx = cr.index[w.name][0].post_send(wr)
                assert idx == cr.index[w.name][1], (w.name, idx)
                self.wrs_posted += 1
                if self.cpu_slots and w.name == first_master:
                    self._post_slot_barrier(number)
            if role is Role.CONN and self.cpu_slots:
                self._cpu_slot_index[number] = qp.post_index
                for _ in range(self.cpu_slots):
                    qp.post_send(WorkRequest(Opcode.NOP, flags=WqeFlags.SIGNALED,
                                             wr_id=CPU_WR))
                    self.wrs_posted += 1
        recv = self.per_credit[Role.RECV][0]
        sges = []
        for p in recv.places:
            loc = p.dest + (f"+{p.offset}" if p.offset else "")
            addr, key = self._loc(cr, loc)
            sges.append(Sge(addr, p.length, key))
        self.conn.post_recv(sges, wr_id=number)
        self.wrs_posted += 1
        self.live[number] = cr
        self.posted += 1

    def _post_slot_barrier(self, number: int) -> None:
        """After the master's WAIT for the previous credit's gate: ENABLE the previous
        credit's CPU slots (NOPs, or the CPU's WRs) and WAIT for every CQE of the earlier
        credits, slots included, so this credit's WAIT counts hold whoever used them."""
        prev = self._cpu_slot_index.get(number - 1)
        limit = 0 if prev is None else prev + self.cpu_slots  # credit 0: nothing before
        master = self._master_of(number)
        master.post_send(WorkRequest(Opcode.ENABLE, target=self.conn.qpn, count=limit,
                                     wr_id=number << ROLE_BITS | 0x3FFE))
        master.post_send(WorkRequest(Opcode.WAIT, target=self.chain_cq.cqn,
                                     count=number * self.per_credit_cqes,
                                     wr_id=number << ROLE_BITS | 0x3FFF))
        self.wrs_posted += 2

    def refill(self, min_batch: int = 1) -> int:
        """Re-post every finished credit in one batch (one doorbell) if at least
        ``min_batch`` have finished; returns how many were re-posted."""
        n = 0
        if len(self.free_slots) < min_batch:
            return 0
        while self.free_slots:
            self.free_slots.pop()
            self._post_credit()
            n += 1
        if n:
            self._doorbell()
        return n


#: with :class:`Finished` (kbtpsim.chains.completions), the wr_id layout and the credit
#: record (kbtpsim.chains.wr_build), re-exported
__all__ = [
    "COMMIT_TAG",
    "CPU_WR",
    "ROLE_BITS",
    "SESSION_OCTET",
    "_LOC",
    "ChainServer",
    "Finished",
    "_Credit",
]
