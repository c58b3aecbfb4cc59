"""A gate per variant and credit slot (decision C27, chains v2 with per-operation
dispatch, :mod:`.dispatch`).

A credit lets the next one start by ENABLEing a gate NOP (decision C16) whose CQE the next
credits' WAITs count. With one gate QP per connection, that ENABLE names an index of a
queue that advances every round, so the slot's recycle segment must advance it every
round, for every variant, run or not: two FetchAdds per variant a round (its early
release and its late one), most of them for variants that did not run. Here each variant
``v`` releases its credit on a gate QP of its own per slot (``qp:gate@v``, one NOP, on the
connection's gate CQ), whose index advances only in the rounds ``v`` ran: its count is
private (:func:`~.dispatch.is_private`), and ``v``'s advancer advances it, after it ran.

The advancer runs once the sub-master's last WR ENABLEs it, while the last step's lane
WRs may still be running. A release on a lane must have run before the advancer adds
to its count (else it would ENABLE the next round's NOP too: a second CQE on the gate's
CQ, the next credit let through before this one took effect). So that release is
signaled and the sub-master WAITs for every lane CQE of ``v`` before it ENABLEs the
advancer: rule ``dispatch-gate-order`` (:func:`check_gate_order`).

The CPU releases a credit it served on the gate of the variant its request was
dispatched to (the same index the chain would ENABLE: idempotent), and a credit no variant
took on the connection's shared gate, whose NOPs only it ENABLEs, one more each time.
"""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from kbtpsim.chains.ir import Addr, Chain, EdgeKind, Role, WrTemplate
from kbtpsim.chains.v2.belongs import target_ref
from kbtpsim.nic.wqe import Opcode

#: the connection's shared gate NOP (the CPU's since C27) and a variant's own
SHARED_NOP = "gate_nop"


def variant_nop(v: str) -> str:
    """The name of variant ``v``'s gate NOP."""
    return f"{SHARED_NOP}_{v}"


def _is_gate_enable(w: WrTemplate) -> bool:
    """``w`` ENABLEs the connection's shared gate."""
    return w.opcode is Opcode.ENABLE and target_ref(w) == "qp:gate"


def gates_per_variant(chain: Chain, owner: dict[str, str],
                      hoisted: set[str] | frozenset[str] = frozenset()) -> Chain:
    """``chain`` (in lanes) with each variant's gate ENABLEs retargeted to its own gate
    NOP (module docstring). ``owner``: the variant of each WR that ENABLEs the gate
    (every such WR must have one). Its releases that stay on a lane become signaled;
    ``hoisted`` ones (sub-master WRs after the dispatch pass) keep their flags."""
    out = Chain(chain.name, chain.addr_le, chain.graph.copy(), list(chain.notes),
                dict(chain.headers))
    if SHARED_NOP not in out:
        return out
    nop = out.wr(SHARED_NOP)
    made: set[str] = set()
    for w in list(out.wrs()):
        if not _is_gate_enable(w):
            continue
        v = owner.get(w.name)
        if v is None:
            raise ValueError(f"{w.name} ENABLEs the gate but belongs to no variant")
        name = variant_nop(v)
        if name not in made:
            out.add(replace(nop, name=name, lane=v,
                            note=f"{v}'s gate NOP in this slot (C27): its release, or "
                                 "the CPU's"))
            made.add(name)
        fields = dict(w.fields)
        fields["target"] = Addr(f"qp:gate@{v}")
        fields["count"] = Addr(f"wr:{name}", 1)
        out.graph.nodes[w.name]["wr"] = replace(
            w, fields=fields, signaled=w.signaled or w.name not in hoisted)
        if out.graph.has_edge(w.name, SHARED_NOP):
            out.graph.remove_edge(w.name, SHARED_NOP)
        out.edge(w.name, name, EdgeKind.ENABLE)
    return out


def check_gate_order(chain: Chain) -> list[str]:
    """Verifier rule ``dispatch-gate-order`` (module docstring): every lane WR that
    ENABLEs its variant's own gate is signaled and counted by a WAIT of the variant's
    sub-master that runs before the sub-master ENABLEs the variant's advancer; no WR
    ENABLEs the shared gate (the CPU's)."""
    out: list[str] = []
    g = chain.graph
    for w in chain.wrs():
        if _is_gate_enable(w):
            out.append(f"dispatch-gate-order: {w.name} ENABLEs the connection's shared "
                       "gate, whose NOPs only the CPU ENABLEs (C27)")
        ref = target_ref(w)
        if w.role is not Role.WORKER or not ref.startswith("qp:gate@"):
            continue
        v = ref.split("@", 1)[1]
        adv = f"advance_{v}"
        waits = [x for x in g.successors(w.name)
                 if g.edges[w.name, x]["kind"] is EdgeKind.COMPLETION
                 and chain.wr(x).opcode is Opcode.WAIT and chain.wr(x).lane == v]
        if not w.signaled or adv not in chain or \
                not any(nx.has_path(g, x, adv) for x in waits):
            out.append(f"dispatch-gate-order: {w.name} may not have run when {v}'s "
                       "advancer adds a round to its count: it would release the next "
                       "round's gate NOP too")
    return out


__all__ = ["SHARED_NOP", "check_gate_order", "gates_per_variant", "variant_nop"]
