"""Deliberate chain bugs: the transformations the mutants (:mod:`kbtpsim.oracle.mutants`)
apply to the compiled per-credit chain, to chains v2's recycle plan (through
:class:`~kbtpsim.oracle.node.V2Mutation`) or to its advancers' counts.

Every transformation finds the WRs it changes by name pattern, role, part, opcode and
remote kind, never by position, and raises :class:`MutantNotApplicable` when the chain
has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.ir import Addr, Chain, Const, Read, Role, WrTemplate
from kbtpsim.chains.v2.recycle import CountField, RecyclePlan
from kbtpsim.nic.wqe import Opcode


class MutantNotApplicable(ValueError):
    """The chain has no WR the mutant changes (e.g. no ALLOC_STORE variant)."""


def _wrs(chain: Chain, pred: Callable[[WrTemplate], bool]) -> list[WrTemplate]:
    return [w for w in chain.wrs() if pred(w)]


def _need(found: list[WrTemplate], what: str) -> list[WrTemplate]:
    if not found:
        raise MutantNotApplicable(f"no {what} in the chain")
    return found


def _always(w: WrTemplate) -> None:
    """Make ``w``'s condition always true (mask 0), keeping its (maybe placed) operands."""
    assert w.cond is not None
    w.cond = replace(w.cond, mask=bytes(8))


def _entry_read(chain: Chain) -> WrTemplate:
    return _need(_wrs(chain, lambda w: w.part == "dispatch" and w.opcode is Opcode.RDMA_READ
                      and w.remote_kind == "strided_table"), "table-entry Read")[0]


def drop_wait(chain: Chain) -> None:
    """Drop the master's WAIT that holds LOAD's data Write back until the entry's Block
    Offset has been patched into it (rule held-back): its WQE may be fetched with a stale
    local address."""
    write = _need(_wrs(chain, lambda w: w.part == "load" and w.role is Role.CONN
                       and w.opcode is Opcode.RDMA_WRITE), "LOAD data Write")[0]
    waits = _need(_wrs(chain, lambda w: w.role is Role.MASTER and w.opcode is Opcode.WAIT
                       and w.step == write.step - 1 and isinstance(w.fields.get("target"), Addr)
                       and w.fields["target"].ref == "cq:chain"),  # type: ignore[union-attr]
                  "WAIT before the LOAD data Write")
    chain.graph.remove_node(waits[0].name)


def _alloc_wr(w: WrTemplate) -> bool:
    return VARIANTS.get(w.part) is not None and VARIANTS[w.part].op == "ALLOC_STORE"


def skip_sequence(chain: Chain) -> None:
    """ALLOC_STORE without the slot test: the slot's Sequence is not compared with the
    ticket, and a consumed slot (Block Offset all ones) is not noticed (its marker writes
    the octet it should clear)."""
    for w in _need(_wrs(chain, lambda w: w.cond is not None
                        and w.cond.compare_source is not None and _alloc_wr(w)),
                   "Sequence marker"):
        _always(w)
    for w in _need(_wrs(chain, lambda w: _alloc_wr(w) and w.name.endswith("_consumed")),
                   "consumed-slot marker"):
        w.inline = b"\x01"


def byte_order(chain: Chain) -> None:
    """The handle scattered into the entry Read's remote address in the wrong byte order
    (the other order's octets and shift)."""
    read = _entry_read(chain)
    dest = f"wqe:{read.name}.raddr"
    p = _need(_wrs(chain, lambda w: w.role is Role.WORKER and any(
        pl.dest == dest for pl in w.places)), "handle patch")[0]
    (g,) = p.gather
    flipped = "buf:ct+13" if g.loc == "buf:ct+12" else "buf:ct+12"
    p.gather = (replace(g, loc=flipped),)
    raddr = p.fields["raddr"]
    assert isinstance(raddr, Addr)
    p.fields["raddr"] = Addr(raddr.ref, 1 - raddr.offset)


