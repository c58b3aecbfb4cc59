"""The verifier's rule ``readers`` (decision C20): where a chain serves FREE, the reader
count's Dekker pair between the LOAD and the FREE is whole (:func:`_check_readers`)."""

from __future__ import annotations

from kbtpsim.chains.ir import Addr, Chain, Const, Role, WrTemplate
from kbtpsim.chains.lowering import M64
from kbtpsim.chains.violation import Violation
from kbtpsim.nic.wqe import Opcode


def _key_ref(wr: WrTemplate) -> str:
    rkey = wr.fields.get("rkey")
    return rkey.ref if isinstance(rkey, Addr) else ""


def _const(wr: WrTemplate, field: str) -> int | None:
    src = wr.fields.get(field)
    return src.value if isinstance(src, Const) and isinstance(src.value, int) else None


def _check_readers(chain: Chain, out: list[Violation]) -> None:
    """Rule ``readers`` (decision C20): a FREE on the NIC returns a block only if no LOAD
    can still read it, a Dekker pair on the NIC's atomic unit. So, where the chain serves
    FREE: the LOAD raises its handle's reader count by 1 with a FetchAdd on the same QP
    as its entry Read and before it, lowers it by 1 after its data Write, under the same
    condition; and the FREE reads the count on its unbind's QP, in a later step."""
    wrs = list(chain.wrs())
    pos = {w.name: i for i, w in enumerate(wrs)}
    if not any(w.part == "free" for w in wrs):
        return
    counts = [w for w in wrs if _key_ref(w) == "key:readers"]
    for read in (w for w in wrs if w.part == "load" and w.opcode is Opcode.RDMA_READ
                 and w.remote_kind == "strided_table"):
        up = [w for w in counts if w.part == "load" and w.opcode is Opcode.FETCH_ADD
              and _const(w, "swap_add") == 1 and w.lane == read.lane
              and (w.step, pos[w.name]) < (read.step, pos[read.name])]
        if not up:
            out.append(Violation(read.name, "readers", "readers",
                                 "the chain serves FREE, but this LOAD's entry Read has no "
                                 "FetchAdd + 1 on the handle's reader count before it on "
                                 "its QP: a FREE could return the block it reads"))
            continue
        data = [w.step for w in wrs if w.part == "load" and w.role is Role.CONN]
        down = [w for w in counts if w.part == "load" and w.opcode is Opcode.FETCH_ADD
                and _const(w, "swap_add") == M64 and w.step > max(data, default=0)
                and w.cond == up[0].cond]
        if not down:
            out.append(Violation(up[0].name, "readers", "readers",
                                 "the LOAD raises its reader count but no FetchAdd - 1 "
                                 "under the same condition follows its data Write"))
    unbinds = [w for w in wrs if w.part == "free" and w.remote_kind == "strided_table"
               and w.opcode is Opcode.MASKED_FETCH_ADD]
    for rd in (w for w in counts if w.part == "free" and w.opcode is Opcode.RDMA_READ):
        if not unbinds or any(u.lane != rd.lane or u.step >= rd.step for u in unbinds):
            out.append(Violation(rd.name, "readers", "readers",
                                 "the FREE reads the reader count, but not on its unbind's "
                                 "QP in a later step: a LOAD could read the entry before "
                                 "the unbind and raise the count after this Read"))


__all__ = ["_check_readers"]
