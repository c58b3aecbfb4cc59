"""The verifier's rule ``opportunistic`` (decision C31): a WR that may run before what it
tests is ordered to land, because running early can only make it do nothing.

An *opportunistic* WR names a ``twin`` (:attr:`~kbtpsim.chains.ir.WrTemplate.twin`): a
later WR of the chain with the same opcode, target and count, ordered as every WR is.
Its condition may read, unordered, the octets of request markers (conditional one-octet
Writes of a non-zero octet into its condition's window, every bit of which it tests
for that octet): the recycle segment restores those octets every round
(``recycle-restored``), so one not landed yet fails the test and the WR does nothing;
the twin then does the work. Everything else it reads must be ordered (a FENCE behind a
Read, as for any WR).

A release of the gate also promises the next credit that this credit's connection WRs
are patched: the next credit ENABLEs the connection QP past them. So every WR that
places into a connection WR of the variant must be ordered before the opportunistic WR,
or come, on the same QP, before a marker it tests (one QP's Writes are placed in order:
``placement="in_order"``, InfiniBand and RoCE; not under RDMAP's rules, RFC 5040 section
5.5, where the rule ``placement`` rejects loopback Writes anyway), or only clear bits of
a condition mask that the opportunistic WR's own test covers (then the connection WR's
test passes whenever it does, patched or not).
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

from kbtpsim.chains.ir import Addr, Chain, EdgeKind, Read, Role, WrTemplate
from kbtpsim.chains.violation import Violation
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.wqe import Opcode

RULE = "opportunistic"


def unordered_marker(chain: Chain, wr: WrTemplate, rd: Read, producer: str) -> bool:
    """``wr`` is opportunistic and ``producer`` a request marker whose octet its
    condition tests (``rd`` being its condition word): the read may be unordered."""
    c = wr.cond
    if wr.twin is None or c is None or rd is not c.word or producer not in chain:
        return False
    return _marker_octet(chain.wr(producer), wr) is not None


def _marker_octet(p: WrTemplate, wr: WrTemplate) -> int | None:
    """The octet of ``wr``'s condition window that marker ``p`` writes, if ``p`` is a
    conditional one-octet Write of a non-zero octet there and ``wr`` tests every bit of
    it for that octet; else None."""
    c = wr.cond
    r = p.fields.get("raddr")
    if (c is None or p.role is not Role.WORKER or p.opcode is not Opcode.RDMA_WRITE
            or p.cond is None or p.inline is None or len(p.inline) != 1
            or p.inline == b"\x00" or not isinstance(r, Addr)):
        return None
    loc, _, off = c.word.loc.partition("+")
    at = r.offset - (int(off) if off else 0)
    if r.ref != loc or not 0 <= at < 8 or c.mask[at] != 0xFF \
            or c.compare[at] != p.inline[0]:
        return None
    return at


def check_opportunistic(chain: Chain, profile: NicProfile,
                        ordered: Callable[[str, str], bool], out: list[Violation]) -> None:
    """Rule ``opportunistic`` (module docstring); ``ordered(producer, consumer)`` is the
    verifier's ordering test (rule ``placed-before-use``)."""
    g = chain.graph
    in_queue = nx.subgraph_view(g, filter_edge=lambda a, b: g.edges[a, b]["kind"]
                                is EdgeKind.QP_ORDER)
    for wr in chain.wrs():
        if wr.twin is None:
            continue
        twin = chain.wr(wr.twin) if wr.twin in chain else None
        if twin is None or twin.twin is not None or twin.opcode is not wr.opcode or any(
                twin.fields.get(k) != wr.fields.get(k) for k in ("target", "count")):
            out.append(Violation(
                wr.name, "twin", RULE,
                f"its twin {wr.twin!r} is not a WR of the chain with its opcode, target "
                "and count that is itself ordered: when a marker it tests has not landed, "
                "nothing does its work"))
            continue
        if wr.cond is None:
            out.append(Violation(wr.name, "cond", RULE, "an opportunistic WR without a "
                                 "condition does its work whatever it reads"))
            continue
        markers = [p for p in wr.cond.word.producers if p in chain
                   and _marker_octet(chain.wr(p), wr) is not None
                   and not ordered(p, wr.name)]
        if markers and profile.placement != "in_order":
            out.append(Violation(
                wr.name, "cond", RULE,
                f"under {profile.placement} placement a marker's landing does not imply "
                "that the Writes before it on its QP have landed"))
        if wr.opcode is not Opcode.ENABLE:
            continue
        conn = {w.name for w in chain.wrs() if w.role is Role.CONN and w.part == wr.part}
        for p in chain.wrs():
            if p.name == wr.name or not any(
                    pl.dest.startswith("wqe:") and pl.dest[4:].split(".")[0] in conn
                    for pl in p.places):
                continue
            if ordered(p.name, wr.name) or any(
                    chain.wr(m).lane == p.lane and nx.has_path(in_queue, p.name, m)
                    for m in markers) or _only_narrows(chain, p, wr, conn):
                continue
            out.append(Violation(
                wr.name, "cond", RULE,
                f"it releases before {p.name}, which patches a connection WR of "
                f"{wr.part}, is known to have landed: no marker it tests follows {p.name} "
                "on its QP, and nothing else orders the two"))


def _only_narrows(chain: Chain, p: WrTemplate, wr: WrTemplate, conn: set[str]) -> bool:
    """``p`` only clears bits of the condition mask of connection WRs that test the
    word ``wr`` tests, with the same compare, and no bit ``wr`` does not test: whenever
    ``wr``'s condition holds theirs holds too, patched or not (the LOAD's ALLOW_UNSEALED
    patches, which free the SEALED bit the early release requires: C31)."""
    c = wr.cond
    if c is None or p.inline is None:
        return False
    for pl in p.places:
        target = pl.dest[4:].split(".")[0]
        if not pl.dest.startswith("wqe:") or target not in conn:
            continue
        x = chain.wr(target).cond
        if (x is None or pl.dest != f"wqe:{target}.cond_mask" or x.mask_source is None
                or x.mask_source.producer != p.name or len(p.inline) != pl.length
                or x.word.loc != c.word.loc or x.compare != c.compare
                or any(xm & ~cm for xm, cm in zip(x.mask, c.mask, strict=True))):
            return False
        old = x.mask[pl.offset:pl.offset + pl.length]
        if len(old) != pl.length or any(n & ~o for n, o in zip(p.inline, old, strict=True)):
            return False
    return True


__all__ = ["RULE", "check_opportunistic", "unordered_marker"]
