"""Credit slots with their own queues (chains v2): every credit slot has its own master,
worker lanes and CQ, so that a credit's untaken variants finishing their steps do not
hold the next credit back; the connection QP and the gate stay one per connection.

:class:`SlotQueues` is the :class:`~kbtpsim.chains.post.ChainServer` layout that
:class:`~kbtpsim.chains.v2.server.RecyclingChainServer` re-arms: it resolves the chain's
queue names per credit (``qp:worker@LANE``, ``qp:master``), the step WAITs that
:func:`~kbtpsim.chains.v2.waits.split_waits` split per CQ (``cq:chain``: the slot's CQ,
one credit a round; ``cq:conn``: the connection QP's, every earlier credit's CQEs in ring
order), and the CPU-slot barrier that only ENABLEs (the counts are per CQ, fixed whoever
used the slots).
"""

from __future__ import annotations

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.ir import Addr, CondSpec, Const, Role, WrTemplate
from kbtpsim.chains.lowering import CCQE
from kbtpsim.chains.post import ROLE_BITS, ChainServer, _Credit
from kbtpsim.chains.v2.advance import ADVANCE_POSITION
from kbtpsim.chains.v2.dispatch import dispatched, is_private
from kbtpsim.chains.v2.lanes import lane_variant
from kbtpsim.nic import CompletionQueue, Cqe, QueuePair, WorkRequest, connect
from kbtpsim.nic.wqe import Opcode


