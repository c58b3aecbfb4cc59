"""The chain verifier: reject a chain the NIC could not run correctly on a profile.

Rules (each violation is a :class:`Violation` naming the WR, the field and the rule):

``placed-before-use``
    A field or a memory read whose octets are placed by WR P at run time must be ordered
    after P: a path P -> consumer in the chain graph that is not made of ``qp_order`` edges
    alone (two WRs of one send queue execute in order, but a Read's data or an atomic's
    result may land after the next WR has started; only a fence, a completion or an
    ENABLE orders them).
``held-back``
    A WQE field placed at run time (self-modifying chain) must be held back until the
    placement lands: P's CQE counted by a WAIT, then an ENABLE of the consumer's
    *managed* QP. A fence orders execution, not WQE prefetch, so it is not enough.
``byte-order``
    A placed number must land in a field of the same byte order: WQE fields are in the
    profile's ``wqe_field_byte_order``; a placed condition operand must match the order of
    the word it is compared with.
``capability``
    Every feature the chain uses must be in the profile (``wait_enable``,
    ``masked_atomics``, ``native_conditional``, ``cas_on_wqe`` with ``wqe_checks`` off,
    a table key: ``indirect_keys="exp_umr"`` or the hypothetical ``strided_keys``,
    loopback QPs, ``max_sge``).
``consistency``
    A Placed source must name a producer that exists and declares that placement; a
    patched opcode octet must be an opcode with the posted WQE's segments.
``torn-read``
    An RDMA Read of the initiator's data may place it straight into a pool block only if
    it fits one packet (``profile.mtu``). A connection failure can cut a Read of several
    packets after some of them landed; its flushed CQE satisfies the WAITs behind it, and
    no salvage can restore the block's old octets, which the chain never saw (decision
    O5). The software target stages such a Read; the chains leave it to the CPU.
``staged-read``
    A WR that moves a Read-source store's staged data (``buf:rstg``) into target memory
    runs only if the Read completed: its condition's arm word has among its producers a
    marker on that Read's own CQE in the connection QP's CQ buffer (decision C24; chains
    v2 read a Read source of several packets into staging).
``guarded``
    A variant's effects (its connection-QP WRs: data movement, COMPLETION; its commit and
    release) run only if every request test of the variant passed: a conditional one
    tests the variant's arm word with every octet a marker writes there, or a word that
    only WRs so conditioned place, and request markers whose octet it tests (decision
    C15: the LOAD's data Write tests the entry its own Read placed, a Read that runs only
    on a full arm word, and the byte-count marker's octet beside it).
``opportunistic``
    An opportunistic WR (decision C31: the LOAD's early release behind its entry Read)
    may test request markers' octets before they are ordered to land, as long as a
    twin, ordered, does its work later, and its markers follow on their QPs every patch
    of the connection WRs its release lets run (:mod:`kbtpsim.chains.verify_opportunistic`).
``cas-armed``
    CAS-on-WQE (RedN; decision C5): a WR posted *disarmed* (a NOP) must be armed by a CAS
    on its control word (its ``ctrl_word`` field placed by the CAS, so ``held-back``
    applies: WAIT on the CAS's CQE, then ENABLE), and a CAS on a control word must name a
    disarmed WR of the chain. A CAS operand placed at run time (a compare value, an opcode
    patched into the swap value) is a WQE field compared or swapped octet for octet with
    the control word: ``byte-order`` requires the profile's WQE fields to be in its
    atomics' byte order, and the constants to be in the atomics' order
    (``atomic_word_order``). The CAS needs ``cas_on_wqe`` (``capability``).
"""

from __future__ import annotations

import re
from typing import Any

import networkx as nx

from kbtpsim.chains.ir import Addr, Chain, CondSpec, EdgeKind, Placed, Role, WrTemplate
from kbtpsim.chains.verify_landing import (
    _check_placement,
    _check_staged_reads,
    _check_torn_reads,
)
from kbtpsim.chains.verify_opportunistic import check_opportunistic, unordered_marker
from kbtpsim.chains.verify_readers import _check_readers
from kbtpsim.chains.violation import ChainRejected, Violation
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.wqe import Opcode, _segments

#: Size in octets of the WQE fields chains set (multi-octet ones are byte-order sensitive).
FIELD_SIZE = {
    "raddr": 8, "rkey": 4, "imm": 4, "sge0.addr": 8, "sge0.count": 4, "sge0.lkey": 4,
    "swap_add": 8, "compare": 8, "cond_compare": 8, "cond_mask": 8, "ctrl_word": 8, "qpn": 3,
    "opcode": 1,
}