def swap_length_offset(chain: Chain) -> None:
    """Every COMPLETION Send gathers the Block Offset where Data Length goes and vice
    versa."""
    sends = _need(_wrs(chain, lambda w: w.role is Role.CONN and w.opcode is Opcode.SEND),
                  "COMPLETION Send")
    for w in sends:
        g = list(w.gather)
        k = next((i for i, r in enumerate(g) if r.loc == "buf:w_load"), None)
        if k is not None and len(g) < 5:  # C15's LOAD: Generation, Status, Data Length
            gs = replace(g[k], length=4, about="entry Generation, Status OK")
            dl = replace(g[k], loc="buf:w_load+4", length=4, about="entry Data Length")
            w.gather = (*g[:k], gs, *g[k + 1:], dl)
            continue
        if k is not None:  # C21's (the handle in two pieces; a WQE holds five): the
            # Block Offset where Data Length and reserved go, Data Length and the next
            # four octets where the Block Offset goes
            gs = replace(g[k], length=4, about="entry Generation, Status OK")
            dl = replace(g[k], loc="buf:w_load+4", length=8, about="entry Data Length")
            w.gather = (*g[:k], gs, g[-1], dl)
            continue
        st = next((i for i, r in enumerate(g) if r.loc == "buf:k_st_bs"), None)
        if st is not None:  # C21: Status and Data Length in one piece
            w.gather = (*g[:st], g[-1], *g[st:-1])
            continue
        i = next(k for k, r in enumerate(g) if r.length == 4 and "Data Length" in r.about)
        j = next(k for k, r in enumerate(g) if r.length == 12)
        g[i], g[j] = g[j], g[i]
        w.gather = tuple(g)


def complete_early(chain: Chain) -> None:
    """LOAD: the COMPLETION Send is posted before the data Write on the connection QP (in
    the Write's step, under the Write's condition: before the entry's re-read)."""
    part = [w for w in chain.wrs() if w.part == "load" and w.role is Role.CONN]
    write = _need([w for w in part if w.opcode is Opcode.RDMA_WRITE], "LOAD data Write")[0]
    send = _need([w for w in part if w.opcode is Opcode.SEND], "LOAD Send")[0]
    if send.step != write.step:  # move the Send into the Write's step (seqlock chains);
        # the ENABLE of its old step still names it: it then enables nothing new
        send.step, send.cond = write.step, write.cond
        rest = [w for w in chain.wrs() if w.step == send.step and w.role is Role.CONN
                and w.name != send.name]
        _move_last(chain, send.name)
        for w in rest:  # keep the step's other WRs after the Send
            _move_last(chain, w.name)

    def last() -> str:
        return [w for w in chain.wrs() if w.step == write.step and w.role is Role.CONN][-1].name

    old_last = last()
    g = chain.graph
    attrs = dict(g.nodes[write.name])
    ins = [(a, d) for a, _, d in g.in_edges(write.name, data=True)]
    outs = [(b, d) for _, b, d in g.out_edges(write.name, data=True)]
    g.remove_node(write.name)  # re-insert: queue order is insertion order within a step
    g.add_node(write.name, **attrs)
    for a, d in ins:
        g.add_edge(a, write.name, **d)
    for b, d in outs:
        g.add_edge(write.name, b, **d)
    new_last = last()
    for w in chain.wrs():  # the step's ENABLE still releases all of the step
        c = w.fields.get("count")
        if w.opcode is Opcode.ENABLE and isinstance(c, Addr) and c.ref == f"wr:{old_last}":
            w.fields["count"] = Addr(f"wr:{new_last}", c.offset)


def _move_last(chain: Chain, name: str) -> None:
    """Re-insert WR ``name`` (queue order within a step is insertion order)."""
    g = chain.graph
    attrs = dict(g.nodes[name])
    ins = [(a, d) for a, _, d in g.in_edges(name, data=True)]
    outs = [(b, d) for _, b, d in g.out_edges(name, data=True)]
    g.remove_node(name)
    g.add_node(name, **attrs)
    for a, d in ins:
        g.add_edge(a, name, **d)
    for b, d in outs:
        g.add_edge(name, b, **d)


