"""Which variant a work request, a queue or a request belongs to (chains v2 with
per-operation dispatch, :mod:`.dispatch`): the dispatch pass, its verifier rules, the
advancers, the variant gates (:mod:`.vgates`) and the CPU all ask these."""

from __future__ import annotations

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.ir import Addr, Chain, CondSpec, Role, WrTemplate
from kbtpsim.chains.v2.lanes import lane_variant


class DispatchError(ValueError):
    """A chain that the dispatch pass cannot split (the message says why)."""


def variant_of(w: WrTemplate) -> str | None:
    """The variant a worker or connection WR belongs to (commit WRs by their name);
    None for the common part."""
    if w.part in VARIANTS:
        return w.part
    if w.part == "commit":
        base = w.name.split(".", 1)[0]
        for prefix in ("commit_", "release_"):
            if base.startswith(prefix) and base[len(prefix):] in VARIANTS:
                return base[len(prefix):]
        raise DispatchError(f"dispatch: commit WR {w.name!r} names no variant")
    return None


def target_ref(w: WrTemplate) -> str:
    """The queue or CQ a WAIT or ENABLE names (``qp:...``, ``cq:...``), else ""."""
    t = w.fields.get("target")
    return t.ref if isinstance(t, Addr) else ""


def is_private(ref: str) -> str | None:
    """The variant whose own queue a WAIT/ENABLE target ``ref`` names (its sub-master,
    lane, CQ, advancer or gate: C27), else None."""
    for kind in ("qp:master@", "qp:worker@", "cq:chain@", "qp:adv@", "qp:gate@"):
        if ref.startswith(kind):
            v = lane_variant(ref[len(kind):])
            return v if v in VARIANTS else None
    return None


def header_condition(chain: Chain, v: str) -> CondSpec:
    """Variant ``v``'s header marker condition (its test of version, opcode, flags), or
    the header test of a variant that has no header marker (``Chain.headers``: C21)."""
    if v in chain.headers:
        return chain.headers[v]
    found = [w.cond for w in chain.wrs() if w.part == v and w.cond is not None
             and w.cond.word.loc == "buf:hdr" and w.role is Role.WORKER
             and w.cond.mask[1] == 0xFF]  # the one that tests the opcode octet
    if len(found) != 1:
        raise DispatchError(f"dispatch: variant {v!r} has {len(found)} header markers, "
                            "not one")
    return found[0]


def exclusive(a: CondSpec, b: CondSpec) -> bool:
    """No word satisfies both conditions (some octet bit both test differs)."""
    return a.word.loc == b.word.loc and any(
        ma & mb & (ca ^ cb) for ca, cb, ma, mb in zip(a.compare, b.compare, a.mask, b.mask,
                                                      strict=True))


def holds(cond: CondSpec, word: bytes) -> bool:
    """``cond`` on the 8 octets ``word`` (what the NIC computes)."""
    return all(not ((w ^ c) & m) for w, c, m in zip(word, cond.compare, cond.mask,
                                                    strict=True))


def dispatched(conds: dict[str, CondSpec], header_word: bytes) -> str | None:
    """The variant a request with this header word is dispatched to, or None."""
    hit = [v for v, c in conds.items() if holds(c, header_word)]
    assert len(hit) <= 1, hit  # dispatch-exclusive
    return hit[0] if hit else None


__all__ = ["DispatchError", "dispatched", "exclusive", "header_condition", "holds",
           "is_private", "target_ref", "variant_of"]