#: What a FENCE waits for: earlier Reads and atomics of its send queue (not Writes).
FENCED = frozenset({Opcode.RDMA_READ, Opcode.CAS, Opcode.FETCH_ADD, Opcode.MASKED_CAS,
                    Opcode.MASKED_FETCH_ADD})


class _Reach:
    """Reachability in one chain's graph, for the placed-before-use rule: descendants
    and ancestors computed once per WR, the edges that order once per graph."""

    def __init__(self, g: nx.DiGraph) -> None:
        self.g = g
        self._after: dict[str, set[str]] = {}
        self._before: dict[str, set[str]] = {}
        #: the edges that order (every kind but ``qp_order``), by their tail
        self._ordering: dict[str, list[tuple[str, EdgeKind]]] = {}
        for a, b, k in g.edges(data="kind"):
            if k is not EdgeKind.QP_ORDER:
                self._ordering.setdefault(a, []).append((b, k))

    @staticmethod
    def _closure(adj: Any, start: str) -> set[str]:
        """``start`` and every node reachable from it along ``adj`` (a graph's ``succ``,
        or ``pred`` for its ancestors): ``nx.descendants`` and ``nx.ancestors`` cost
        more in networkx's dispatch than the walk itself."""
        seen = {start}
        todo = [start]
        while todo:
            for n in adj[todo.pop()]:
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    def ordered(self, producer: str, consumer: str) -> bool:
        """A path producer -> consumer with at least one edge that is not ``qp_order`` (a
        ``fence`` edge counts only for a Read or atomic producer: a fence does not wait
        for Writes)."""
        g = self.g
        after = self._after.get(producer)
        if after is None:  # producer and its descendants
            after = self._after[producer] = self._closure(g.succ, producer)
        before = self._before.get(consumer)
        if before is None:  # consumer and its ancestors
            before = self._before[consumer] = self._closure(g.pred, consumer)
        fence_ok = g.nodes[producer]["wr"].opcode in FENCED
        ordering = self._ordering
        for a in after:
            for b, k in ordering.get(a, ()):
                if b in before and (fence_ok or k is not EdgeKind.FENCE):
                    return True
        return False


def _held_back(chain: Chain, producer: str, consumer: str) -> bool:
    """WAIT counting producer's CQE, then (by any path) an ENABLE -> consumer edge."""
    g = chain.graph
    prod = chain.wr(producer)
    if prod.role is not Role.RECV and not prod.signaled:
        return False  # no CQE for a WAIT to count
    waits = [b for _, b in g.out_edges(producer)
             if g.edges[producer, b]["kind"] is EdgeKind.COMPLETION
             and chain.wr(b).opcode is Opcode.WAIT]
    enables = [a for a, _ in g.in_edges(consumer)
               if g.edges[a, consumer]["kind"] is EdgeKind.ENABLE]
    return any(nx.has_path(g, w, e) for w in waits for e in enables)


def _wr_of(dest: str) -> str:
    """The WR a ``wqe:WR.FIELD`` destination names (lowered WRs are ``X.cas...``)."""
    m = re.match(r"^wqe:([A-Za-z0-9_]+(?:\.cas\w*)?)", dest)
    return m.group(1) if m else dest[4:].split(".")[0]


def _check_placed(chain: Chain, wr: WrTemplate, fname: str, src: Placed,
                  profile: NicProfile, out: list[Violation]) -> None:
    if src.producer not in chain:
        out.append(Violation(wr.name, fname, "consistency",
                             f"producer {src.producer!r} is not in the chain"))
        return
    prod = chain.wr(src.producer)
    dest = f"wqe:{wr.name}.{fname}"
    swapped = fname == "ctrl_word" and prod.targets_ctrl and prod.arms == wr.name
    if not swapped and not any(p.dest == dest for p in prod.places):
        out.append(Violation(wr.name, fname, "consistency",
                             f"{src.producer} does not declare a placement into {dest}"))
    if not nx.has_path(chain.graph, src.producer, wr.name):
        out.append(Violation(wr.name, fname, "placed-before-use",
                             f"{src.what} is placed by {src.producer}, but nothing orders "
                             f"{wr.name} after it"))
    elif not _held_back(chain, src.producer, wr.name):
        out.append(Violation(
            wr.name, fname, "held-back",
            f"the WQE is modified at run time by {src.producer} but is not held back: it "
            f"needs WAIT on {src.producer}'s CQ then ENABLE of the {wr.role.value} QP "
            "(a fence or queue order does not stop WQE prefetch)"))
    size = FIELD_SIZE.get(re.sub(r"^sge\d+\.", "sge0.", fname), 8)
    wqe_order = profile.wqe_field_byte_order
    if src.order != "octets" and size > 1 and src.order != wqe_order:
        out.append(Violation(
            wr.name, fname, "byte-order",
            f"{src.what} is {src.order}-endian but {profile.name} WQE fields are "
            f"{wqe_order}-endian"))


