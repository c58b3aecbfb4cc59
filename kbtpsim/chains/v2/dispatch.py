"""Per-operation dispatch (chains v2): a request runs only its own variant's WRs.

Without dispatch every credit's master runs every variant's steps: a LOAD fetches and
decodes the WRs of all five variants (188 on ideal-be), most of them as conditional NOPs.
:func:`split_variants`, a pass over the chain in lanes (:mod:`.lanes`), gives each
variant ``v`` its own *sub-master* QP (``qp:master@v``) that runs v's step sequence, and
its lane its own CQ (``cq:chain@v``); the credit's master keeps only the common part:

1. WAIT for the previous credit's gate and for the receive;
2. *dispatch A*: for each variant, an ENABLE of its sub-master through v's first steps
   (the markers and patches, which read nothing but the request), **conditional on the
   request header** (version, opcode, flags: v's own header marker condition, so that a
   request v's markers would accept is the request dispatched to v). The conditions are
   mutually exclusive (rule ``dispatch-exclusive``): at most one sub-master runs;
3. the ``dispatch`` lane's steps (the handle patch, byte count, table marker, the
   table-entry Read), with WAITs on the slot's CQ;
4. *dispatch B*: the same conditional ENABLEs, through the rest of v's sub-master (its
   steps that read the table entry);
5. a WAIT for this credit's gate NOP (the served variant's release, or the CPU's), then
   an ENABLE of the connection QP through the credit's last connection WR: the untaken
   variants' connection WRs run then, as NOPs (each is conditional on an arm word only
   its own variant's markers write: rule ``dispatch-dead``), so every credit puts the same
   number of CQEs on the connection QP's CQ, whoever served it.

Since decision C30 the pass first gives each variant its own copy of the common WRs it
reads (:func:`~kbtpsim.chains.v2.lookup.own_lookups`), so there is no common part: steps
3 and 4 are empty, every variant is dispatched whole by its dispatch A (the LOAD before
the gate, C25; the others after it), and a request no variant takes runs nothing.

A sub-master's sequence is v's steps as v1 runs them (ENABLE v's lane and, where v has
connection WRs, the connection QP, then WAIT for them), with counts on v's own CQ. Since
a sub-master, its lane and its CQ advance only in the rounds v runs, the counts that
name them (*private* counts, :func:`is_private`) cannot be advanced by the slot's
recycle segment, which runs every round: v advances them itself. The sub-master's last
WR ENABLEs v's *advancer* (a managed loopback QP per slot and variant, posted once by
:class:`~kbtpsim.chains.v2.server.RecyclingChainServer`), whose FetchAdds add one
v-round to each private count (rule ``dispatch-advanced``), after the WRs they belong to
ran. Counts naming queues that advance every round (the connection QP and its CQ, the
gate, the receive, the slot's CQ) stay with the recycle segment, wherever they sit.

The CPU learns which variant a credit dispatched from the request header, with the same
conditions (:func:`dispatched`): it expects the common CQEs plus that variant's.

Needs native conditional ENABLEs (``native_conditional``); on CAS-on-WQE profiles (cx5)
the dispatch ENABLEs would be CAS-armed (RedN), not built: there v2 runs without
dispatch (:func:`dispatch_blockers`).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import networkx as nx

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.ir import (
    Addr,
    Chain,
    CondSpec,
    Const,
    EdgeKind,
    Role,
    WrTemplate,
)
from kbtpsim.chains.v2.belongs import (
    DispatchError,
    dispatched,
    exclusive,
    header_condition,
    holds,
    is_private,
    target_ref,
    variant_of,
)
from kbtpsim.chains.v2.gating import check_gated, credit_local
from kbtpsim.chains.v2.lanes import requeue
from kbtpsim.chains.v2.lookup import own_lookups
from kbtpsim.chains.v2.vgates import check_gate_order, gates_per_variant
from kbtpsim.chains.vocab import SUB_LANE
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.wqe import Opcode


def dispatch_blockers(profile: NicProfile) -> list[str]:
    """Why ``profile`` cannot run per-operation dispatch (empty: it can)."""
    if not profile.native_conditional:
        return ["per-operation dispatch needs native conditional ENABLEs "
                "(native_conditional); CAS-armed dispatch ENABLEs are not built"]
    return []


def _steps(wrs: list[WrTemplate]) -> list[int]:
    return sorted({w.step for w in wrs})


def split_variants(chain: Chain, early: bool = True, lookups: bool = True) -> Chain:
    """``chain`` (in lanes, before :func:`~kbtpsim.chains.v2.waits.split_waits`) with
    per-operation dispatch (module docstring); ``early``: a variant that reads nothing of
    the common part is dispatched before the gate, its own sub-master WAITing for it
    (decision C25; False: after the gate, as before C25, and for a mutant); ``lookups``:
    each variant that reads the table entry has its own look-up, and there is no common part
    (decision C30, :mod:`.lookup`; False: as before C30, for a measurement)."""
    if lookups:
        chain = own_lookups(chain)
    variants = [v for v in VARIANTS if any(w.part == v for w in chain.wrs())]
    if not variants:
        raise DispatchError("dispatch: the chain serves no variant")
    # C27: each variant releases its credit on its own gate (kbtpsim/chains/v2/vgates.py)
    owner = {w.name: v for w in chain.wrs()
             if w.role is Role.WORKER and (v := variant_of(w)) is not None}
    try:
        chain = gates_per_variant(chain, owner, set(_hoisted(chain)) if early else set())
    except ValueError as e:
        raise DispatchError(f"dispatch: {e}") from None
    g = chain.graph
    out = Chain(chain.name, chain.addr_le, nx.DiGraph(), list(chain.notes),
                dict(chain.headers))
    mine: dict[str | None, list[WrTemplate]] = {}
    hoisted = _hoisted(chain) if early else {}
    for w in chain.wrs():
        if w.role is Role.MASTER:
            continue
        v = variant_of(w) if w.role in (Role.WORKER, Role.CONN) else None
        if w.name in hoisted:  # C25: on v's sub-master (added with it, below)
            continue
        nw = replace(w, lane=_lane_of(w, v)) if w.role is Role.WORKER \
            and v is not None else replace(w)
        out.add(nw)
        mine.setdefault(v, []).append(nw)
    masters = {n for n in g.nodes if chain.wr(n).role is Role.MASTER}
    for a, b, d in g.edges(data=True):
        if a in masters or b in masters or a in hoisted or b in hoisted:
            continue  # re-made below
        if d["kind"] in (EdgeKind.QP_ORDER, EdgeKind.FENCE) and \
                chain.wr(a).role is Role.WORKER:
            continue  # re-made per lane
        wa, wb = chain.wr(a), chain.wr(b)
        if (wa.role in (Role.WORKER, Role.CONN) and wb.role in (Role.WORKER, Role.CONN)
                and variant_of(wa) is not None and variant_of(wb) is None):
            raise DispatchError(f"dispatch: the common {b} depends on {a} of "
                                f"{variant_of(wa)}")
        out.edge(a, b, d["kind"])
    conds = {v: header_condition(chain, v) for v in variants}
    for a, b in itertools.combinations(variants, 2):
        if not exclusive(conds[a], conds[b]):
            raise DispatchError(f"dispatch-exclusive: {a} and {b} are dispatched by "
                                "overlapping header conditions")
    ring = [w for w in out.wrs() if w.role is Role.CONN]  # connection QP ring order
    pos = {w.name: i for i, w in enumerate(ring)}
    conn_before = [sum(1 for x in ring[:i + 1] if x.signaled) for i in range(len(ring))]
    common = [w for w in mine.get(None, []) if w.role is Role.WORKER]
    last_common = max(_steps(common), default=0)
    rel: dict[str, list[str]] = {}  # master ENABLE -> the WRs it releases

    def producers_common(w: WrTemplate) -> bool:
        return any(chain.wr(p).role is Role.WORKER and variant_of(chain.wr(p)) is None
                   for p in g.predecessors(w.name))

    def reads_common(w: WrTemplate) -> bool:
        """``w`` reads octets a common worker WR places (a gather, its condition word,
        a placed field)."""
        return any(p in chain and chain.wr(p).role is Role.WORKER
                   and variant_of(chain.wr(p)) is None for p in w.reads_from())

    sub: dict[str, list[WrTemplate]] = {}
    a_end: dict[str, int] = {}  # variant -> sub-master WRs in its phase A
    #: C25: variant -> the master's conditional ENABLEs of its credit-local first lanes
    pre: dict[str, list[WrTemplate]] = {}
    for v in variants:
        work = [w for w in mine[v] if w.role is Role.WORKER]
        conn = [w for w in mine[v] if w.role is Role.CONN]
        steps = _steps(work + conn)
        a_steps: list[int] = []
        #: a variant that reads nothing of the common part (C15's LOAD) runs whole in
        #: phase A, right after the receive: it has no dispatch B
        whole = not any(reads_common(w) for w in work + conn)
        for s in steps:  # phase A: first steps that read nothing of the common part
            if not whole and (s > last_common or any(producers_common(w)
                                                     for w in work + conn if w.step == s)):
                break
            a_steps.append(s)
        seq_v: list[WrTemplate] = []
        waited_w = waited_c = 0
        #: decision C25: a LOAD that reads nothing of the common part is dispatched
        #: before the gate; C30: the other variants after it, as they were while they
        #: read the common part (a WAIT for the gate of their own, advanced every round,
        #: and their lanes' ENABLEs on the master would cost a LOAD's credit more)
        pre_gate = whole and early and VARIANTS[v].op == "LOAD"
        if pre_gate:  # decision C25: dispatched before the gate, which its own
            # sub-master WAITs for first; the master ENABLEs the credit-local lanes of
            # its first step itself (beside, so that a LOAD at window 1 pays one WAIT)
            seq_v.append(_wr(f"wait_prev_{v}", v, steps[0], Opcode.WAIT, "cq:gate",
                             Const(0, "credits before this one"),
                             f"the credits before have released the gate: {v}'s WRs "
                             "that are not credit-local run after it"))
        for i, s in enumerate(steps):
            if i:
                prev = steps[i - 1]
                n_w = sum(1 for w in work if w.step <= prev and w.signaled)
                if n_w > waited_w:
                    seq_v.append(_wr(f"wait_{v}_{prev}", v, prev, Opcode.WAIT,
                                     f"cq:chain@{v}", Const(n_w, f"{v} CQEs so far"),
                                     f"every {v} lane WR of step {prev} has completed"))
                    waited_w = n_w
                last_c = [w for w in conn if w.step == prev and w.signaled]
                if last_c and conn_before[pos[last_c[-1].name]] > waited_c:
                    waited_c = conn_before[pos[last_c[-1].name]]
                    seq_v.append(_wr(f"wait_conn_{v}_{prev}", v, prev, Opcode.WAIT,
                                     "cq:conn", Const(waited_c, "connection-QP CQEs of "
                                                      "this credit through it"),
                                     f"{v}'s connection WRs of step {prev} have "
                                     "completed"))
            by_lane: dict[str, list[WrTemplate]] = {}
            for w in work:
                if w.step == s:
                    by_lane.setdefault(w.lane, []).append(w)
            # the connection QP first: its WRs cross the network, the longest path of
            # a step (decision C16: the LOAD's early release shares its step)
            groups = [("qp:conn", [w for w in conn if w.step == s]),
                      *((f"qp:worker@{lane}", ws) for lane, ws in by_lane.items())]
            if pre_gate and i == 0:  # C25: the master runs these before the gate
                local = [(r, ws) for r, ws in groups if r != "qp:conn" and ws
                         and all(credit_local(w) for w in ws)]
                groups = [g for g in groups if g not in local]
                for role, ws in local:
                    e = _dispatch_lane(v, role, conds[v], ws[-1].name, 0)
                    rel[e.name] = [w.name for w in ws]
                    pre.setdefault(v, []).append(e)
            for role, ws in groups:
                if not ws:
                    continue
                what = "connection QP" if role == "qp:conn" else (
                    "lane" if ws[0].lane == v else f"lane {ws[0].lane}")
                tag = "conn_" + v if role == "qp:conn" else ws[0].lane
                e = _wr(f"enable_{tag}_{s}", v, s,
                        Opcode.ENABLE, role, Addr(f"wr:{ws[-1].name}", 1),
                        f"release {v}'s step {s} on the {what}")
                rel[e.name] = [w.name for w in ws]
                seq_v.append(e)
            seq_v.extend(h for h in hoisted.values() if h.lane == v and h.step == s)
            if a_steps and s == a_steps[-1] and not whole:
                a_end[v] = len(seq_v)
        n_all = sum(1 for w in work if w.signaled)
        if n_all > waited_w and any(is_private(target_ref(w)) for w in work):
            # C27: a release on v's lane has run before the advancer adds to its count
            seq_v.append(_wr(f"wait_{v}_done", v, steps[-1], Opcode.WAIT,
                             f"cq:chain@{v}", Const(n_all, f"every {v} lane CQE"),
                             f"every {v} lane WR has completed (its releases of its gate "
                             "included) before its advancer runs"))
        n_adv = sum(1 for w in seq_v + pre.get(v, []) + work if is_private(target_ref(w))) \
            + 1 + (1 if whole else 2 if v in a_end else 1)  # its own ENABLE, dispatch(es)
        seq_v.append(_wr(f"advance_{v}", v, steps[-1], Opcode.ENABLE, f"qp:adv@{v}",
                         Const(n_adv, f"{v}'s advancer: one {v} round to its own counts"),
                         f"advance {v}'s private counts by one {v} round"))
        if whole:
            a_end[v] = len(seq_v)
        sub[v] = seq_v
    # C25: the receive, the variants that WAIT for the gate themselves, then the gate
    seq = [replace(chain.wr("wait_recv"))]
    gated_here = {v for v in sub if any(w.name == f"wait_prev_{v}" for w in sub[v])}
    for group in (gated_here, set(sub) - gated_here):
        for v in variants:
            if v in a_end and v in group:
                d = _dispatch(v, "a", conds[v], sub[v][a_end[v] - 1].name,
                              0 if group is gated_here else 1)
                rel[d.name] = [w.name for w in sub[v][:a_end[v]]]
                seq.append(d)
                seq.extend(pre.get(v, []))
        if group is gated_here:
            seq.append(replace(chain.wr("wait_prev")))
    waited = 0
    for s in _steps(common):
        lanes: dict[str, list[WrTemplate]] = {}
        for w in common:
            if w.step == s:
                lanes.setdefault(w.lane or w.part, []).append(w)
        for lane, ws in lanes.items():
            e = _wr(f"enable_{lane}_{s}", "", s, Opcode.ENABLE, f"qp:worker@{lane}",
                    Addr(f"wr:{ws[-1].name}", 1), f"release step {s} on the {lane} lane")
            rel[e.name] = [w.name for w in ws]
            seq.append(e)
        n = sum(1 for w in common if w.step <= s and w.signaled)
        if n > waited:
            seq.append(_wr(f"wait_dispatch_{s}", "", s, Opcode.WAIT, "cq:chain",
                           Const(n, "common CQEs of this credit so far"),
                           f"the common WRs of step {s} have completed"))
            waited = n
    for v in variants:
        if a_end.get(v) == len(sub[v]):
            continue  # dispatched whole in phase A
        d = _dispatch(v, "b", conds[v], sub[v][-1].name, last_common)
        rel[d.name] = [w.name for w in sub[v][a_end.get(v, 0):]]
        seq.append(d)
    seq.append(_wr("wait_gate", "", 99, Opcode.WAIT, "cq:gate",
                   Const(1, "this credit's gate NOP (served, or released by the CPU)"),
                   "the credit is done: its variant's release or the CPU's"))
    if ring:
        e = _wr("enable_conn_rest", "", 99, Opcode.ENABLE, "qp:conn",
                Addr(f"wr:{ring[-1].name}", 1),
                "the untaken variants' connection WRs run, as NOPs")
        rel[e.name] = [w.name for w in ring]
        seq.append(e)
    for w in seq:
        out.add(w)
    for v in variants:
        for w in sub[v]:
            out.add(w)
    for a, b, d in g.edges(data=True):  # the hoisted releases' own edges (C25)
        if (a in hoisted or b in hoisted) and a in out and b in out and \
                d["kind"] not in (EdgeKind.QP_ORDER, EdgeKind.FENCE, EdgeKind.ENABLE):
            out.edge(a, b, d["kind"])
        elif a in hoisted and b in out and d["kind"] is EdgeKind.ENABLE:
            out.edge(a, b, d["kind"])  # the release of the gate NOP
    _edges(out, [seq, *sub.values()], rel, mine)
    for a, b, d in g.edges(data=True):  # what the two first WAITs count, as before
        if d["kind"] is EdgeKind.COMPLETION and b in ("wait_prev", "wait_recv"):
            out.edge(a, b, d["kind"])
    out.notes.append(f"dispatch: {', '.join(variants)} each on its own sub-master, "
                     "dispatched by its header condition")
    return out


def _wr(name: str, v: str, step: int, op: Opcode, target: str, count: Addr | Const,
        note: str) -> WrTemplate:
    return WrTemplate(name, Role.MASTER, op, v or "sequence", step,
                      fields={"target": Addr(target), "count": count}, note=note, lane=v)


def _dispatch(v: str, phase: str, cond: CondSpec, through: str, step: int) -> WrTemplate:
    return replace(_wr(f"dispatch_{phase}_{v}", "", step, Opcode.ENABLE, f"qp:master@{v}",
                       Addr(f"wr:{through}", 1), f"run {v}'s sub-master through {through} "
                       f"if the request is {v}'s"), cond=cond)


def _lane_of(w: WrTemplate, v: str) -> str:
    """The lane worker ``w`` of variant ``v`` runs on when dispatched: its own sub-lane
    of ``v`` (``v__tag``), else ``v``'s lane."""
    return w.lane if w.lane.startswith(v + SUB_LANE) else v


