"""Which of a credit's work requests may run before its connection's gate (decision C25).

A connection's credits pass its gate in request order (decision C16): the draft has a
target process one connection's requests in order ("Operations"), so a credit may read
or change the target's state (the block table, the free ring, the pool) only once the
credits before it have released the gate. What reads and writes nothing but the credit's
own memory may run sooner: since C25 a LOAD is dispatched right after its receive, its
markers and patches run at once (the master ENABLEs those lanes itself), and its
sub-master WAITs for the gate before the lanes that read the table.

:func:`credit_local` says which WRs are the credit's own; :func:`check_gated` is the
verifier rule ``dispatch-gated``: every other worker or connection WR is released only
by ENABLEs that run after a WAIT for the gate.
"""

from __future__ import annotations

from kbtpsim.chains.ir import Addr, Chain, EdgeKind, Role, WrTemplate
from kbtpsim.chains.v2.belongs import target_ref
from kbtpsim.nic.wqe import Opcode

#: scratch the CPU writes while the chains run (the session octet in the request copy
#: ``ct`` and the arm words, the quota octets in the arm words: kbtpsim.chains.vocab)
_CPU_WRITTEN = ("buf:ct", "buf:arm")
#: the keys of a credit's own memory: its scratch and its WQEs
_OWN_KEYS = ("key:scratch", "key:rings")
#: the name of a WAIT for the credits before (the master's, or a sub-master's since C25)
GATE_WAIT = "wait_prev"


def credit_local(w: WrTemplate) -> bool:
    """``w`` reads and writes only its credit's own memory, none of it written by anyone
    but the request and the chain: a loopback Write into the credit's scratch or WQEs
    (a marker or a patch) whose condition and gathers read the request's octets, the
    receive's CQE or constants, not the table, the ring, the pool or the octets the CPU
    writes (session, quotas)."""
    if w.role is not Role.WORKER or w.opcode is not Opcode.RDMA_WRITE:
        return False
    rkey = w.fields.get("rkey")
    if not (isinstance(rkey, Addr) and rkey.ref in _OWN_KEYS):
        return False
    if any(not r.loc.startswith(("buf:", "wqe:")) or r.loc.startswith(_CPU_WRITTEN)
           for r in w.gather):
        return False
    cond = w.cond
    return cond is None or (cond.compare_source is None and cond.mask_source is None
                            and cond.word.loc.startswith(("buf:", "wqe:"))
                            and not cond.word.loc.startswith(_CPU_WRITTEN))


def _is_gate_wait(w: WrTemplate) -> bool:
    return (w.opcode is Opcode.WAIT and w.name.startswith(GATE_WAIT)
            and target_ref(w) == "cq:gate")


def _releasers(chain: Chain, name: str) -> list[str]:
    return [p for p, _, d in chain.graph.in_edges(name, data=True)
            if d["kind"] is EdgeKind.ENABLE and chain.wr(p).role is Role.MASTER]


def _gated(chain: Chain, enable: str, memo: dict[str, bool]) -> bool:
    """A master WR runs only after a gate WAIT: one precedes it on its queue, or every
    ENABLE that releases its queue (a sub-master's dispatch) is gated."""
    if enable in memo:
        return memo[enable]
    memo[enable] = False  # a cycle proves nothing
    seen, todo, ok = {enable}, [enable], False
    while todo and not ok:
        n = todo.pop()
        for p, _, d in chain.graph.in_edges(n, data=True):
            if d["kind"] is not EdgeKind.QP_ORDER or p in seen:
                continue
            seen.add(p)
            ok = _is_gate_wait(chain.wr(p))
            if ok:
                break
            todo.append(p)
    if not ok:  # the first of its queue: gated if whatever released that queue was
        first = [n for n in seen if not any(
            d["kind"] is EdgeKind.QP_ORDER for _, _, d in chain.graph.in_edges(n, data=True))]
        rel = [r for n in first for r in _releasers(chain, n)]
        ok = bool(rel) and all(_gated(chain, r, memo) for r in rel)
    memo[enable] = ok
    return ok


def check_gated(chain: Chain) -> list[str]:
    """Verifier rule ``dispatch-gated`` (module docstring): findings, empty if sound."""
    out: list[str] = []
    memo: dict[str, bool] = {}
    for w in chain.wrs():
        if w.role not in (Role.WORKER, Role.CONN) or credit_local(w):
            continue
        for e in _releasers(chain, w.name):
            if not _gated(chain, e, memo):
                out.append(f"dispatch-gated: {w.name} reads or changes the target's state "
                           f"but {e} releases it before the credits ahead of it passed the "
                           "gate (their requests may not have taken effect yet)")
                break
    return out


__all__ = ["GATE_WAIT", "check_gated", "credit_local"]
