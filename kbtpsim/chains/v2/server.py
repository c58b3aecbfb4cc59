"""A connection's chains that the NIC re-arms in place (chains v2).

:class:`RecyclingChainServer` is a :class:`~kbtpsim.chains.post.ChainServer` whose
credits are posted once. Its send rings hold exactly one round of credits
(``RING_ROUNDS = 1``): credit n + K (K credits) runs the ring slots of credit n again, by
ENABLEs past each ring's end, with the same WQE bytes, restored and advanced by the
credit's *recycle segment* on a managed loopback *recycler* QP (:mod:`.recycle`). The
master QP is managed too: the recycle segment ENABLEs it through the credit's next
round. The receive is re-armed by a FetchAdd on the receive queue's doorbell record
(:meth:`kbtpsim.nic.QueuePair.attach_rq_doorbell`).

The CPU does not re-post anything. It *grants* finished credits their recycling, in
order, with one ENABLE of the recycler per batch (:meth:`refill`, one MMIO write): it
must have read what it needs of a credit (the request, the byte count) before the NIC
overwrites it. With CPU slots a credit is granted once the next credit has finished
(that credit's master ran the barrier that executes the slots). The CPU writes the
session and quota octets into the live scratch *and* the pristine image the restore
copies, so either order of the two is right.

Requirements (checked at construction, one-line errors): WAIT/ENABLE, atomics on WQEs
(``cas_on_wqe``: the count advances are FetchAdds on WQE fields), atomics in the byte
order of the WQE fields and of the big-endian receive doorbell record, and no WQE checks
(``wqe_checks``: a recycled WQE keeps its round-0 index in its control segment, as
RedN's firmware patch allows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from kbtpsim.chains.ir import Chain
from kbtpsim.chains.layout import ChainLayout, RingKeys
from kbtpsim.chains.lowering import STAGING
from kbtpsim.chains.post import _LOC, CPU_WR, Finished, _Credit
from kbtpsim.chains.v2.advance import AdvanceHook, post_advancers
from kbtpsim.chains.v2.dispatch import is_private
from kbtpsim.chains.v2.lanes import lane_variant
from kbtpsim.chains.v2.recycle import (
    CountField,
    RecyclePlan,
    check_recycle,
    own_counts,
    plan_recycle,
)
from kbtpsim.chains.v2.segment import SegmentPosting
from kbtpsim.chains.v2.slots import SlotQueues
from kbtpsim.chains.v2.vgates import variant_nop
from kbtpsim.chains.vocab import session_octets
from kbtpsim.nic import (
    Access,
    MemoryRegion,
    Nic,
    QpState,
    QueuePair,
    WorkRequest,
    WqeFlags,
    connect,
)
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.wqe import Opcode


class RecycleError(ValueError):
    """A chain or profile that cannot be recycled in place (the message says why)."""


def recycle_blockers(prof: NicProfile) -> list[str]:
    """Why chains cannot be recycled in place on ``prof`` (empty: they can)."""
    return [text for bad, text in (
        (not prof.wait_enable, "no WAIT/ENABLE (wait_enable)"),
        (not prof.cas_on_wqe, "no atomics on WQEs (cas_on_wqe): the counts are advanced "
                              "by FetchAdds on WQE fields"),
        (prof.atomic_byte_order != prof.wqe_field_byte_order,
         "atomics and WQE fields in different byte orders"),
        (prof.atomic_byte_order != "big", "little-endian atomics cannot advance the "
                                          "big-endian receive doorbell record"),
        (prof.wqe_checks, "WQE checks on (wqe_checks): a recycled WQE keeps its round-0 "
                          "index"),
    ) if bad]


class _RoundIndex(Mapping[str, tuple[QueuePair, int]]):
    """Where each WR of a credit slot sits in one round: its round-0 ring index moved
    on by the rounds its queue ran (every round, or a private queue's variant's runs up
    to the grant). Computed on look-up: a grant looks up a few of a slot's hundreds."""

    __slots__ = ("base", "private_qp", "rnd", "runs")

    def __init__(self, base: dict[str, tuple[QueuePair, int]], runs: dict[str | None, int],
                 private_qp: dict[int, str], rnd: int) -> None:
        self.base = base
        self.runs = runs
        self.private_qp = private_qp
        self.rnd = rnd

    def __getitem__(self, name: str) -> tuple[QueuePair, int]:
        qp, idx = self.base[name]
        rounds = self.runs.get(self.private_qp.get(id(qp)), self.rnd)
        return qp, idx + rounds * qp.sq_depth  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[str]:
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)


