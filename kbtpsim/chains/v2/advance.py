"""Advancers (chains v2 with per-operation dispatch, :mod:`.dispatch`): per credit slot
and variant, a managed loopback QP whose FetchAdds add one round of the variant to every
WAIT/ENABLE count that names the variant's own queues (its sub-master, lane, CQ and the
advancer itself). The variant's sub-master ENABLEs it as its last WR, so the counts
advance only in the rounds the variant ran, after the WRs they sit in ran; the slot's
recycle segment (:mod:`.recycle`) advances every other count, every round. Posted once,
at set-up, like the recycle segments; rule ``dispatch-advanced`` checks them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kbtpsim.chains.post import ROLE_BITS
from kbtpsim.chains.v2.dispatch import is_private
from kbtpsim.chains.v2.recycle import CountField
from kbtpsim.nic import Sge, WorkRequest, WqeFlags
from kbtpsim.nic.wqe import Opcode, field_layout

if TYPE_CHECKING:
    from kbtpsim.chains.v2.server import RecyclingChainServer

#: low bits of an advancer FetchAdd's wr_id (beside the templates' positions)
ADVANCE_POSITION = 0x3FFD
#: a deliberate bug (kbtpsim.oracle.mutants): changes the advancers' counts by variant
AdvanceHook = Callable[[dict[str, list[CountField]]], None]


def by_variant(private: list[CountField]) -> dict[str, list[CountField]]:
    """The counts naming a variant's own queues, by variant."""
    out: dict[str, list[CountField]] = {}
    for c in private:
        v = is_private(c.target.split("#", 1)[0])
        assert v is not None, c
        out.setdefault(v, []).append(c)
    return out


def post_advancers(server: RecyclingChainServer, s: int,
                   hook: AdvanceHook | None = None) -> list[str]:
    """Post credit slot ``s``'s advancers on ``server``; returns the findings of rule
    ``dispatch-advanced`` (then nothing is posted). ``hook`` (a mutant) changes the
    counts first, which are then posted unverified (O4)."""
    private = server._slots[s].private
    counts = by_variant(private)
    if hook is not None:
        hook(counts)
    else:
        found = check_advance(counts, private, server.adv_wrs)
        if found:
            return found
    qps = server.queues()
    shift = 32 if server.nic.profile.atomic_byte_order == "big" else 0
    for v, adv in server.advancers[s].items():
        for c in counts.get(v, []):
            q = qps[c.qp]
            off = field_layout(q.posted[c.index % q.sq_depth])["wait_index"][0]
            adv.post_send(WorkRequest(
                Opcode.FETCH_ADD, (Sge(server.sink_addr, 8, server.sink.lkey),),
                WqeFlags.SIGNALED, remote_addr=q.wqe_addr(c.index) + off,
                rkey=q.sq_mr.rkey, swap_add=c.delta << shift,
                wr_id=s << ROLE_BITS | ADVANCE_POSITION))
    return []


def check_advance(by_variant: dict[str, list[CountField]], private: list[CountField],
                  sizes: dict[str, int]) -> list[str]:
    """Verifier rule ``dispatch-advanced`` (per-operation dispatch,
    :mod:`kbtpsim.chains.v2.dispatch`): each variant's advancer advances every count
    that names the variant's own queues (``private``, with the advance one round of the
    variant needs) exactly once, by that round, and nothing else; and it has as many WRs
    as its sub-master's ENABLE of it releases (``sizes``)."""
    out: list[str] = []
    want = {(c.qp, c.index): c for c in private}
    seen: dict[tuple[str, int], int] = {}
    for v, counts in sorted(by_variant.items()):
        if len(counts) != sizes.get(v, -1):
            out.append(f"dispatch-advanced: {v}'s advancer has {len(counts)} WRs, its "
                       f"ENABLE releases {sizes.get(v)}")
        for c in counts:
            key = (c.qp, c.index)
            seen[key] = seen.get(key, 0) + 1
            if key not in want:
                out.append(f"dispatch-advanced: {v}'s advancer advances {c.qp}#{c.index}, "
                           "no count of its own queues")
            elif c.delta != want[key].delta:
                out.append(f"dispatch-advanced: {c.qp}#{c.index} {c.opcode} {c.target}: "
                           f"advanced by {c.delta}, one {v} round is {want[key].delta}")
    for key, c in want.items():
        if seen.get(key, 0) != 1:
            out.append(f"dispatch-advanced: {c.qp}#{c.index} {c.opcode} {c.target} is "
                       f"advanced {seen.get(key, 0)} times a round of its variant, not "
                       "once (its next run waits for too few CQEs, or stops short)")
    return out


__all__ = ["ADVANCE_POSITION", "AdvanceHook", "by_variant", "check_advance", "post_advancers"]