def _hoisted(chain: Chain) -> dict[str, WrTemplate]:
    """Decision C25: a variant's early release (``early_<v>``, a conditional ENABLE of
    the gate) that its lane would run alone in its step runs on the variant's sub-master
    instead, in that step's place: one ENABLE and one WQE fetch fewer between the gate
    and the next credit. Name -> the WR as a sub-master WR."""
    groups: dict[tuple[str, str, int], int] = {}
    for w in chain.wrs():
        v = variant_of(w) if w.role is Role.WORKER else None
        if v is not None:
            key = (v, _lane_of(w, v), w.step)
            groups[key] = groups.get(key, 0) + 1
    out: dict[str, WrTemplate] = {}
    for w in chain.wrs():
        v = variant_of(w) if w.role is Role.WORKER else None
        if v is not None and w.name == f"early_{v}" and w.opcode is Opcode.ENABLE \
                and groups[(v, _lane_of(w, v), w.step)] == 1:
            out[w.name] = replace(w, role=Role.MASTER, lane=v)
    return out


def _dispatch_lane(v: str, role: str, cond: CondSpec, through: str,
                   step: int) -> WrTemplate:
    """Decision C25: the master's ENABLE of one of ``v``'s credit-local lanes, before the
    gate, conditional on the request being ``v``'s (as ``v``'s dispatch ENABLE)."""
    lane = role.split("@", 1)[1]
    return replace(_wr(f"dispatch_l_{lane}", "", step, Opcode.ENABLE, role,
                       Addr(f"wr:{through}", 1), f"run {v}'s credit-local lane {lane} "
                       f"through {through} before the gate, if the request is {v}'s"),
                   cond=cond)