def _check_opcode_patch(chain: Chain, wr: WrTemplate, src: Placed,
                        out: list[Violation]) -> None:
    """A patch of a WQE's opcode octet (e.g. SEND -> SEND_WITH_INVALIDATE, decision C9)
    writes one octet, a known opcode whose WQE has the same segments as the posted one
    (the WQE's ds and segment offsets are not patched)."""
    if src.producer not in chain or wr.opcode is None:
        return
    new = chain.wr(src.producer).inline
    op = Opcode(new[0]) if new is not None and len(new) == 1 and new[0] in set(Opcode) \
        else None
    cond = wr.cond is not None
    if op is None or _segments(op, cond, len(wr.gather), None) != _segments(
            wr.opcode, cond, len(wr.gather), None):
        out.append(Violation(
            wr.name, "opcode", "consistency",
            f"{src.producer} must write one octet, an opcode with the segments of "
            f"{wr.opcode.name} (got {new.hex() if new is not None else 'no inline octet'})"))


def _check_caps(chain: Chain, wr: WrTemplate, profile: NicProfile,
                out: list[Violation]) -> None:
    def need(flag: bool, fname: str, what: str, cap: str) -> None:
        if not flag:
            out.append(Violation(wr.name, fname, "capability",
                                 f"{what} needs '{cap}', which profile {profile.name} lacks"))

    op = wr.opcode
    if op in (Opcode.WAIT, Opcode.ENABLE):
        need(profile.wait_enable, "opcode", f"{op.name}", "wait_enable")
    if wr.role in (Role.WORKER, Role.CONN, Role.GATE) and any(
            chain.graph.edges[a, wr.name]["kind"] is EdgeKind.ENABLE
            for a, _ in chain.graph.in_edges(wr.name)):
        need(profile.wait_enable, "qp", f"a managed {wr.role.value} QP", "wait_enable")
    if op in (Opcode.MASKED_CAS, Opcode.MASKED_FETCH_ADD):
        need(profile.masked_atomics, "opcode",
             f"{op.name} (CAS-on-WQE: the condition compares octets under a mask that is "
             "not whole octets, e.g. free flag bits; no plain-CAS form, decision C5)"
             if wr.targets_ctrl else f"{op.name}", "masked_atomics")
    if wr.cond is not None:
        need(profile.native_conditional, "cond", f"conditional execution ({wr.cond.about})",
             "native_conditional")
    if wr.targets_ctrl:
        need(profile.cas_on_wqe, "ctrl_word", "an atomic on a WQE's control word",
             "cas_on_wqe")
        if profile.wqe_checks:
            out.append(Violation(
                wr.name, "ctrl_word", "capability",
                "CAS-on-WQE rewrites the control word's WQE-index octets (opmod_idx_opcode "
                f"holds compared data), which profile {profile.name}'s firmware checks "
                "against the posting index ('wqe_checks'; RedN disables these checks: "
                "conf/disable_wqe_checks.sh)"))
    if wr.remote_kind == "readers" and not profile.strided_keys:
        need(False, "rkey", "the reader counts' strided key (decision C20)", "strided_keys")
    if wr.remote_kind == "strided_table" and not profile.strided_keys:
        _check_table_key(wr, profile, out)
    if wr.role in (Role.WORKER, Role.MASTER, Role.GATE):
        need(profile.loopback, "qp", f"a loopback {wr.role.value} QP", "loopback")
    if wr.atomic_word_order not in (None, "octets") and \
            wr.atomic_word_order != profile.atomic_byte_order:
        out.append(Violation(
            wr.name, "swap_add", "byte-order",
            f"the CAS's constant operands are {wr.atomic_word_order}-endian words but "
            f"{profile.name} atomics are {profile.atomic_byte_order}-endian: it would "
            "compare the wrong octets of the control word" if wr.targets_ctrl else
            f"{op.name if op else 'atomic'} adds to a {wr.atomic_word_order}-endian word but "
            f"{profile.name} atomics are {profile.atomic_byte_order}-endian"))
    n_sge = len(wr.gather)
    if n_sge > profile.max_sge:
        out.append(Violation(wr.name, "sges", "capability",
                             f"{n_sge} SGEs exceed max_sge {profile.max_sge}"))