def skip_consume(chain: Chain) -> None:
    """ALLOC_STORE: the slot is written back unchanged instead of marked consumed (its
    Block Offset is not replaced by all ones)."""
    for w in _need(_wrs(chain, lambda w: VARIANTS.get(w.part) is not None
                        and VARIANTS[w.part].op == "ALLOC_STORE"
                        and w.opcode is Opcode.RDMA_WRITE and w.remote_kind == "ring"),
                   "slot consume Write"):
        w.gather = tuple(Read("buf:bo2+4", 8, r.producers, "slot Block Offset (unchanged)")
                         if r.loc == "buf:k_ones" else r for r in w.gather)


def skip_generation(chain: Chain) -> None:
    """The request's Generation is not tested (nor its Status): a stale Generation is
    served."""
    for w in _need(_wrs(chain, lambda w: w.cond is not None
                        and w.cond.word.loc == "buf:ct+20"), "Generation marker"):
        _always(w)


def skip_sealed(chain: Chain) -> None:
    """STORE: the entry's SEALED flag is not tested: a sealed block is overwritten."""
    found = _need(_wrs(chain, lambda w: w.part in ("store_inline", "store_read")
                       and w.cond is not None and w.cond.word.loc == "buf:w"),
                  "STORE entry marker")
    for w in found:
        assert w.cond is not None
        mask = bytearray(w.cond.mask)
        mask[1] &= ~0x02  # Flags octet 1: SEALED (0x0002) no longer tested
        w.cond = replace(w.cond, mask=bytes(mask))


def v2_load_skip_sealed(chain: Chain) -> None:
    """Chains v2's direct LOAD (decision C15): the ALLOW_UNSEALED redirect runs whatever
    the request's Flags, so an unsealed block is loaded without ALLOW_UNSEALED (C21: the
    patches freeing the SEALED bit of the tests run whatever the Flags)."""
    for w in _need(_wrs(chain, lambda w: w.name == "c_au_load" or w.name.startswith(
            "p_au_")), "direct LOAD's redirect (C15) or mask patches (C21)"):
        _always(w)


def v2_load_skip_entry(chain: Chain) -> None:
    """Chains v2's direct LOAD (decision C15): the data Write, the COMPLETION, the
    commit and the release test the entry's Data Length only, not its Flags: an entry
    that is not VALID is loaded."""
    for w in _need(_wrs(chain, lambda w: w.cond is not None
                        and w.cond.word.loc == "buf:w_load+5"), "direct LOAD entry test"):
        assert w.cond is not None
        if "c_au_load" in chain:  # C15: not A, B
            w.cond = replace(w.cond, mask=b"\xff" * 3 + bytes(4) + b"\xff")
        else:  # C21: not the Flags (the markers' octets and the session stay tested)
            w.cond = replace(w.cond, mask=b"\xff" * 3 + bytes(2) + b"\xff" * 3,
                             mask_source=None)


def v2_load_recv_top(chain: Chain) -> None:
    """Chains v2's two-step LOAD (decision C21): its Generation/Status marker does not
    test the handle's top octet, which the entry Read's address leaves out, so a handle
    differing from a bound one only there is served that one's block."""
    for w in _need(_wrs(chain, lambda w: w.name == "m_load_gs" and "load" in chain.headers),
                   "two-step LOAD's Generation marker"):
        assert w.cond is not None
        w.cond = replace(w.cond, mask=b"\x00" + w.cond.mask[1:])


def v2_load_recv_unguarded(chain: Chain) -> None:
    """Chains v2's two-step LOAD (decision C21): its entry Read runs whatever the handle,
    so a handle outside the table's block makes it read outside the table's key."""
    for w in _need(_wrs(chain, lambda w: w.name == "load_read" and "load" in chain.headers),
                   "two-step LOAD's entry Read"):
        _always(w)