def _edges(out: Chain, masters: list[list[WrTemplate]], rel: dict[str, list[str]],
           mine: dict[str | None, list[WrTemplate]]) -> None:
    """Queue order (per master, per lane), ENABLE and COMPLETION edges."""
    for seq in masters:
        for x, y in itertools.pairwise(seq):
            out.edge(x.name, y.name, EdgeKind.QP_ORDER)
        for w in seq:
            for r in rel.get(w.name, []):
                out.edge(w.name, r, EdgeKind.ENABLE)
            if w.opcode is not Opcode.WAIT or w.name.startswith("wait_prev") or \
                    w.name == "wait_recv":
                continue  # they count earlier credits' CQEs
            ref = target_ref(w)  # each WAIT counts the CQEs of the WRs it waits for
            if ref == "cq:gate":
                for x in out.wrs():
                    if x.role is Role.GATE:
                        out.edge(x.name, w.name, EdgeKind.COMPLETION)
                continue
            if ref == "cq:conn":
                pool = [x for x in mine.get(w.part, []) if x.role is Role.CONN]
            elif ref == "cq:chain":
                pool = [x for x in mine.get(None, []) if x.role is Role.WORKER]
            else:
                pool = [x for x in mine[ref.split("@", 1)[1]] if x.role is Role.WORKER]
            for x in pool:
                if x.signaled and x.step <= w.step:
                    out.edge(x.name, w.name, EdgeKind.COMPLETION)
    requeue(out, fence_cas=True, masters=False)