def _check_table_key(wr: WrTemplate, profile: NicProfile, out: list[Violation]) -> None:
    """The table-entry address from a scattered handle: TO ``h << 8`` must name entry
    ``h - base``. 16 * (h - base) is not an octet move (decision D4), so it takes a key
    whose layout strides: an interleaved UMR key that starts at TO ``base << 8``
    (``indirect_keys="exp_umr"``), or the hypothetical ``strided_keys``."""
    api = profile.indirect_keys
    if api == "exp_umr":
        return
    if api == "mlx5dv":
        out.append(Violation(
            wr.name, "rkey", "capability",
            "the table entry address from a scattered handle needs an interleaved key "
            "starting at TO Table Base Handle << 8, but an mlx5dv_wr_mr_interleaved key is "
            f"zero-based (mlx5dv_wr_post(3)), which profile {profile.name} has "
            "('indirect_keys'='mlx5dv')"))
        return
    out.append(Violation(
        wr.name, "rkey", "capability",
        "the table entry address from a scattered handle (16 * (h - base) is not an "
        "octet move, decision D4) needs an interleaved key ('indirect_keys') or "
        f"'strided_keys', which profile {profile.name} lacks"))


def _check_cas(chain: Chain, wr: WrTemplate, profile: NicProfile,
               out: list[Violation]) -> None:
    """Rule ``cas-armed`` and the byte orders of CAS-on-WQE operands (decision C5)."""
    if wr.disarmed:
        src = wr.fields.get("ctrl_word")
        if not (isinstance(src, Placed) and src.producer in chain
                and chain.wr(src.producer).targets_ctrl
                and chain.wr(src.producer).arms == wr.name):
            out.append(Violation(wr.name, "ctrl_word", "cas-armed",
                                 "posted disarmed (a NOP), but no CAS on its control word "
                                 "arms it: it can never run"))
    if not wr.targets_ctrl:
        return
    if wr.opcode not in (Opcode.CAS, Opcode.MASKED_CAS):
        out.append(Violation(wr.name, "opcode", "cas-armed",
                             "only a CAS can arm a WQE (compare its control word, swap "
                             "the live one in)"))
    target = wr.arms
    if target is None or target not in chain or not chain.wr(target).disarmed:
        out.append(Violation(wr.name, "raddr", "cas-armed",
                             f"a CAS on a control word must arm a disarmed WR of the chain "
                             f"(names {target!r})"))
    elif not nx.has_path(chain.graph, wr.name, target):
        out.append(Violation(target, "ctrl_word", "held-back",
                             f"armed by {wr.name}, but nothing orders it after the CAS"))
    swap = wr.fields.get("swap_add")
    if isinstance(swap, Placed) and target is not None and target in chain:
        _check_opcode_patch(chain, chain.wr(target), swap, out)  # an opcode in the swap
    wo, ao = profile.wqe_field_byte_order, profile.atomic_byte_order
    for fname in ("compare", "swap_add"):
        src = wr.fields.get(fname)
        if isinstance(src, Placed) and wo != ao:
            out.append(Violation(
                wr.name, fname, "byte-order",
                f"{src.what} is placed into the CAS's {fname} operand, a WQE field "
                f"({profile.name}: {wo}-endian) the NIC compares or swaps as a "
                f"{ao}-endian word with the control word: octets would not line up"))
    cond = wr.cas_cond
    if cond is not None and cond.compare_source is not None:
        _check_compare_order(wr, "compare", cond, "a CAS compares octets", out)


def _check_compare_order(wr: WrTemplate, field: str, cond: CondSpec, who: str,
                         out: list[Violation]) -> None:
    """A run-time compare value must be in the byte order of the word it is compared
    with: a compare is of octets, nothing swaps them."""
    cs = cond.compare_source
    assert cs is not None
    if "octets" not in (cs.order, cond.word_order) and cs.order != cond.word_order:
        out.append(Violation(
            wr.name, field, "byte-order",
            f"{cs.what} is {cs.order}-endian but is compared with "
            f"{cond.word.about or cond.word.loc}, which is {cond.word_order}-endian "
            f"({who}, it cannot swap them)"))