class SlotQueues(ChainServer):
    """A ChainServer whose credit slots each have their own master, lanes and CQ (module
    docstring). Meant for rings of one round (chains v2)."""

    BARRIER_WRS = 1

    def _ccq_depth(self, cpu_slots: int) -> int | None:
        """Decision C24: where a chain tests a data Read's CQE, the connection QP's CQ has
        its buffer in host memory, one round of credits deep: credit n's k-th CQE on it
        (its connection WRs', then its CPU slots', in ring order) is then CQE number
        ``n * per_credit + k``, at the same place every round. It never overruns: a
        credit slot runs again only after the CPU saw its CQEs (it grants finished
        credits)."""
        if not any(w.cond is not None and w.cond.word.loc.startswith(f"buf:{CCQE}_")
                   for w in self.templates):
            return None
        return self.credits * self._conn_cqes_of(cpu_slots)

    def _conn_cqes_of(self, cpu_slots: int) -> int:
        """CQEs one credit puts on the connection QP's CQ: its signaled connection WRs
        and its CPU slots."""
        return sum(1 for w in self.templates if w.role is Role.CONN and w.signaled) \
            + cpu_slots

    def _conn_cqe_addr(self, cr: _Credit, wr: str) -> int:
        """Where credit ``cr``'s connection WR ``wr`` writes its CQE (:meth:`_ccq_depth`):
        its position among the credit's signaled connection WRs, in ring order."""
        pos = getattr(self, "_ccqe_pos", None)
        if pos is None:
            pos, n = {}, 0
            for w in self.templates:
                if w.role is Role.CONN:
                    pos[w.name] = n
                    n += w.signaled
            self._ccqe_pos = pos
        if wr not in pos:
            raise ValueError(f"buf:{CCQE}_{wr}: {wr} is no connection WR of the chain")
        return self.chain_cq.slot_addr(cr.number * self.conn_cqes + pos[wr])

    def _barrier_wrs(self) -> int:
        return self.BARRIER_WRS if self.cpu_slots else 0

    def _create_chain_queues(self, n_work: int, n_master: int, depth: int,
                             dm: bool) -> None:
        """Per credit slot: its own master, worker lanes and CQ (its credits overlap the
        next slot's); one gate per connection."""
        nic, k = self.nic, self.credits

        def qp(cq: CompletionQueue, n: int) -> QueuePair:
            q = nic.create_qp(cq, cq, sq_depth=max(1, n), managed=True,
                              sq_in_nic_memory=dm)
            connect(q, q)
            return q

        self._plan_dispatch()
        subs = self.sub_wrs
        n_master -= sum(subs.values())
        self.slot_cqs = [nic.create_cq(1 << 12) for _ in range(k)]
        #: per-operation dispatch (kbtpsim.chains.v2.dispatch): per slot and variant its
        #: lane's CQ, sub-master and advancer
        self.variant_cqs = [{v: nic.create_cq(1 << 12) for v in subs} for _ in range(k)]
        #: the slots' and variants' CQs, which the CPU polls
        self.slot_chain_cqs = (*self.slot_cqs,
                               *(cq for d in self.variant_cqs for cq in d.values()))
        self.masters = [qp(self.master_cq, n_master + self._barrier_wrs())
                        for _ in range(k)]
        self.sub_masters = [{v: qp(self.master_cq, n) for v, n in subs.items()}
                            for _ in range(k)]
        self.advancers = [{v: qp(self.variant_cqs[s][v], self.adv_wrs[v]) for v in subs}
                          for s in range(k)]
        self.slot_workers = [qp(cq, n_work) for cq in self.slot_cqs]
        self.slot_lanes = [{lane: qp(self.variant_cqs[s].get(lane_variant(lane), cq), n)
                            for lane, n in self.lane_wrs.items()}
                           for s, cq in enumerate(self.slot_cqs)]
        self.gate = qp(self.gate_cq, depth)
        #: C27: per slot and variant, the gate it releases its credits on (one NOP)
        self.variant_gates = [{v: qp(self.gate_cq, 1) for v in subs} for _ in range(k)]
        self.master, self.worker, self.lane_qps = (self.masters[0], self.slot_workers[0],
                                                   self.slot_lanes[0])
        self.qps.update({Role.WORKER: self.worker, Role.MASTER: self.master,
                         Role.GATE: self.gate})
        #: CQEs per credit: on its slot's CQ (worker lanes), and on the connection QP's
        self.worker_cqes = sum(1 for w in self.templates
                               if w.role is Role.WORKER and w.signaled
                               and lane_variant(w.lane) not in subs)
        self.conn_cqes = self._conn_cqes_of(self.cpu_slots)

    def _plan_dispatch(self) -> None:
        """Sizes of a dispatched chain's per-variant queues (none without dispatch)."""
        #: variant -> its sub-master's WRs per credit; its advancer's WRs; its CQEs per
        #: round (lane and advancer); its header condition
        self.sub_wrs: dict[str, int] = {}
        self.adv_wrs: dict[str, int] = {}
        self.variant_round_cqes: dict[str, int] = {}
        self.dispatch_conds: dict[str, CondSpec] = {}
        for w in self.templates:
            if w.role is Role.MASTER and w.lane in VARIANTS:
                self.sub_wrs[w.lane] = self.sub_wrs.get(w.lane, 0) + 1
                t = w.fields["target"]
                if isinstance(t, Addr) and t.ref == f"qp:adv@{w.lane}":
                    c = w.fields["count"]
                    assert isinstance(c, Const) and isinstance(c.value, int)
                    self.adv_wrs[w.lane] = c.value
            if w.role is Role.MASTER and w.cond is not None and w.name.startswith(
                    "dispatch_"):
                t = w.fields["target"]
                assert isinstance(t, Addr)
                v = is_private(t.ref)
                assert v is not None
                self.dispatch_conds[v] = w.cond
        ring = [w for w in self.templates if w.role is Role.CONN]
        for v in self.sub_wrs:
            lane = sum(1 for w in self.templates if w.role is Role.WORKER
                       and lane_variant(w.lane) == v and w.signaled)
            self.variant_round_cqes[v] = lane + self.adv_wrs[v]
        common = sum(1 for w in self.templates if w.role is Role.WORKER and w.signaled
                     and lane_variant(w.lane) not in self.sub_wrs)
        #: CQEs that finish a credit (report it to the CPU), by dispatched variant: the
        #: common ones, the variant's, the connection WRs up to its last one (the rest
        #: run after the gate: :meth:`_full_cqes`)
        self._finish_cqes: dict[str | None, int] = {None: common}
        #: the connection WRs' templates by position in its ring, and the position of
        #: each variant's last one (those after it are not among its finishing CQEs)
        self._conn_pos = {self.templates.index(w): i for i, w in enumerate(ring)}
        self._last_conn: dict[str | None, int] = {None: -1}
        for v in self.sub_wrs:
            last = max(i for i, w in enumerate(ring) if w.part == v)
            self._last_conn[v] = last
            # C27: its advancer's CQEs are not among them (they only re-arm the slot)
            self._finish_cqes[v] = (common + self.variant_round_cqes[v] - self.adv_wrs[v]
                                    + sum(1 for w in ring[:last + 1] if w.signaled))
        self._common_cqes = common + sum(1 for w in ring if w.signaled)

    def dispatched_variant(self, cr: _Credit) -> str | None:
        """The variant credit ``cr``'s request was dispatched to (the NIC's header
        conditions, evaluated on the received header), or None."""
        if not self.dispatch_conds:
            return None
        if cr.dispatched is False:
            cond = next(iter(self.dispatch_conds.values()))
            addr, _ = self._loc(cr, cond.word.loc)
            cr.dispatched = dispatched(self.dispatch_conds,
                                       self.nic.host.memory.read(addr, 8))
        return cr.dispatched  # type: ignore[return-value]

    def _finish_count(self, cr: _Credit) -> int:
        if not self.dispatch_conds:
            return self.signaled
        if self.failed_at is not None:  # flushed WQEs of untaken variants complete with
            return 1 << 62  # errors too: unfinished() reports the credits once drained
        return self._finish_cqes[self.dispatched_variant(cr)]

    def _note_cqe(self, cr: _Credit, template: int) -> None:
        if template == ADVANCE_POSITION:
            cr.adv_seen += 1
            return
        pos = self._conn_pos.get(template) if self.dispatch_conds else None
        if pos is not None:
            cr.conn_seen.append(pos)

    def _after_finish(self, cr: _Credit) -> int:
        """The CQEs of connection WRs past the dispatched variant's last one: the other
        variants' (untaken) connection WRs, which the gate's ENABLE runs after the early
        release. A stalled lane can complete later than they do (the variant's commit
        Write, found by a campaign with fetch stalls on every queue), so counting them
        finished the credit before its commit was seen: the CPU served a LOAD the NIC
        had served, and its second COMPLETION overtook the next request's. And its
        variant's advancer's CQEs (C27): they re-arm the slot, and may come first."""
        if self.failed_at is not None:
            return 0
        late = 0
        if cr.conn_seen:
            last = self._last_conn[self.dispatched_variant(cr)]  # type: ignore[index]
            late = sum(1 for p in cr.conn_seen if p > last)
        return late + cr.adv_seen

    def _full_count(self, cr: _Credit) -> int:
        if not self.dispatch_conds:
            return self.signaled
        v = self.dispatched_variant(cr)
        return self._common_cqes + (self.variant_round_cqes[v] if v else 0)

    def _slot(self, number: int) -> int:
        return number % self.credits

    def _qp_of(self, w: WrTemplate, number: int = 0) -> QueuePair:
        s = self._slot(number)
        if w.role is Role.WORKER:
            return self.slot_lanes[s][w.lane] if w.lane else self.slot_workers[s]
        if w.role is Role.MASTER:
            return self.sub_masters[s][w.lane] if w.lane else self.masters[s]
        if w.role is Role.GATE and w.lane:
            return self.variant_gates[s][w.lane]
        return self.qps[w.role]

    def _queue(self, name: str, number: int = 0) -> QueuePair:
        s = self._slot(number)
        if name.startswith("master@"):
            return self.sub_masters[s][name.split("@", 1)[1]]
        if name.startswith("adv@"):
            return self.advancers[s][name.split("@", 1)[1]]
        if name.startswith("gate@"):
            return self.variant_gates[s][name.split("@", 1)[1]]
        if "@" in name:
            return self.slot_lanes[s][name.split("@", 1)[1]]
        if name == "worker":
            return self.slot_workers[s]
        if name == "master":
            return self.masters[s]
        return self.qps[Role(name)]

    def _master_of(self, number: int) -> QueuePair:
        return self.masters[self._slot(number)]

    def queues(self) -> dict[str, QueuePair]:
        """Every queue of the connection's chains by name (built once: the slots' queues
        are all created together; callers only read it)."""
        cached = getattr(self, "_queues", None)
        if cached is not None:
            return cached
        out: dict[str, QueuePair] = {"conn": self.conn}
        if not hasattr(self, "masters"):
            return out
        self._queues = out
        out["gate"] = self.gate
        for s in range(self.credits):
            out[f"master#{s}"] = self.masters[s]
            out[f"worker#{s}"] = self.slot_workers[s]
            for lane, q in self.slot_lanes[s].items():
                out[f"worker@{lane}#{s}"] = q
            for v, q in self.sub_masters[s].items():
                out[f"master@{v}#{s}"] = q
            for v, q in self.advancers[s].items():
                out[f"adv@{v}#{s}"] = q
            for v, q in self.variant_gates[s].items():
                out[f"gate@{v}#{s}"] = q
        return out

    def _target(self, w: WrTemplate, number: int = 0) -> int:
        t = w.fields["target"]
        assert isinstance(t, Addr)
        if t.ref == "cq:chain":
            return self.slot_cqs[self._slot(number)].cqn
        if t.ref == "cq:conn":
            return self.chain_cq.cqn
        if t.ref.startswith("cq:chain@"):
            return self.variant_cqs[self._slot(number)][t.ref.split("@", 1)[1]].cqn
        return super()._target(w, number)

    def _wait_count(self, cr: _Credit, w: WrTemplate) -> int:
        target, count = w.fields["target"], w.fields["count"]
        assert isinstance(target, Addr)
        if isinstance(count, Const) and isinstance(count.value, int):
            if target.ref == "cq:chain":  # the slot's CQ: one credit a round
                return cr.number // self.credits * self.worker_cqes + count.value
            if target.ref == "cq:conn":  # the connection QP's: every earlier credit's
                return cr.number * self.conn_cqes + count.value
            if is_private(target.ref):  # a variant's own queue: posted for round 0, then
                assert cr.number < self.credits  # advanced by the variant's advancer
                return count.value
        return super()._wait_count(cr, w)

    def _post_slot_barrier(self, number: int) -> None:
        """After the gate: ENABLE the previous credit's CPU slots (and its WRs left on
        the connection QP, which its untaken variants would ENABLE later). No WAIT: the
        counts are per CQ, whoever used the slots."""
        prev = self._cpu_slot_index.get(number - 1)
        limit = 0 if prev is None else prev + self.cpu_slots
        self._master_of(number).post_send(WorkRequest(
            Opcode.ENABLE, target=self.conn.qpn, count=limit,
            wr_id=number << ROLE_BITS | 0x3FFE))
        self.wrs_posted += 1

    def _poll_chain(self) -> list[Cqe]:
        out: list[Cqe] = []
        for cq in (*self.slot_chain_cqs, self.chain_cq):
            if cq.pending:  # most CQs have nothing: skip the call
                out.extend(cq.poll(1 << 12))
        return out

    def polled_cqs(self) -> tuple[CompletionQueue, ...]:
        return (*self.slot_chain_cqs, self.chain_cq)


__all__ = ["SlotQueues"]