def v2_early_unsealed(chain: Chain) -> None:
    """Chains v2 pipelining (decision C16): the LOAD releases the next credit early
    whenever its data Write runs, also for an unsealed block delivered with
    ALLOW_UNSEALED, whose owner's next STORE may then overwrite it under the Write."""
    for w in _need(_wrs(chain, lambda w: w.name == "early_load"), "the early release"):
        cond = chain.wr("load_write").cond
        assert cond is not None
        if cond.mask_source is not None:  # C21: ALLOW_UNSEALED frees the SEALED bit of
            mask = bytearray(cond.mask)  # the Write's test at run time; here always
            mask[4] = 0xFD
            cond = replace(cond, mask=bytes(mask), mask_source=None)
        w.cond = cond


def v2_early_unguarded(chain: Chain) -> None:
    """Chains v2 pipelining (decision C31): the LOAD's opportunistic release behind its
    entry Read ignores the request markers it tests (its condition always holds), so it
    releases the next credit also for a LOAD the CPU will answer, whose COMPLETION then
    comes after the next request's."""
    for w in _need(_wrs(chain, lambda w: w.name == "early_load"), "the early release"):
        _always(w)


def v2_early_always(chain: Chain) -> None:
    """Chains v2 pipelining (decision C19): an ALLOC_STORE or STORE releases the next
    credit early whether or not the NIC served it (a hand-over to the CPU included), so
    a later request of the connection runs before the CPU has served it."""
    for w in _need(_wrs(chain, lambda w: w.name.startswith(("early_alloc", "early_store"))),
                   "the ALLOC_STORE's and STORE's early releases"):
        _always(w)


def v2_staged_unchecked(chain: Chain) -> None:
    """Chains v2's staged Read source (decision C24): the marker that the data Read's CQE
    shows no error holds whatever the CQE says, so the copy into the block also runs
    after a Read that a connection failure cut."""
    for w in _need(_wrs(chain, lambda w: w.name.endswith("_rdok")), "staged-Read marker"):
        _always(w)


def v2_alloc_genwrap(chain: Chain) -> None:
    """Chains v2's ALLOC_STORE (decision C18): the Generation marker tests 0xFFFE instead
    of 0xFFFF, so an allocation of an entry at 0xFFFF runs on the NIC and binds
    Generation 0 (draft, "Generation": never 0)."""
    for w in _need(_wrs(chain, lambda w: w.name.endswith("_genwrap")), "Generation marker"):
        assert w.cond is not None
        w.cond = replace(w.cond, compare=w.cond.compare[:3] + b"\xfe" + w.cond.compare[4:])


def alloc_shared_oldw(chain: Chain) -> None:
    """ALLOC_STORE's skip-0 add reads one word that both ALLOC_STORE variants' Generation
    adds write (the bug the generation-wrap interleaving found): with every variant's
    WRs run for every request (chains v1), an allocation at Generation 0xFFFF is skipped
    past 0 twice, to 2."""
    for w in _need(_wrs(chain, lambda w: w.name.endswith("_gen0")), "skip-0 add"):
        assert w.cond is not None
        w.cond = replace(w.cond, word=replace(w.cond.word, loc="buf:ai_oldw"))


def skip_length(chain: Chain) -> None:
    """The message length (the receive's byte count) is not tested (decision C1)."""
    for w in _need(_wrs(chain, lambda w: w.cond is not None and w.cond.word.loc == "buf:bc"),
                   "byte-count marker"):
        _always(w)


def skip_quota(chain: Chain) -> None:
    """ALLOC_STORE: the CPU's quota octet is not tested (NO_SPACE is not enforced)."""
    for w in _need(_wrs(chain, lambda w: w.name.endswith("_fold") and w.cond is not None),
                   "quota fold marker"):
        assert w.cond is not None
        mask = bytearray(w.cond.mask)
        mask[7] = 0
        w.cond = replace(w.cond, mask=bytes(mask))


def skip_status(chain: Chain) -> None:
    """The request's Status field is not tested (its Generation still is): a request
    with a non-zero Status is served instead of answered MALFORMED."""
    for w in _need(_wrs(chain, lambda w: w.cond is not None
                        and w.cond.word.loc == "buf:ct+20"), "Generation/Status marker"):
        assert w.cond is not None
        mask = bytearray(w.cond.mask)
        mask[2:4] = b"\0\0"  # request octets 22..23: Status
        w.cond = replace(w.cond, mask=bytes(mask))


