"""The offloaded target and the initiators as the oracle runs them.

:class:`ObservedServer` is a :class:`~kbtpsim.chains.server.OffloadedTargetServer` whose
target calls are recorded (:class:`~kbtpsim.oracle.events.TargetTap`), whose chains'
finished credits are turned into events at their linearisation points (the NIC model's
tracer gives each WR's finish time), and whose chains may be transformed (mutants) and
its NIC queues delayed (faults). Nothing of the server's behaviour changes otherwise.

:class:`ObservedInitiator` is a :class:`~kbtpsim.system.Initiator` that also keeps what
the oracle compares: the messages received per connection and the data it exposed for
the target's RDMA Reads, per (connection, Request ID).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.ir import Chain, Role, WrTemplate
from kbtpsim.chains.plan import ConnectionPlan
from kbtpsim.chains.post import ChainServer, Finished
from kbtpsim.chains.server import OffloadedTargetServer
from kbtpsim.chains.v2.recycle import CountField, RecyclePlan
from kbtpsim.nic import Link, Opcode, QueuePair, Simulation
from kbtpsim.oracle.events import TAIL, Recorder, TargetTap
from kbtpsim.system import Initiator
from kbtpsim.system.server import ServerConnection
from kbtpsim.target import TargetConfig
from kbtpsim.wire.constants import Opcode as KbtpOpcode

#: A chain transformation (a mutant): takes a copy of the compiled chain, changes it.
ChainTransform = Callable[[Chain], None]


class V2Mutation:
    """A mutant of chains v2's own machinery: ``recycle`` changes every slot's recycle
    plan before it is posted, ``advance`` its advancers' counts (the compiled chain
    itself is left as it is)."""

    def __init__(self, recycle: Callable[[RecyclePlan], None] | None = None,
                 advance: Callable[[dict[str, list[CountField]]], None] | None = None,
                 quiesce: bool = True,
                 prepared: Callable[[Chain], None] | None = None) -> None:
        self.recycle = recycle
        #: changes the chain as prepared (in lanes, dispatched), not the compiled one
        self.prepared = prepared
        #: per-operation dispatch: changes every slot's advancers (counts by variant)
        self.advance = advance
        #: False: frees return their block at once although v2's LOADs do not re-read
        #: the entry (decision C13 broken)
        self.quiesce = quiesce

    def __call__(self, chain: Chain) -> None:
        return None


def key_wrs(templates: list[WrTemplate]) -> dict[str, dict[str, str]]:
    """Per variant, the WRs whose finish times are the linearisation points, found by
    part, opcode and remote kind (never by position): ``point`` (the table read of a
    LOAD: its own where it has one, decision C15; the table write of a STORE),
    ``ticket`` and ``slot`` (an ALLOC_STORE's FetchAdd on Head and its slot Read)."""
    out: dict[str, dict[str, str]] = {}
    entry_read = next((w.name for w in templates if w.part == "dispatch"
                       and w.opcode is Opcode.RDMA_READ and w.remote_kind == "strided_table"),
                      None)
    for v, spec in VARIANTS.items():
        mine = [w for w in templates if w.part == v]
        if not mine:
            continue
        keys: dict[str, str] = {}
        own_read = [w.name for w in mine if w.opcode is Opcode.RDMA_READ
                    and w.remote_kind == "strided_table"]  # chains v2's LOAD (C15)
        if spec.op == "FREE":  # decision C20: the unbind (either), the Tail ticket
            keys["point"] = ",".join(w.name for w in mine if w.name.startswith("fr_unbind_"))
            keys.update(ticket="fr_fa_tail")
        elif spec.op == "LOAD" and (own_read or entry_read is not None):
            keys["point"] = own_read[0] if own_read else entry_read  # type: ignore[assignment]
        elif spec.op == "STORE":
            upd = [w.name for w in mine if w.opcode is Opcode.RDMA_WRITE
                   and w.remote_kind == "strided_table"]
            if upd:
                keys["point"] = upd[0]
        else:
            fa = [w.name for w in mine if w.opcode is Opcode.MASKED_FETCH_ADD
                  and w.remote_kind == "ring"]
            rd = [w.name for w in mine if w.opcode is Opcode.RDMA_READ
                  and w.remote_kind == "ring"]
            if fa:
                keys["ticket"] = fa[0]
            if rd:
                keys["slot"] = rd[0]
        out[v] = keys
    return out


@dataclass
class CreditInfo:
    """What the oracle keeps of one finished credit (for events and the report)."""

    conn: int
    finished: Finished
    #: WR name -> (qpn, WQE index) of this credit's chain
    wrs: dict[str, tuple[int, int]] = field(default_factory=dict)
    roles: dict[str, str] = field(default_factory=dict)


class ObservedServer(OffloadedTargetServer):
    """An offloaded target server the oracle observes (see the module docstring).

    ``chain_transform`` is applied to a copy of every connection's compiled chain (the
    verifier is not run again: a mutant runs as compiled). ``sim`` must have a tracer
    (``Simulation(trace=True)``)."""

    def __init__(self, sim: Simulation, config: TargetConfig, *,
                 chain_transform: ChainTransform | None = None, **kw: Any) -> None:
        if sim.tracer is None:
            raise ValueError("the oracle needs Simulation(trace=True)")
        self.recorder = Recorder()
        self.chain_transform = chain_transform
        self._mutated: dict[str, ConnectionPlan] = {}
        #: connection -> finished credits, in order
        self.credits: dict[int, list[CreditInfo]] = {}
        #: (connection, credit) -> CreditInfo
        self.credit_info: dict[tuple[int, int], CreditInfo] = {}
        #: (op, status) -> LOADs whose COMPLETION the NIC sent but which the target could
        #: not count (no acknowledgement before their connection failed; see
        #: :meth:`_sent_unacknowledged`)
        self.unacknowledged: dict[tuple[str, str], int] = {}
        self._keys: dict[int, dict[str, dict[str, str]]] = {}
        #: called after each target call that wrote a ring slot at a free's Tail ticket:
        #: (slot address, octets before, octets after) (the slot-write fault)
        self.slot_write_hook: Callable[[int, bytes, bytes], None] | None = None
        if isinstance(chain_transform, V2Mutation) and not chain_transform.quiesce:
            kw["quiesce_frees"] = False
        super().__init__(sim, config, **kw)
        self.verify_chains = chain_transform is None  # mutants run unverified (O4)
        if isinstance(chain_transform, V2Mutation):
            self.recycle_hook = chain_transform.recycle
            self.advance_hook = chain_transform.advance
            self.prepared_hook = chain_transform.prepared
        self.tap = TargetTap(self.target, self.recorder)
        self.tap.slot_hook = self._slot_written
        self.target = self.tap  # type: ignore[assignment]

    # ---------------------------------------------------------------- chains
    def plan_for(self, initiator: str) -> ConnectionPlan:
        plan = super().plan_for(initiator)
        if self.chain_transform is None or not plan.offloaded:
            return plan
        if initiator not in self._mutated:
            chain = copy.deepcopy(plan.chain)
            self.chain_transform(chain)
            self._mutated[initiator] = ConnectionPlan(chain, plan.offloaded,
                                                      dict(plan.software))
        return self._mutated[initiator]

    def accept(self, peer: QueuePair, link: Link | None = None, *,
               name: str = "") -> ServerConnection:
        conn = super().accept(peer, link, name=name)
        cs = self.chain_server(conn)
        self._keys[conn.conn_id] = key_wrs(cs.templates)
        self.credits[conn.conn_id] = []
        poll = cs.poll
        conn_id = conn.conn_id

        def observed_poll(now: int) -> list[Finished]:
            live = dict(cs.live)  # the credits' WR indexes, before poll drops them
            out = poll(now)
            for f in out:
                self._finished(conn_id, cs, live[f.credit].index, f)
            return out

        take_early = cs.take_early

        def observed_take_early(credit: int, now: int) -> Finished:
            index = cs.live[credit].index
            f = take_early(credit, now)
            self._finished(conn_id, cs, index, f)
            return f

        cs.poll = observed_poll  # type: ignore[method-assign]
        cs.take_early = observed_take_early  # type: ignore[method-assign]
        return conn

    def _finished(self, conn_id: int, cs: ChainServer, index: dict[str, tuple[QueuePair, int]],
                  f: Finished) -> None:
        info = CreditInfo(conn_id, f, {n: (q.qpn, i) for n, (q, i) in index.items()},
                          {w.name: w.role.value for w in cs.templates})
        self.credits[conn_id].append(info)
        self.credit_info[(conn_id, f.credit)] = info
        keys = self._keys[conn_id]
        rec = self.recorder
        if f.unbound is not None:  # a FREE the chain unbound (C20), served or handed over
            k = keys.get("free", {})
            # at the instant the unbind's write landed (its CQE's ``sampled``)
            rec.add(f.unbound, "handle", conn=conn_id,
                    data=f.request, via="nic", variant=f.served or "hand-over",
                    credit=f.credit)
            if f.ticket is not None:  # its block's return, at its Tail ticket
                rec.add(self._finish_time(cs, info, k.get("ticket"), f), "quiesced",
                        block=self._freed_block(self._chain_conns[conn_id], f.request),
                        ticket=f.ticket, ring=f"{self.layout.rings[0].name}{TAIL}"
                        if self.layout else None, via="nic", variant=f.served or "hand-over",
                        credit=f.credit)
            return
        served = f.served
        if served is None:
            served = self._sent_unacknowledged(cs, info, f)
            if served is not None:
                key = ("LOAD", "OK")  # the chains send only OK completions
                self.unacknowledged[key] = self.unacknowledged.get(key, 0) + 1
        if served is not None:
            k = keys.get(served, {})
            if f.ticket is not None:  # an allocation: ticket, then the slot Read
                rec.add(self._finish_time(cs, info, k.get("ticket"), f), "handle",
                        conn=conn_id, data=f.request, hold=True, ticket=f.ticket,
                        ring=self.layout.rings[0].name if self.layout else None,
                        via="nic", variant=served, credit=f.credit)
                # the rest of the allocation (slot, data, entry) takes effect when its
                # Generation add lands: the entry VALID for other connections' LOADs
                rec.add(f.bound if f.bound is not None else
                        self._finish_time(cs, info, k.get("slot"), f), "read_slot",
                        conn=conn_id, via="nic", variant=served, credit=f.credit)
            else:
                point = self._finish_time(cs, info, k.get("point"), f)
                if VARIANTS[served].op == "LOAD" and f.entry_read is not None:
                    # the instant its entry Read sampled the entry (the Read's
                    # ``Cqe.sampled``), not the Read's finish some hundred ns later: a
                    # FREE in between does not change what the LOAD delivers
                    point = f.entry_read
                rec.add(point, "handle", conn=conn_id, data=f.request, via="nic",
                        variant=served, credit=f.credit)
        elif f.ticket is not None:  # handed over with its ticket: the CPU reads the slot
            fa = next((k["ticket"] for k in keys.values() if "ticket" in k), None)
            rec.add(self._finish_time(cs, info, fa, f), "handle", conn=conn_id,
                    data=f.request, hold=True, ticket=f.ticket,
                    ring=self.layout.rings[0].name if self.layout else None,
                    via="nic", variant="hand-over", credit=f.credit)

    def _sent_unacknowledged(self, cs: ChainServer, info: CreditInfo,
                             f: Finished) -> str | None:
        """A LOAD on a connection that failed, which the target counts as not served
        (its COMPLETION's CQE never came: decision O5), though its chain had sent the
        COMPLETION before the failure: the Send executed (its condition held; a Send
        whose test failed, or was still being read, retires flushed at the failure as
        well) and was flushed waiting for its acknowledgement. RC cannot tell the
        target whether the initiator received it; a LOAD changes nothing in the target,
        so the reference applies it as the NIC served it, and the initiator either has
        its COMPLETION (and its data, sent before on the same QP) or, the connection
        being down, nothing is expected of it. Only LOADs: the salvage (O5) serves a
        store it cuts again wherever its data is at hand, so the target sends that
        COMPLETION itself. The variant, or None."""
        if cs.failed_at is None or len(f.request) < 2 or f.request[1] != KbtpOpcode.LOAD \
                or f.ticket is not None or f.unbound is not None:
            return None
        tracer = self.sim.tracer
        assert tracer is not None
        for w in cs.templates:
            if w.role is not Role.CONN or w.opcode is not Opcode.SEND \
                    or VARIANTS.get(w.part) is None or VARIANTS[w.part].op != "LOAD" \
                    or w.name not in info.wrs:
                continue
            qpn, idx = info.wrs[w.name]
            tl = tracer.timeline(cs.nic.name, qpn, idx)
            # "executed": it ran as a Send (its condition held, or a CAS armed it); a WR
            # whose test failed, or not yet decided, retires flushed at the failure too
            if "executed" in tl and tl["executed"] < cs.failed_at \
                    and tl.get("status") not in (None, "SUCCESS"):
                return w.part
        return None

    def _finish_time(self, cs: ChainServer, info: CreditInfo, name: str | None,
                     f: Finished) -> int:
        """When WR ``name`` (or the first of ``a,b`` that ran) finished, else ``f.time``."""
        for one in (name or "").split(","):
            if one in info.wrs:
                qpn, idx = info.wrs[one]
                tl = self.sim.tracer.timeline(cs.nic.name, qpn, idx)  # type: ignore[union-attr]
                if "finished" in tl:
                    return int(tl["finished"])
        return f.time

    def timeline(self, conn_id: int, credit: int) -> list[dict[str, Any]]:
        """The WRs of one credit's chain with their recorded phases, in time order."""
        info = self.credit_info.get((conn_id, credit))
        if info is None:
            return []
        out = []
        tracer = self.sim.tracer
        assert tracer is not None
        for name, (qpn, idx) in info.wrs.items():
            tl = tracer.timeline(self.nic.name, qpn, idx)
            out.append({"wr": name, "role": info.roles.get(name, ""), "qpn": qpn,
                        "index": idx, **{k: v for k, v in tl.items()
                                         if k in ("posted", "fetched", "started",
                                                  "finished", "status", "opcode")}})
        out.sort(key=lambda r: (r.get("started", r.get("finished", 1 << 62)), r["wr"]))
        return out

    def failed_credit(self, conn_id: int) -> CreditInfo | None:
        """The first credit of ``conn_id`` (finished or not) one of whose WRs completed
        with an error status, for the report of a connection failure."""
        conn = self.connections.get(conn_id)
        if conn is None:
            return None
        cs = self.chain_server(conn)
        tracer = self.sim.tracer
        assert tracer is not None
        cands = list(self.credits.get(conn_id, []))
        for n, cr in sorted(cs.live.items()):
            f = Finished(n, None, cs.request_bytes(cr), int(self.env.now))
            cands.append(CreditInfo(conn_id, f, {k: (q.qpn, i) for k, (q, i)
                                                 in cr.index.items()},
                                    {w.name: w.role.value for w in cs.templates}))
        best: tuple[int, CreditInfo] | None = None
        for info in cands:  # the earliest WR that did not succeed (a flush included: a
            for qpn, idx in info.wrs.values():  # loopback error flushes the failing WR too)
                tl = tracer.timeline(self.nic.name, qpn, idx)
                if tl.get("status") not in (None, "SUCCESS") and "finished" in tl and (
                        best is None or tl["finished"] < best[0]):
                    best = (tl["finished"], info)
        if best is None:
            return None
        self.credit_info.setdefault((conn_id, best[1].finished.credit), best[1])
        return best[1]

    # ---------------------------------------------------------------- faults
    def _slot_written(self, addr: int, before: bytes, after: bytes) -> None:
        if self.slot_write_hook is not None:
            self.slot_write_hook(addr, before, after)

    def kick(self) -> None:
        """Wake the connections' CPU loops (after memory changed behind their back)."""
        self._kick()

    def settled(self) -> bool:
        """Every request received on an open connection has been seen by its CPU loop, and
        nothing waits in the target (a quiescent point)."""
        for conn_id, conn in self.connections.items():
            if not conn.up:
                continue
            cs = self.chain_server(conn)
            if len(self.credits.get(conn_id, ())) < cs.recv_cq.count:
                return False
            tconn = self.tap.connections.get(conn_id)
            if tconn is not None and (tconn.busy or tconn.queue):
                return False
        return not self.tap.waiting_allocations


Gen = Generator[simpy.Event, Any, Any]


class ObservedInitiator(Initiator):
    """An Initiator that keeps, per connection, the messages it received and the data
    it exposed for the target's RDMA Reads (by Request ID)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        #: connection id -> messages received on it, in order
        self.by_conn: dict[int, list[bytes]] = {}
        #: (connection id, Request ID) -> the octets a non-inline store exposed
        self.sources: dict[tuple[int, int], bytes] = {}

    def _rpc(self, op: str, handle: int, build: Any, **kw: Any) -> Gen:  # type: ignore[override]
        source = kw.get("source")
        conn = self.conn

        def tapped(rid: int, dd: Any) -> Any:
            if source is not None and conn is not None:
                self.sources[(conn.conn_id, rid)] = source
            return build(rid, dd)

        return (yield from super()._rpc(op, handle, tapped, **kw))

    def _on_message(self, raw: bytes, cqe: Any) -> None:
        if self.conn is not None:
            self.by_conn.setdefault(self.conn.conn_id, []).append(raw)
        super()._on_message(raw, cqe)


__all__ = ["ChainTransform", "CreditInfo", "ObservedInitiator", "ObservedServer", "key_wrs"]