def check_dispatch(chain: Chain) -> list[str]:
    """Verifier rules of a dispatched chain (findings, empty if sound):

    ``dispatch-exclusive``: the dispatch ENABLEs' conditions pairwise exclude each other
    (one request never runs two variants);
    ``dispatch-dead``: every connection WR of variant v (which the master's last ENABLE
    releases on every path) is conditional on a word only v's WRs place, so it is a NOP
    on the paths where v was not dispatched;
    ``dispatch-private``: a WAIT/ENABLE naming a variant's own queue sits in that
    variant's sub-master or is its dispatch ENABLE (only its advancer advances it)."""
    out: list[str] = []
    disp = [w for w in chain.wrs() if w.role is Role.MASTER and w.name.startswith("dispatch_")]
    by_v: dict[str, CondSpec] = {}
    for w in disp:
        v = is_private(target_ref(w))
        if w.cond is None or v is None:
            out.append(f"dispatch-exclusive: {w.name} is not a conditional ENABLE of a "
                       "sub-master")
            continue
        if v in by_v and by_v[v] != w.cond:
            out.append(f"dispatch-exclusive: {w.name}: {v} dispatched by two conditions")
        by_v[v] = w.cond
    for a, b in itertools.combinations(sorted(by_v), 2):
        if not exclusive(by_v[a], by_v[b]):
            out.append(f"dispatch-exclusive: {a} and {b} can both be dispatched by one "
                       "request")
    for w in chain.wrs():
        if w.role is not Role.CONN:
            continue
        v = variant_of(w)
        if w.cond is None:
            out.append(f"dispatch-dead: {w.name} ({v}) is unconditional: it would run "
                       "in full on every credit")
            continue
        foreign = [p for p in w.cond.word.producers
                   if p in chain and variant_of(chain.wr(p)) != v]
        if foreign or not w.cond.word.producers:
            out.append(f"dispatch-dead: {w.name} ({v}) is conditional on a word that "
                       f"not only {v} places ({', '.join(foreign) or 'nothing'})")
    for w in chain.wrs():
        if w.role is not Role.MASTER:
            continue
        v = is_private(target_ref(w))
        if v is not None and not (w.lane == v or w.name.startswith("dispatch_")):
            out.append(f"dispatch-private: {w.name} names {v}'s own queue outside {v}'s "
                       "sub-master")
    return out + check_gated(chain) + check_gate_order(chain)


__all__ = ["DispatchError", "check_dispatch", "dispatch_blockers",
           "dispatched", "exclusive", "header_condition", "holds", "is_private",
           "split_variants", "variant_of"]