def skip_session(chain: Chain) -> None:
    """The entry Read ignores the CPU's session octet: requests on a connection whose
    session is not established (before HELLO, after GOODBYE) are served."""
    read = _entry_read(chain)
    assert read.cond is not None
    mask = bytearray(read.cond.mask)
    mask[1] = 0  # arm_read octet 1: the session octet (SESSION_OCTET)
    read.cond = replace(read.cond, mask=bytes(mask))


def _cas_arming(chain: Chain, loc: str, what: str) -> list[WrTemplate]:
    """The masked CASes (CAS-on-WQE lowering, decision C5) that arm a WR whose condition
    tests the window at ``loc``."""
    return _need(_wrs(chain, lambda w: w.opcode is Opcode.MASKED_CAS
                      and w.cas_cond is not None and w.cas_cond.word.loc == loc), what)


def _cas_compare_nothing(w: WrTemplate) -> None:
    w.fields["compare_mask"] = Const(0, "nothing compared (mutant)")


def cas_skip_generation(chain: Chain) -> None:
    """CAS-on-WQE: the CASes arming the Generation/Status markers compare nothing, so
    they always arm them (stale Generations and non-zero Statuses are served)."""
    for w in _cas_arming(chain, "buf:ct+20", "CAS arming the Generation marker"):
        _cas_compare_nothing(w)


def cas_skip_entry(chain: Chain) -> None:
    """CAS-on-WQE: the CASes arming the table-entry markers compare nothing (a LOAD of an
    unbound handle with chains v1, a STORE of a sealed block, an ALLOC_STORE of a bound
    handle pass)."""
    for w in _cas_arming(chain, "buf:w", "CAS arming an entry marker"):
        _cas_compare_nothing(w)


def cas_skip_load_entry(chain: Chain) -> None:
    """CAS-on-WQE: the second CASes arming chains v2's LOAD (its data Write, COMPLETION
    and early release test the entry its own Read placed, decision C15: octets 4..7 of
    the window, the entry Flags' low octet, ``B`` and the byte count) compare only the
    stage tag the first CAS left: a LOAD of an unbound or unsealed block is served."""
    for w in _cas_arming(chain, "buf:w_load+5", "CAS arming the direct LOAD's data Write"):
        if w.name.endswith(".cas2"):
            order = "little" if w.atomic_word_order == "little" else "big"
            w.fields["compare_mask"] = Const(int.from_bytes(b"\xff" + bytes(7), order),
                                             "the stage tag only (mutant)")


def cas_skip_length(chain: Chain) -> None:
    """CAS-on-WQE: the CASes arming the receive byte-count markers compare nothing, so
    a request with octets added or missing is served (decision C1)."""
    for w in _cas_arming(chain, "buf:bc", "CAS arming a byte-count marker"):
        _cas_compare_nothing(w)


def _nop(plan: RecyclePlan, kinds: tuple[str, ...]) -> None:
    """Chains v2: take the recycle steps of ``kinds`` out (NOPs in their place, so the
    segment keeps its length)."""
    hit = [i for i, st in enumerate(plan.steps) if st.kind in kinds]
    if not hit:
        raise MutantNotApplicable(f"no {' or '.join(kinds)} step in the recycle plan")
    for i in hit:
        plan.steps[i] = replace(plan.steps[i], kind="nop", about="(taken out)")


def v2_skip_restore(plan: RecyclePlan) -> None:
    """Chains v2: a credit's scratch is not restored between rounds: its arm words keep
    the previous request's markers, so a request that fails a test can still be armed."""
    _nop(plan, ("restore_scratch",))


def v2_skip_wqe_restore(plan: RecyclePlan) -> None:
    """Chains v2: the WQEs a chain modifies are not restored between rounds: on cx5 the
    CAS-armed WRs stay armed, so the next round's tests arm nothing."""
    _nop(plan, ("restore_wqes", "restore_ctrl"))