@dataclass
class _Slot:
    """Round-0 facts of one credit slot."""

    index: dict[str, tuple[object, int]]  #: template name -> (qp, round-0 index)
    segments: dict[str, tuple[int, int]]  #: queue -> [first, end) round-0 WQE indices
    cpu_slot: int | None  #: round-0 index of its first CPU slot on the connection QP
    plan: RecyclePlan | None = None
    rec_base: int = 0  #: recycler index of its recycle segment (round 0)
    recycler: int = 0  #: which of the connection's recyclers runs its segment
    rec_wait: int = 0  #: its recycler's WAIT advance per round (that recycler's signaled)
    pristine: int = 0  #: address of its pristine scratch image
    wqe_copies: dict[tuple[str, int], int] | None = None  #: (role, first) -> pristine addr
    session: bool = False  #: the session octet in the pristine image
    armed: bool = False  #: the quota octets in the pristine image
    #: dispatch: the counts that name a variant's own queues (its advancer's)
    private: list[CountField] = field(default_factory=list)


class RecyclingChainServer(SegmentPosting, SlotQueues):
    """Chains re-armed by the NIC (module docstring). Same arguments as
    :class:`ChainServer`."""

    RING_ROUNDS = 1
    #: recyclers per connection by default, the slots dealt out in turn (decision
    #: C16): a recycle segment ends with a WAIT for its own restores and advances
    #: (loopback atomics, a few microseconds), which holds its recycler; with one, a
    #: connection's credits cannot be re-armed faster than one segment at a time,
    #: whatever the window; with two, twice as fast, at the price of more NIC work at
    #: once (scenario key ``target.chain_recyclers``, decision C16); three since
    #: decision C22, with grants per 32 credits so that they cost no more doorbells
    RECYCLERS = 3

    def __init__(self, nic: Nic, chain: Chain, layout: ChainLayout, credits: int,
                 table_key: MemoryRegion | None, pool_key: MemoryRegion,
                 device_memory: bool = True, ring: RingKeys | None = None,
                 alloc_budget: int = 0, cpu_slots: int = 0,
                 recycle_hook: Callable[[RecyclePlan], None] | None = None,
                 advance_hook: AdvanceHook | None = None,
                 recyclers: int | None = None,
                 readers: MemoryRegion | None = None) -> None:
        """``recycle_hook`` and ``advance_hook`` (deliberate bugs, kbtpsim.oracle.mutants)
        change every slot's recycle plan, or its advancers' counts by variant, before
        they are posted; they are then not verified (O4)."""
        self.recycle_hook = recycle_hook
        self.advance_hook = advance_hook
        self.n_recyclers = self.RECYCLERS if recyclers is None else recyclers
        if self.n_recyclers < 1:
            raise RecycleError(f"chains v2 need at least 1 recycler, got {recyclers}")
        why = recycle_blockers(nic.profile)
        if why:
            raise RecycleError(f"chains v2 cannot recycle on profile {nic.profile.name!r}: "
                               + "; ".join(why))
        if credits < 2:
            raise RecycleError(f"chains v2 need at least 2 credits, got {credits}")
        self._slots: dict[int, _Slot] = {}
        self._slot_credit: dict[int, int] = {}  #: slot -> its live credit number
        self._booted = False
        super().__init__(nic, chain, layout, credits, table_key, pool_key, device_memory,
                         ring, alloc_budget, cpu_slots, readers)
        if self.software:
            raise RecycleError("chains v2: the plan offloads nothing on this profile")
        self._setup_recycling()
        #: dispatch: the variant each of its own queues belongs to; per slot, the rounds
        #: each variant ran (its queues' round)
        self._private_qp = {id(q): v for d in (*self.sub_masters, *self.advancers,
                                               *self.variant_gates)
                            for v, q in d.items()}
        self._private_qp.update({id(q): lane_variant(lane) for d in self.slot_lanes
                                 for lane, q in d.items()
                                 if lane_variant(lane) in self.sub_wrs})
        self._runs: list[dict[str | None, int]] = [{v: 0 for v in self.sub_wrs}
                                                   for _ in range(self.credits)]
        #: C27: credit -> (its variant's gate, the ENABLE that releases it); the CPU's
        #: releases on the shared gate so far
        self._gate_of: dict[int, tuple[QueuePair, int]] = {}
        self._cpu_gates = 0
        for m in self.masters:  # the CPU starts round 0 (MMIO)
            m.enable(m.post_index)
        self._booted = True

    # ------------------------------------------------------------ base hooks
    def _rcq_depth(self) -> int:
        return self.credits  # credit n's receive CQE is in slot n mod K, every round

    def _doorbell(self) -> None:
        self.doorbells += 1  # nothing posted by doorbell: the master is managed

    def _live_credit(self, number: int) -> _Credit | None:
        n = self._slot_credit.get(number % self.credits)
        return None if n is None else self.live.get(n)

    @property
    def repost_wrs_per_credit(self) -> int:
        return 0

    def _post_credit(self) -> None:
        number = self.posted
        # the queues a credit posts to: its slot's own and the connection's shared ones
        # (names ending "#<slot>", and those without a slot); the others keep no segment
        queues = self._credit_queues(number)
        before = {r: q.post_index for r, q in queues.items()}
        super()._post_credit()
        cr = self.live[number]
        segs = {r: (before[r], q.post_index) for r, q in queues.items()}
        self._slots[number] = _Slot(dict(cr.index), segs,
                                    self._cpu_slot_index.get(number))
        self._slot_credit[number] = number

    def _credit_queues(self, number: int) -> dict[str, QueuePair]:
        """The queues credit ``number`` posts to: its slot's own and the connection's
        shared ones (names ending "#<slot>", and those without a slot), in
        :meth:`queues`' order; grouped once, not filtered per credit (a pass over every
        slot's queues per credit made the set-up quadratic in the credits)."""
        groups: dict[str, dict[str, QueuePair]] | None = getattr(self, "_queue_groups",
                                                                  None)
        if groups is None or len(groups) == 1:  # before the slots' queues exist
            groups = {"": {}}
            for r, q in self.queues().items():
                _, sep, tail = r.rpartition("#")
                key = f"#{tail}" if sep else ""
                groups.setdefault(key, {})[r] = q
            self._queue_groups = groups
        # queues() lists the shared queues first, then slot by slot: the same order
        return {**groups[""], **groups.get(f"#{number}", {})}

    # ------------------------------------------------------------ set-up
    def _setup_recycling(self) -> None:
        nic, host, mem, k = self.nic, self.nic.host, self.nic.host.memory, self.credits
        qps = self.queues()
        held_by: dict[str, int] = {}
        for s in range(k):
            for r, (first, end) in self._slots[s].segments.items():
                held_by[r] = held_by.get(r, 0) + end - first
        for r, q in qps.items():
            held = held_by.get(r, 0)
            if held and q.sq_depth != held:
                raise RecycleError(f"chains v2: the {r} ring holds {q.sq_depth} WQEs, "
                                   f"not one round of its credits ({held})")
        cqs = {self.recv_cq.cqn: ("cq:recv", k), self.gate_cq.cqn: ("cq:gate", k),
               self.chain_cq.cqn: ("cq:conn", k * self.conn_cqes)}
        cqs.update({cq.cqn: ("cq:chain", self.worker_cqes) for cq in self.slot_cqs})
        for d in self.variant_cqs:  # a variant's own CQ: one round is one of its runs
            cqs.update({cq.cqn: (f"cq:chain@{v}", self.variant_round_cqes[v])
                        for v, cq in d.items()})
        by_qpn = {q.qpn: (r, q.sq_depth) for r, q in qps.items()}
        name_of = {id(q): r for r, q in qps.items()}
        wqe_dests: set[str] = set()
        for w in self.templates:
            for pl in w.places:
                m = _LOC.match(pl.dest)
                if m and m.group(1) == "wqe":
                    wqe_dests.add(m.group(2))
            if w.arms:
                wqe_dests.add(w.arms)
            if w.disarmed:
                wqe_dests.add(w.name)
        # the recyclers: each its own CQ (never polled; its WAITs count it), managed QP
        n_recyclers = min(self.n_recyclers, k)
        self.recycle_cqs = [nic.create_cq(1 << 12, ignore_overrun=True)
                            for _ in range(n_recyclers)]
        plans: list[tuple[int, list[CountField], set[tuple[str, int]]]] = []
        for s in range(k):
            slot = self._slots[s]
            counts: list[CountField] = []
            for r, (first, end) in slot.segments.items():
                q = qps[r]
                if first == end:
                    continue
                for idx in range(first, end):
                    wr = q.posted[idx % q.sq_depth]
                    if wr.opcode is Opcode.WAIT:
                        tgt, delta = cqs[wr.target]
                    elif wr.opcode is Opcode.ENABLE:
                        name, delta = by_qpn[wr.target]
                        tgt = f"qp:{name}"
                    else:
                        continue
                    counts.append(CountField(r, idx, wr.opcode.name, tgt, delta))
            private = [c for c in counts if self.sub_wrs  # dispatch: a variant's own
                       and is_private(c.target.split("#", 1)[0])]
            if private:  # advanced by the variant (its advancer), not the segment
                mine = {id(c) for c in private}
                counts = [c for c in counts if id(c) not in mine]
            self._slots[s].private = private
            modified: set[tuple[str, int]] = set()
            for name in wqe_dests:
                qp, idx = slot.index[name]
                modified.add((name_of[id(qp)], idx))
            if slot.cpu_slot is not None:
                modified.update(("conn", slot.cpu_slot + i) for i in range(self.cpu_slots))
            plans.append((s, counts, modified))
        # slot 0's segment: its length and signaled WRs size the recycler (same per slot)
        probe = plan_recycle(plans[0][1], plans[0][2], self.slot_size, 0, 0, 0,
                             self._slots[0].private)
        n_rec, p_rec = len(probe.steps), probe.signaled
        self.recyclers: list[QueuePair] = []
        for i, cq in enumerate(self.recycle_cqs):
            q = nic.create_qp(cq, cq, sq_depth=len(range(i, k, n_recyclers)) * n_rec,
                              managed=True, sq_in_nic_memory=self.device_memory)
            connect(q, q)
            self.recyclers.append(q)
        for s, counts, modified in plans:
            rec_i, pos = s % n_recyclers, s // n_recyclers
            wait_delta = len(range(rec_i, k, n_recyclers)) * p_rec
            private = self._slots[s].private
            plan = plan_recycle(counts, modified, self.slot_size, pos * n_rec, wait_delta,
                                self.master.sq_depth, private)
            if plan.signaled != p_rec or len(plan.steps) != n_rec:
                raise RecycleError("chains v2: credit slots with different recycle segments")
            found = check_recycle(plan, counts + own_counts(plan, pos * n_rec, wait_delta,
                                                             self.master.sq_depth),
                                  modified, private)
            if found:
                raise RecycleError("; ".join(found))
            if self.recycle_hook is not None:  # a mutant: posted as changed, unverified
                self.recycle_hook(plan)
            self._slots[s].plan = plan
            self._slots[s].rec_base = pos * n_rec
            self._slots[s].recycler = rec_i
            self._slots[s].rec_wait = wait_delta
        # pristine images (scratch and modified WQE runs), in the rings' memory kind
        size = 0
        for s in range(k):
            size += self.slot_size
            for st in self._slots[s].plan.steps:  # type: ignore[union-attr]
                if st.kind in ("restore_wqes", "restore_ctrl"):
                    size += st.span[2] * qps[st.span[0]].stride
        at = nic.dm_alloc(size, 4096) if self.device_memory else host.alloc(size, 4096)
        self.pristine = nic.register_mr(at, size, Access.LOCAL_WRITE)
        self.dbrec_addr = host.alloc(64, 64)
        self.dbrec = nic.register_mr(self.dbrec_addr, 8,
                                     Access.LOCAL_WRITE | Access.REMOTE_ATOMIC)
        self.conn.attach_rq_doorbell(self.dbrec_addr)
        self.sink_addr = host.alloc(8, 8)
        self.sink = nic.register_mr(self.sink_addr, 8, Access.LOCAL_WRITE)
        for s in range(k):
            slot = self._slots[s]
            slot.pristine = at
            bufs = self._buffer_addrs(s)
            first_buf = min(a for n, a in bufs.items() if n not in STAGING)
            image = bytearray(mem.read(first_buf, self.slot_size))
            for arm in self.alloc_arms:  # a quota allowance is per round, set by the CPU
                image[bufs[arm] + 7 - first_buf] = 0
            mem.write(at, bytes(image))
            at += self.slot_size
            slot.wqe_copies = {}
            for st in slot.plan.steps:  # type: ignore[union-attr]
                if st.kind in ("restore_wqes", "restore_ctrl"):
                    role, first, n = st.span
                    q = qps[role]
                    raw = mem.read(q.wqe_addr(first), n * q.stride)
                    mem.write(at, raw)
                    slot.wqe_copies[(role, first)] = at
                    at += len(raw)
            self._post_segment(s, first_buf)
            self._post_advancers(s)
        self.p_rec = p_rec
        self.recycle_wrs = n_rec

    def _post_advancers(self, s: int) -> None:
        """Post credit slot ``s``'s advancers (:func:`.advance.post_advancers`)."""
        found = post_advancers(self, s, self.advance_hook)
        if found:
            raise RecycleError("; ".join(found))

    # ------------------------------------------------------------ the CPU's side
    def _grantable(self) -> int:
        """Credits whose slot may be recycled now, in order."""
        n, k = 0, self.credits
        while True:
            old = self.posted + n - k
            if old in self.live or old >= self.finished:
                return n
            nxt = old + 1
            if self.cpu_slots and (nxt in self.live or nxt >= self.finished):
                return n  # its CPU slots run in the next credit's barrier
            n += 1

    def poll(self, now: int):  # type: ignore[no-untyped-def]
        out = super().poll(now)
        self.free_slots = [0] * self._grantable()  # what refill() may grant now
        return out

    def refill(self, min_batch: int = 1) -> int:
        """Grant the recycling of finished credits, in order, once at least
        ``min_batch`` may be granted: one ENABLE of the recycler (an MMIO write) for
        the batch; returns how many."""
        n = self._grantable()
        if n < min_batch or n == 0:
            return 0
        k = self.credits
        limits: dict[int, int] = {}  #: recycler -> ENABLE limit
        for _ in range(n):
            number = self.posted
            s = number % k
            rnd = number // k
            slot = self._slots[s]
            cr = _Credit(number, self._buffer_addrs(s))
            # a variant's own queues advance in the rounds it ran
            cr.index = _RoundIndex(  # type: ignore[assignment]
                slot.index, dict(self._runs[s]), self._private_qp, rnd)
            if slot.cpu_slot is not None:
                first = slot.cpu_slot + rnd * self.conn.sq_depth
                self._cpu_slot_index[number] = first
                for i in range(self.cpu_slots):  # the CPU's own bookkeeping of the slots
                    j = (first + i) % self.conn.sq_depth
                    self.conn.wr_ids[j] = CPU_WR
                    self.conn.posted[j] = WorkRequest(Opcode.NOP, flags=WqeFlags.SIGNALED,
                                                      wr_id=CPU_WR)
            armed = bool(self.alloc_arms) and self.alloc_budget > 0
            if armed:
                self.alloc_budget -= 1
            cr.alloc_armed = armed
            self._pristine_octets(s, armed)
            self.live[number] = cr
            self._slot_credit[s] = number
            self.posted += 1
            rec = self.recyclers[slot.recycler]
            limits[slot.recycler] = slot.rec_base + (rnd - 1) * rec.sq_depth \
                + self.recycle_wrs
        for r, limit in limits.items():  # one MMIO write per recycler the batch uses
            self.recyclers[r].enable(limit)
        self.doorbells += len(limits)
        self.grant_doorbells = len(limits)
        self.free_slots = []
        return n

    def _finish(self, cr: _Credit, now: int) -> Finished:
        self._note_run(cr)
        f = super()._finish(cr, now)
        if self.dispatch_conds and self.failed_at is None and \
                self.dispatched_variant(cr) is None:
            f = replace(f, no_chain=True)  # C30: no common part either
        return f

    def take_early(self, credit: int, now: int) -> Finished:
        self._note_run(self.live[credit])
        return super().take_early(credit, now)

    def _note_run(self, cr: _Credit) -> None:
        """Credit ``cr``'s round is over for the CPU: its dispatched variant ran once
        more in its slot, and released (or will have the CPU release) the credit on its
        own gate, through this round's NOP (C27)."""
        v = self.dispatched_variant(cr)
        if v is not None:
            self._runs[cr.number % self.credits][v] += 1
            qp, idx = cr.index[variant_nop(v)]
            self._gate_of[cr.number] = (qp, idx + 1)
            # a credit the CPU holds holds every later one: older entries are the NIC's
            self._gate_of.pop(cr.number - 2 * self.credits, None)

    def _release_gate(self, credit: int) -> None:
        """C27: on the gate of the variant the credit was dispatched to (what its chain
        would ENABLE: the same index), else on the connection's shared gate, whose NOPs
        only the CPU ENABLEs, one more each time."""
        gate = self._gate_of.pop(credit, None)
        if gate is not None:
            gate[0].enable(gate[1])
        elif self.sub_wrs:  # dispatch: the variants have gates of their own
            self._cpu_gates += 1
            self.gate.enable(self._cpu_gates)
        else:
            super()._release_gate(credit)

    def _pristine_octets(self, s: int, armed: bool) -> None:
        """The CPU's octets in slot ``s``'s pristine image: the session octet, and the
        quota octets of this round (armed or not)."""
        slot = self._slots[s]
        bufs = self._buffer_addrs(s)
        base = min(a for n, a in bufs.items() if n not in STAGING)
        mem = self.nic.host.memory
        if slot.session != self.session:
            for at in session_octets(bufs):
                mem.write(slot.pristine + at - base, b"\x01" if self.session else b"\x00")
                self.mmio_writes += self.device_memory
            slot.session = self.session
        if self.alloc_arms and slot.armed != armed:  # only what changes is written
            for arm in self.alloc_arms:
                mem.write(slot.pristine + bufs[arm] - base + 7, b"\x01" if armed
                          else b"\x00")
            slot.armed = armed
            self.mmio_writes += self.device_memory * len(self.alloc_arms)

    def set_session(self, established: bool, after: int) -> None:
        super().set_session(established, after)
        for n, cr in self.live.items():  # and the pristine image their restore copies
            if n > after:
                self._pristine_octets(n % self.credits, cr.alloc_armed)

    def arm(self, credit: int) -> None:
        super().arm(credit)
        self._pristine_octets(credit % self.credits, True)

    def disarm(self, credit: int) -> None:
        super().disarm(credit)
        self._pristine_octets(credit % self.credits, False)

    def drained(self) -> bool:
        """Nothing of the chains writes memory any more: every QP (recycler included)
        has no work request in flight but WAITs that will never be satisfied, and the
        CQEs the CPU reads of those that ended have landed where a poll sees them (a
        completion engine can write a CQE after the WR has retired: the ``cqe`` fault;
        missing a COMPLETION Send's, a LOAD whose COMPLETION the initiator had was
        salvaged as never served, decision C24; a flush writes a CQE for every WR left,
        which can keep the completion unit busy for tens of microseconds). The masters'
        and the gate's late CQEs are not waited for: they only feed WAITs, and after a
        failure they come one by one."""
        recyclers = tuple(self.recyclers)
        for q in (*self.queues().values(), *recyclers):
            if q.state is not QpState.ERROR and q not in recyclers:
                return False
            if any(not ctx.done.triggered and ctx.opcode is not Opcode.WAIT
                   for ctx in q.pending):
                return False
        if any(cq.landing() for cq in self.polled_cqs()):  # the lanes' and the
            return False  # connection QP's: commits, COMPLETION Sends
        return self.responders_idle(recyclers)

    def stop(self, now: int) -> None:
        super().stop(now)
        for rec in self.recyclers:
            if rec.state is not QpState.ERROR:
                rec.to_error()

    def describe_recycling(self) -> list[str]:
        """Slot 0's recycle segment, one step a line (``kbtpsim chains show --chains
        v2``)."""
        plan = self._slots[0].plan
        return [] if plan is None else plan.describe()


__all__ = ["RecycleError", "RecyclingChainServer"]