def verify(chain: Chain, profile: NicProfile) -> list[Violation]:
    """Every rule ``chain`` breaks on ``profile`` (an empty list: the chain is sound)."""
    out: list[Violation] = []
    reach = _Reach(chain.graph)
    for wr in chain.wrs():
        _check_caps(chain, wr, profile, out)
        if wr.opcode in (Opcode.CAS, Opcode.FETCH_ADD, Opcode.MASKED_CAS,
                         Opcode.MASKED_FETCH_ADD) and (
                len(wr.places) != 1 or wr.places[0].length != 8):
            out.append(Violation(wr.name, "sges", "consistency",
                                 "an atomic returns 8 octets to exactly one place"))
        for place in wr.places:
            if place.dest.startswith("wqe:") and _wr_of(place.dest) not in chain:
                out.append(Violation(wr.name, place.dest, "consistency",
                                     "places octets into a WR that is not in the chain"))
        for fname, src in wr.fields.items():
            if isinstance(src, Placed):
                _check_placed(chain, wr, fname, src, profile, out)
                if fname == "opcode":
                    _check_opcode_patch(chain, wr, src, out)
        _check_cas(chain, wr, profile, out)
        reads = list(wr.gather) + list(wr.reads)
        if wr.cond is not None:
            reads.append(wr.cond.word)
        for rd in reads:
            for p in rd.producers:
                if p not in chain:
                    out.append(Violation(wr.name, rd.loc, "consistency",
                                         f"producer {p!r} is not in the chain"))
                elif not reach.ordered(p, wr.name) and \
                        not unordered_marker(chain, wr, rd, p):  # C31
                    out.append(Violation(
                        wr.name, rd.loc, "placed-before-use",
                        f"{wr.name} reads {rd.loc} ({rd.about or 'data'}) at execution, "
                        f"but it is placed by {p} and no WAIT, ENABLE or fence orders "
                        "the two"))
        cond = wr.cond
        if cond is not None and (len(cond.compare) != 8 or len(cond.mask) != 8):
            out.append(Violation(wr.name, "cond", "consistency",
                                 "a condition compares 8 octets: compare and mask must be 8 "
                                 "octets (shorter ones land in the wrong octets on one of "
                                 "the byte orders)"))
        if cond is not None and cond.compare_source is not None:
            cs = cond.compare_source
            _check_placed(chain, wr, "cond_compare", cs, profile, out)
            _check_compare_order(wr, "cond_compare", cond, "a condition compares octets",
                                 out)
        if cond is not None and cond.mask_source is not None:
            _check_placed(chain, wr, "cond_mask", cond.mask_source, profile, out)
    check_opportunistic(chain, profile, reach.ordered, out)
    _check_placement(chain, profile, out)
    _check_torn_reads(chain, profile, out)
    _check_staged_reads(chain, out)
    _check_guarded(chain, out)
    _check_readers(chain, out)
    return out


def _request_derived(chain: Chain, name: str) -> bool:
    """``name`` places octets of the request only: the receive, or an unconditional WR
    that gathers only such octets (the byte-count copy)."""
    w = chain.wr(name)
    if w.role is Role.RECV:
        return True
    return (w.cond is None and bool(w.gather) and all(
        p in chain and p != name and _request_derived(chain, p)
        for r in w.gather for p in r.producers))


def _request_octets(chain: Chain) -> dict[str, set[int]]:
    """Per arm word (``buf:arm_V``), the octets the markers of request tests write (at
    fixed places; an alternative marker's patched place is not one)."""
    out: dict[str, set[int]] = {}
    for w in chain.wrs():
        r = w.fields.get("raddr")
        if (w.role is Role.WORKER and w.opcode is Opcode.RDMA_WRITE and w.cond is not None
                and isinstance(r, Addr) and r.ref.startswith("buf:arm_")
                and w.cond.word.producers and all(
                    p in chain and _request_derived(chain, p)
                    for p in w.cond.word.producers)):
            out.setdefault(r.ref, set()).add(r.offset)
    return out