def v2_stale_count(plan: RecyclePlan) -> None:
    """Chains v2: the WAITs on the gate's, the slot's and the connection QP's CQs are not
    advanced (delta 0): in the next round each passes at once, before the previous
    credit released the gate, or the step's patches, Reads and transfers landed."""
    hit = [i for i, st in enumerate(plan.steps) if st.kind == "advance"
           and st.count is not None
           and st.count.target in ("cq:gate", "cq:chain", "cq:conn")]
    if not hit:
        raise MutantNotApplicable("no advance of a slot-CQ WAIT in the recycle plan")
    for i in hit:
        c = plan.steps[i].count
        assert c is not None
        plan.steps[i] = replace(plan.steps[i], count=replace(c, delta=0))


def v2_dispatch_stale_advance(by_variant: dict[str, list[CountField]]) -> None:
    """Chains v2 with dispatch: a variant's advancer does not advance its sub-master's
    WAITs on the variant's own CQ (delta 0): the next time the slot serves that
    variant, each WAIT passes at once, before the step's patches and Reads landed."""
    hit = False
    for v, counts in by_variant.items():
        for i, c in enumerate(counts):
            if c.target == f"cq:chain@{v}":
                counts[i] = replace(c, delta=0)
                hit = True
    if not hit:
        raise MutantNotApplicable("no variant WAIT on its own CQ (no dispatch)")


def v2_gate_stale(by_variant: dict[str, list[CountField]]) -> None:
    """Chains v2 with dispatch (decision C27): a variant's advancer does not advance the
    ENABLEs of the variant's own gate (delta 0): the next time the slot serves that
    variant, its release ENABLEs the gate NOP that already ran, so the credits behind it
    wait for a gate that stays shut."""
    hit = False
    for v, counts in by_variant.items():
        for i, c in enumerate(counts):
            if c.target.startswith(f"qp:gate@{v}"):
                counts[i] = replace(c, delta=0)
                hit = True
    if not hit:
        raise MutantNotApplicable("no variant's own gate (no dispatch)")


def v2_load_ungated(chain: Chain) -> None:
    """Chains v2 (decision C25), on the chain as prepared: the LOAD's sub-master does not
    WAIT for its connection's gate before its entry Read (its WAIT counts the credit's
    own receive, which has come), so a connection's LOADs read the table in any order,
    and a LOAD may read its entry before the STORE or FREE ahead of it took effect."""
    for w in _need(_wrs(chain, lambda w: w.name == "wait_prev_load"), "the LOAD's gate WAIT"):
        w.fields["target"] = Addr("cq:recv")
        w.fields["count"] = Const(1, "this credit's receive")


def v2_free_genwrap(chain: Chain) -> None:
    """The FREE's Generation marker tests 0xFFFE: a FREE at 0xFFFF unbinds to Generation 0
    (decision C20; draft, "Generation": never 0)."""
    (w,) = _need(_wrs(chain, lambda w: w.name == "m_free_genwrap"), "the FREE's wrap test")
    assert w.cond is not None
    w.cond = replace(w.cond, compare=b"\x00\x00\xff\xfe" + bytes(4))


def v2_free_no_readers(chain: Chain) -> None:
    """The FREE chain does not look at the handle's reader count: its marker holds
    whatever the count (decision C20's Dekker pair broken on the FREE's side)."""
    (w,) = _need(_wrs(chain, lambda w: w.name == "fr_fa_tail"), "the FREE's Tail ticket")
    assert w.cond is not None
    w.cond = replace(w.cond, mask=b"\xff" + bytes(7))  # the fold only, not the count


def v2_load_no_readers(chain: Chain) -> None:
    """The LOAD does not count itself a reader (its FetchAdd + 1 adds 0): the other side
    of the Dekker pair (decision C20)."""
    (w,) = _need(_wrs(chain, lambda w: w.name == "load_readers"), "the LOAD's reader count")
    w.fields["swap_add"] = Const(0, "+ 0 (mutant)")
