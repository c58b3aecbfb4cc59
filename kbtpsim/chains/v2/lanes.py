"""Lanes: each part of a chain on its own worker QP (a pass over the chain IR).

In a v1 chain every worker WR of a step runs on one worker QP, one after the other: step
1 of the five-variant chain is 52 signaled WRs in a row on ideal-be (every variant's
markers and patches), though none reads another's output. :func:`split_lanes` gives each
*part* (``dispatch``, ``load``, ``store_inline``, ...) its own managed worker QP (its
*lane*), all on the same chain CQ, and replaces each master ``enable_worker_S`` by one
ENABLE per lane with WRs in step S. The lanes of a step run side by side on the NIC's
processing units; the master's WAIT for the step still counts every CQE of the step on
the shared CQ, so the counts are the same as v1's whatever the interleaving.

What changes for the verifier: queue order (``qp_order``) and FENCE edges exist only
within a lane (a FENCE waits for earlier Reads and atomics of its own QP); every WR is
still ENABLEd by the master in its step, after the WAIT for the previous step, so the
``held-back`` rule holds as before (checked: :func:`split_lanes` callers verify the
result).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import networkx as nx

from kbtpsim.chains.ir import Addr, Chain, EdgeKind, Role, WrTemplate
from kbtpsim.chains.vocab import SUB_LANE
from kbtpsim.nic.wqe import Opcode, WqeFlags


def lane_variant(lane: str) -> str:
    """The part a lane belongs to: a variant's further lane is named VARIANT + SUB_LANE +
    tag (C15: the LOAD's byte-count marker, ``load__cqe``); it runs beside the variant's
    lane, on the variant's CQ, released by the variant's sub-master, advanced in the
    variant's rounds."""
    return lane.split(SUB_LANE, 1)[0]


def _is_worker_enable(w: WrTemplate) -> bool:
    return (w.role is Role.MASTER and w.opcode is Opcode.ENABLE
            and w.fields.get("target") == Addr("qp:worker"))


def split_lanes(chain: Chain) -> Chain:
    """``chain`` with each worker WR on its part's lane (module docstring)."""
    g = chain.graph
    order = {n: i for i, n in enumerate(chain.wr(x).name for x in g.nodes)}
    sorted_wrs = list(chain.wrs())
    rank = {w.name: i for i, w in enumerate(sorted_wrs)}
    out = Chain(chain.name, chain.addr_le, nx.DiGraph(), list(chain.notes),
                dict(chain.headers))
    replaced: dict[str, list[str]] = {}  # new ENABLE -> the WRs it releases
    dropped: set[str] = set()
    for n in sorted(g.nodes, key=order.__getitem__):
        w: WrTemplate = g.nodes[n]["wr"]
        if _is_worker_enable(w):
            dropped.add(n)
            targets = sorted((b for _, b, d in g.out_edges(n, data=True)
                              if d["kind"] is EdgeKind.ENABLE), key=rank.__getitem__)
            lanes: dict[str, list[str]] = {}
            for t in targets:
                lanes.setdefault(chain.wr(t).lane or chain.wr(t).part, []).append(t)
            for lane, ts in lanes.items():
                new = replace(w, name=f"{n}@{lane}",
                              fields={"target": Addr(f"qp:worker@{lane}"),
                                      "count": Addr(f"wr:{ts[-1]}", 1)},
                              note=f"release step {w.step} on the {lane} lane")
                out.add(new)
                replaced[new.name] = ts
            continue
        out.add(replace(w, lane=w.lane or w.part) if w.role is Role.WORKER else replace(w))
    lane_of = {w.name: w.lane for w in out.wrs() if w.role is Role.WORKER}
    for a, b, d in g.edges(data=True):
        kind = d["kind"]
        if a in dropped or b in dropped:
            continue  # re-made below
        if kind in (EdgeKind.QP_ORDER, EdgeKind.FENCE) and (
                (a in lane_of and b in lane_of) or chain.wr(a).role is Role.MASTER):
            continue  # queue order is re-made per lane, and the master's
        out.edge(a, b, kind)
    for new, ts in replaced.items():
        for t in ts:
            out.edge(new, t, EdgeKind.ENABLE)
    by_lane = requeue(out, fence_cas=True)
    out.notes.append(f"lanes: {', '.join(by_lane)} (one worker QP each)")
    return out


def requeue(chain: Chain, fence_cas: bool = False,
            masters: bool = True) -> dict[str, list[str]]:
    """(Re-)make the queue-order edges of the master (unless not ``masters``) and of
    each worker lane, and the FENCE edges (``fence_cas``: fence each lane's first CAS of
    a group first); the chain must have no such queue-order edges yet. Returns the
    lanes."""
    master = [w.name for w in chain.wrs() if w.role is Role.MASTER] if masters else []
    for x, y in itertools.pairwise(master):
        chain.edge(x, y, EdgeKind.QP_ORDER)
    by_lane: dict[str, list[str]] = {}
    for w in chain.wrs():
        if w.role is Role.WORKER:
            by_lane.setdefault(w.lane, []).append(w.name)
    for seq in by_lane.values():
        if fence_cas:
            _fence_first_cas(chain, seq)
        for x, y in itertools.pairwise(seq):
            chain.edge(x, y, EdgeKind.FENCE if chain.wr(y).flags & WqeFlags.FENCE
                       else EdgeKind.QP_ORDER)
    return by_lane


def _group(name: str) -> str:
    """The CAS-on-WQE group of a lowered WR (``cas_p``, ``cas``, ``cas_p2``, ``cas2``)."""
    tail = name.rsplit(".", 1)[-1] if "." in name else ""
    return tail if tail.startswith("cas") else ""


def _fence_first_cas(chain: Chain, seq: list[str]) -> None:
    """CAS-on-WQE (cx5): within a step, v1 runs every condition's Read (``cas_p``), then
    every CAS, then the second Reads and CASes, fencing the first of each group after
    the first (a FENCE waits for the QP's earlier Reads and atomics). A lane does the
    same with its own WRs: the first ``cas``, ``cas_p2`` and ``cas2`` of each step in the
    lane get the FENCE."""
    step, prev = None, ""
    for name in seq:
        w = chain.wr(name)
        g = _group(name)
        if w.step != step:
            step, prev = w.step, ""
        if g in ("cas", "cas_p2", "cas2") and g != prev and prev:
            w.flags |= WqeFlags.FENCE
        prev = g or prev


def lanes_of(chain: Chain) -> list[str]:
    """The lanes of a chain's worker WRs, in order of first use ("" = none)."""
    seen: dict[str, None] = {}
    for w in chain.wrs():
        if w.role is Role.WORKER:
            seen.setdefault(w.lane, None)
    return list(seen)
