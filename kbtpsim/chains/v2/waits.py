"""Step WAITs per CQ (a pass over the chain IR), for credits that overlap.

v1's master waits for the end of step S with one WAIT on the chain CQ, which collects
the worker's and the connection QP's CQEs: the count is cumulative over the connection,
so it holds only while one credit runs at a time. Chains v2 give every credit slot its
own worker lanes and CQ (:class:`~kbtpsim.chains.v2.slots.SlotQueues`), so a
credit's untaken tail (another variant's later steps) does not hold the next credit
back; the connection QP stays one per connection, its CQEs in ring order.
:func:`split_waits` therefore splits each step's WAIT into a WAIT on the slot's CQ
(``cq:chain``: the worker CQEs of the credit so far) and, where the step has work on the
connection QP, a WAIT on its CQ (``cq:conn``: the connection QP's CQEs of the credit so
far; earlier credits' come first in ring order). Counts are per credit here; the poster
adds the credit's base (rounds of the slot, or credits before it).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import networkx as nx

from kbtpsim.chains.ir import Addr, Chain, Const, EdgeKind, Role, WrTemplate
from kbtpsim.nic.wqe import Opcode


def _is_step_wait(w: WrTemplate) -> bool:
    return (w.role is Role.MASTER and w.opcode is Opcode.WAIT
            and w.fields.get("target") == Addr("cq:chain"))


def split_waits(chain: Chain) -> Chain:
    """``chain`` with each step WAIT split by CQ (module docstring)."""
    g = chain.graph
    signaled: dict[int, dict[Role, list[str]]] = {}
    for w in chain.wrs():
        if w.signaled and w.role in (Role.WORKER, Role.CONN):
            signaled.setdefault(w.step, {}).setdefault(w.role, []).append(w.name)
    def cum(step: int) -> tuple[int, int]:
        """Worker and connection-QP CQEs of a credit through ``step``."""
        ws = [signaled[s] for s in signaled if s <= step]
        return (sum(len(x.get(Role.WORKER, [])) for x in ws),
                sum(len(x.get(Role.CONN, [])) for x in ws))

    out = Chain(chain.name, chain.addr_le, nx.DiGraph(), list(chain.notes),
                dict(chain.headers))
    conn_wait: dict[str, str] = {}
    for n in g.nodes:
        w: WrTemplate = g.nodes[n]["wr"]
        if not _is_step_wait(w):
            out.add(replace(w))
            continue
        n_w, n_c = cum(w.step)
        out.add(replace(w, fields={"target": Addr("cq:chain"),
                                   "count": Const(n_w, "worker CQEs of this credit so far")},
                        note=f"every worker WR of step {w.step} has completed"))
        if signaled.get(w.step, {}).get(Role.CONN):
            name = f"wait_conn_{w.step}"
            out.add(WrTemplate(
                name, Role.MASTER, Opcode.WAIT, w.part, w.step,
                fields={"target": Addr("cq:conn"),
                        "count": Const(n_c, "connection-QP CQEs of this credit so far")},
                note=f"every connection-QP WR of step {w.step} has completed"))
            conn_wait[n] = name
    for a, b, d in g.edges(data=True):
        kind = d["kind"]
        if kind is EdgeKind.QP_ORDER and chain.wr(a).role is Role.MASTER:
            continue  # re-made below
        if kind is EdgeKind.COMPLETION and b in conn_wait and chain.wr(a).role is Role.CONN:
            out.edge(a, conn_wait[b], kind)
            continue
        out.edge(a, b, kind)
    master = [w.name for w in out.wrs() if w.role is Role.MASTER]
    for x, y in itertools.pairwise(master):
        out.edge(x, y, EdgeKind.QP_ORDER)
    return out