def _tested_marker(chain: Chain, p: WrTemplate, test: CondSpec) -> bool:
    """``p`` is a request marker (a conditional inline Write testing octets of the
    request only) whose octet lies in ``test``'s window, every bit of it tested."""
    r = p.fields.get("raddr")
    if not (p.role is Role.WORKER and p.opcode is Opcode.RDMA_WRITE and p.cond is not None
            and p.inline is not None and len(p.inline) == 1 and isinstance(r, Addr)
            and p.cond.word.producers and all(q in chain and _request_derived(chain, q)
                                              for q in p.cond.word.producers)):
        return False
    loc, _, off = test.word.loc.partition("+")
    at = r.offset - (int(off) if off else 0)
    return r.ref == loc and 0 <= at < 8 and test.mask[at] == 0xFF


def _on_second_arm(p: WrTemplate) -> bool:
    """``p`` is conditional on octet 0 of a second arm word (``arm2_V``), the fold of
    the variant's first arm word (ALLOC_STORE, FREE): as an effect conditional on such a
    word is (decision C20: the FREE's slot writes, Send and commit test the slot's Block
    Offset that a Read conditional on it placed)."""
    return (p.cond is not None and p.cond.word.loc.startswith("buf:arm2_")
            and p.cond.mask[0] == 0xFF)


def _request_marker(chain: Chain, p: WrTemplate) -> bool:
    """``p`` is a request marker: a conditional one-octet inline Write into a scratch
    buffer, testing octets of the request only."""
    r = p.fields.get("raddr")
    return (p.role is Role.WORKER and p.opcode is Opcode.RDMA_WRITE and p.cond is not None
            and p.inline is not None and len(p.inline) == 1 and isinstance(r, Addr)
            and r.ref.startswith("buf:") and bool(p.cond.word.producers)
            and all(q in chain and _request_derived(chain, q) for q in p.cond.word.producers))


def _own_word(chain: Chain, test: CondSpec, producers: list[WrTemplate]) -> set[str]:
    """Decision C21 (the two-step LOAD): the producers of ``test``'s word that are
    themselves conditional on a request test only (the entry Read, on its handle range)
    and whose variant's every request marker writes its octet into ``test``'s window,
    every bit tested. What such a producer places cannot pass the test unless every
    request marker of its variant passed too (a Read that did not run leaves the word's
    sentinel, which fails the test: tests/chains/v2/test_load_recv.py)."""
    out: set[str] = set()
    for p in producers:
        if _request_marker(chain, p) or p.cond is None or not p.cond.word.producers \
                or not all(q in chain and _request_derived(chain, q)
                           for q in p.cond.word.producers):
            continue
        markers = [m for m in chain.wrs() if m.part == p.part and _request_marker(chain, m)]
        if markers and all(_tested_marker(chain, m, test) for m in markers):
            out.add(p.name)
    return out


def _check_guarded(chain: Chain, out: list[Violation]) -> None:
    """Rule ``guarded``: an effect of a variant (a connection-QP WR, its commit or
    release) conditional on a data word rather than on an arm word (decision C15: the
    LOAD's data Write tests the entry its own Read placed) runs only if every WR placing
    that word is conditional on the variant's arm word with every request test's octet,
    or is itself a request marker whose octet the effect tests."""
    arms = _request_octets(chain)
    for w in chain.wrs():
        effect = w.role is Role.CONN or (w.part == "commit" and w.role is Role.WORKER)
        if not effect or w.cond is None or w.cond.word.loc.startswith(("buf:arm", "wqe:")):
            continue
        producers = [chain.wr(p) for p in w.cond.word.producers if p in chain]
        own = _own_word(chain, w.cond, producers)
        bad = [p.name for p in producers if not _tested_marker(chain, p, w.cond)
               and not _on_second_arm(p) and p.name not in own and (
               p.cond is None or p.cond.word.loc not in arms
               or any(p.cond.mask[i] != 0xFF for i in arms[p.cond.word.loc]))]
        if bad or not producers:
            out.append(Violation(
                w.name, "cond", "guarded",
                f"{w.name} tests {w.cond.word.loc} ({w.cond.about}), which "
                + (f"{', '.join(bad)} place{'s' if len(bad) == 1 else ''} without "
                   "testing every request marker of an arm word" if bad
                   else "no WR places")
                + ": the request's tests do not all hold back its effect"))


def check(chain: Chain, profile: NicProfile) -> None:
    """Raise :class:`ChainRejected` if :func:`verify` finds anything."""
    violations = verify(chain, profile)
    if violations:
        raise ChainRejected(chain.name, profile.name, violations)
