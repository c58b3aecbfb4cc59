"""Deliberate chain bugs (mutants), each a transformation of the compiled per-credit chain,
and the campaign that must catch it.

Every mutant finds the WRs it changes by name pattern, role, part, opcode and remote
kind, never by position, and runs as compiled: the server does not verify the mutated
chain (:class:`~kbtpsim.oracle.node.ObservedServer` applies ``chain_transform`` after
the plan). :func:`static_findings` says in addition whether the verifier
(:mod:`kbtpsim.chains.verify`) would have rejected it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from kbtpsim.chains.compiler import VARIANTS, Geometry, build_chain
from kbtpsim.chains.ir import Addr, Chain, Const, Read, Role, WrTemplate
from kbtpsim.chains.plan import lowering_for
from kbtpsim.chains.v2.recycle import CountField, RecyclePlan
from kbtpsim.chains.verify import verify
from kbtpsim.nic.wqe import Opcode
from kbtpsim.oracle.campaign import Result, Spec, plan_for, resolve_profile, run_campaign
from kbtpsim.oracle.faults import Faults
from kbtpsim.oracle.interleaving import (
    run_generation_wrap,
    run_load_during_free,
    run_load_then_store,
    run_unsealed_loads,
)
from kbtpsim.oracle.node import V2Mutation


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
        if g[1].loc == "buf:w_load":  # C15's LOAD: Generation, Status, Data Length in one
            gs = replace(g[1], length=4, about="entry Generation, Status OK")
            dl = replace(g[1], loc="buf:w_load+4", length=4, about="entry Data Length")
            w.gather = (g[0], gs, *g[2:], dl)
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
    the request's Flags, so an unsealed block is loaded without ALLOW_UNSEALED."""
    for w in _need(_wrs(chain, lambda w: w.name == "c_au_load"), "direct LOAD's redirect"):
        _always(w)


def v2_load_skip_entry(chain: Chain) -> None:
    """Chains v2's direct LOAD (decision C15): the data Write, the COMPLETION, the
    commit and the release test the entry's Data Length only, not its Flags: an entry
    that is not VALID is loaded."""
    for w in _need(_wrs(chain, lambda w: w.cond is not None
                        and w.cond.word.loc == "buf:w_load+5"), "direct LOAD entry test"):
        assert w.cond is not None
        w.cond = replace(w.cond, mask=b"\xff" * 3 + bytes(4) + b"\xff")  # not A, B


def v2_early_unsealed(chain: Chain) -> None:
    """Chains v2 pipelining (decision C16): the LOAD releases the next credit early
    whenever its data Write runs, also for an unsealed block delivered with
    ALLOW_UNSEALED, whose owner's next STORE may then overwrite it under the Write."""
    for w in _need(_wrs(chain, lambda w: w.name == "early_load"), "the early release"):
        w.cond = chain.wr("load_write").cond


def v2_early_always(chain: Chain) -> None:
    """Chains v2 pipelining (decision C19): an ALLOC_STORE or STORE releases the next
    credit early whether or not the NIC served it (a hand-over to the CPU included), so
    a later request of the connection runs before the CPU has served it."""
    for w in _need(_wrs(chain, lambda w: w.name.startswith(("early_alloc", "early_store"))),
                   "the ALLOC_STORE's and STORE's early releases"):
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


@dataclass(frozen=True)
class Mutant:
    """A chain bug and the campaign that must catch it."""

    name: str
    transform: Callable[[Chain], None]
    about: str
    mix: str = "default"
    ops: int = 48
    profile: str = "ideal-be"
    faults: Faults = field(default_factory=Faults)
    chains: str = "v1"  #: the chains it runs with (v2 mutants change v2's machinery)
    free_on_nic: bool = False  #: FREE served by the NIC too (decision C20)
    #: a scripted interleaving that catches it instead of a random campaign: called as
    #: (seed, profile, transform, observe) -> divergences (kbtpsim.oracle.interleaving)
    scenario: Callable[..., list[Any]] | None = None

    def spec(self, seed: int, ops: int | None = None, profile: str | None = None) -> Spec:
        return Spec(seed=seed, profile=profile or self.profile,
                    ops=self.ops if ops is None else ops, mix=self.mix, phases=2,
                    faults=self.faults, mutant=self.name, chains=self.chains,
                    free_on_nic=self.free_on_nic)


def _unsealed_loads(seed: int, profile: str, transform: Any,
                    observe: dict[str, Any]) -> list[Any]:
    """LOADs of a sealed and an unsealed block, with and without ALLOW_UNSEALED: random
    campaigns reach an unsealed block's LOAD without the flag on the NIC's path rarely
    (most LOADs of unsealed blocks there name other initiators' handles: the CPU's)."""
    return run_unsealed_loads(profile, seed, observe=observe, chains="v2",
                              transform=transform)


def _load_then_store(seed: int, profile: str, transform: Any,
                     observe: dict[str, Any]) -> list[Any]:
    """A LOAD of an unsealed block (ALLOW_UNSEALED), delayed before its data Write, and
    the owner's STORE to it right behind on the same connection: random campaigns never
    hold a Write back while the next request of its connection runs."""
    return run_load_then_store(profile, seed, observe=observe, chains="v2",
                               transform=transform)


def _generation_wrap(seed: int, profile: str, transform: Any,
                     observe: dict[str, Any], chains: str = "v2") -> list[Any]:
    """Allocations of entries at Generation 0xFFFE and 0xFFFF: random campaigns never
    come near the wrap (every entry starts at Generation 1)."""
    return run_generation_wrap(profile, seed, observe=observe, chains=chains,
                               transform=transform)


def _generation_wrap_v1(seed: int, profile: str, transform: Any,
                        observe: dict[str, Any]) -> list[Any]:
    """:func:`_generation_wrap` with chains v1 (every variant's WRs run)."""
    return _generation_wrap(seed, profile, transform, observe, chains="v1")


def _load_during_free(seed: int, profile: str, transform: Any,
                      observe: dict[str, Any]) -> list[Any]:
    """B's LOAD chain delayed between its entry Read and its data Write while A frees the
    handle and stores other data into the same block (a pool of one block): random
    campaigns (24 blocks, a FIFO ring) rarely reuse a freed block that fast."""
    return run_load_during_free(profile, seed, observe=observe, chains="v2",
                                transform=transform)


def _load_during_nic_free(seed: int, profile: str, transform: Any,
                          observe: dict[str, Any]) -> list[Any]:
    """:func:`_load_during_free` with A's FREE on the NIC (decision C20): only B's reader
    count stops the FREE chain from returning the block at once."""
    return run_load_during_free(profile, seed, observe=observe, chains="v2",
                                transform=transform, free_on_nic=True)


def _generation_wrap_nic_free(seed: int, profile: str, transform: Any,
                              observe: dict[str, Any]) -> list[Any]:
    """:func:`_generation_wrap` with FREE on the NIC (decision C20): a FREE at 0xFFFF."""
    return run_generation_wrap(profile, seed, observe=observe, chains="v2",
                               transform=transform, free_on_nic=True)


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


CATALOGUE: dict[str, Mutant] = {m.name: m for m in (
    Mutant("drop-wait", drop_wait, "drop the WAIT that holds LOAD's data Write back until "
           "its patched address has landed", mix="valid"),
    Mutant("skip-sequence", skip_sequence, "ALLOC_STORE without the slot test (Sequence = "
           "Ticket, Block Offset not all ones)",
           mix="fill", ops=96, faults=Faults(slot_ns=50_000.0)),
    Mutant("byte-order", byte_order, "the handle's octets in the wrong byte order in the "
           "entry Read's address"),
    Mutant("swap-length-offset", swap_length_offset, "Data Length and Block Offset swapped "
           "in the COMPLETION"),
    Mutant("complete-early", complete_early, "LOAD's COMPLETION sent before its data Write",
           mix="valid"),
    Mutant("skip-consume", skip_consume, "ALLOC_STORE does not mark its slot consumed",
           mix="valid"),
    Mutant("skip-generation", skip_generation, "the request's Generation is not tested",
           mix="invalid"),
    Mutant("skip-sealed", skip_sealed, "STORE does not test SEALED", mix="invalid"),
    Mutant("skip-length", skip_length, "the message length (receive byte count) is not "
           "tested", mix="invalid"),
    Mutant("skip-quota", skip_quota, "ALLOC_STORE ignores the CPU's quota octet",
           mix="churn"),
    Mutant("skip-status", skip_status, "a request's non-zero Status field is ignored",
           mix="invalid"),
    Mutant("skip-session", skip_session, "requests are served on a connection whose "
           "session is not established", mix="invalid"),
    Mutant("cas-skip-generation", cas_skip_generation, "CAS-on-WQE: the CAS arming the "
           "Generation marker compares nothing", mix="invalid", profile="cx5"),
    Mutant("cas-skip-entry", cas_skip_entry, "CAS-on-WQE: the CASes arming the entry "
           "markers compare nothing", mix="invalid", profile="cx5"),
    Mutant("cas-skip-load-entry", cas_skip_load_entry, "CAS-on-WQE: the CASes arming "
           "chains v2's LOAD test only the stage tag: the entry Flags are not compared",
           mix="race",
           profile="cx5", chains="v2"),
    Mutant("cas-skip-length", cas_skip_length, "CAS-on-WQE: the CASes arming the "
           "byte-count markers compare nothing", mix="invalid", profile="cx5"),
    Mutant("v2-skip-restore", V2Mutation(v2_skip_restore), "chains v2: a credit's "
           "scratch (arm words) is not restored between rounds", mix="invalid",
           chains="v2"),
    Mutant("v2-skip-wqe-restore", V2Mutation(v2_skip_wqe_restore), "chains v2: the "
           "WQEs a chain modifies (CAS-armed markers) are not restored between rounds",
           mix="invalid", profile="cx5", chains="v2"),
    Mutant("v2-stale-count", V2Mutation(v2_stale_count), "chains v2: the WAITs on the "
           "gate's, the slot's and the connection's CQs are not advanced between rounds",
           mix="valid", chains="v2"),
    Mutant("v2-no-quiesce", V2Mutation(quiesce=False), "chains v2: a FREE returns its "
           "block to the ring at once, while another connection's LOAD chain, which does "
           "not re-read the entry, may still read the block (decision C13)",
           chains="v2", scenario=_load_during_free),
    Mutant("v2-load-skip-sealed", v2_load_skip_sealed, "chains v2: the direct LOAD "
           "takes an unsealed entry without ALLOW_UNSEALED (its Flags redirect always "
           "runs, decision C15)", chains="v2", scenario=_unsealed_loads),
    Mutant("v2-load-skip-entry", v2_load_skip_entry, "chains v2: the direct LOAD does "
           "not test the entry's Flags (VALID, SEALED), only its Data Length",
           mix="race", chains="v2"),
    Mutant("v2-early-unsealed", v2_early_unsealed, "chains v2 (pipelining): a LOAD of "
           "an unsealed block (ALLOW_UNSEALED) releases the next credit before its data "
           "Write has read the block (decision C16)", chains="v2",
           scenario=_load_then_store),
    Mutant("v2-early-always", v2_early_always, "chains v2 (pipelining): an "
           "ALLOC_STORE or STORE releases the next credit early even when the CPU serves it",
           mix="fill", chains="v2"),
    Mutant("v2-alloc-genwrap", v2_alloc_genwrap, "chains v2: the ALLOC_STORE's "
           "Generation marker tests 0xFFFE, so an allocation at 0xFFFF binds Generation 0 "
           "(decision C18)", chains="v2", scenario=_generation_wrap),
    Mutant("alloc-shared-oldw", alloc_shared_oldw, "ALLOC_STORE's skip-0 add reads the "
           "word both ALLOC_STORE variants write: an allocation at 0xFFFF skips 0 twice",
           scenario=_generation_wrap_v1),
    Mutant("v2-dispatch-stale-advance", V2Mutation(advance=v2_dispatch_stale_advance),
           "chains v2 (dispatch): a variant's advancer leaves its sub-master's WAITs on "
           "its own CQ where they were", mix="valid", chains="v2"),
    Mutant("v2-free-no-readers", v2_free_no_readers, "chains v2, FREE on the NIC: the "
           "FREE does not test the handle's reader count, so it returns the block while "
           "another connection's LOAD may still read it (decision C20)", chains="v2",
           free_on_nic=True, scenario=_load_during_nic_free),
    Mutant("v2-free-genwrap", v2_free_genwrap, "chains v2, FREE on the NIC: the FREE's "
           "Generation marker tests 0xFFFE, so a FREE at 0xFFFF unbinds to Generation 0 "
           "(decision C20)", chains="v2", free_on_nic=True,
           scenario=_generation_wrap_nic_free),
    Mutant("v2-load-no-readers", v2_load_no_readers, "chains v2, FREE on the NIC: the "
           "LOAD does not count itself a reader of its handle (decision C20)", chains="v2",
           free_on_nic=True, scenario=_load_during_nic_free),
)}


def static_findings(m: Mutant, profile: str = "ideal-be") -> list[str]:
    """The verifier's findings on the mutated full chain beyond the unmutated chain's
    (empty: the verifier would not have caught it); for a v2 mutant, the recycle rules'
    findings on a slot's mutated recycle plan."""
    prof = resolve_profile(profile)
    if isinstance(m.transform, V2Mutation) and not m.transform.quiesce:
        return []  # a bug of the server's free path: no chain or plan changes
    if isinstance(m.transform, V2Mutation):
        from kbtpsim.chains.harness import Harness
        from kbtpsim.chains.v2.recycle import check_recycle, own_counts

        server = Harness(prof, prof.wqe_field_byte_order != "big", credits=2,
                         chains="v2").server
        if m.transform.advance is not None:
            from kbtpsim.chains.v2.advance import by_variant, check_advance

            private = server._slots[0].private
            by_v = by_variant(private)
            m.transform.advance(by_v)
            return check_advance(by_v, private, server.adv_wrs)
        plan = copy.deepcopy(server._slots[0].plan)
        assert plan is not None
        assert m.transform.recycle is not None
        m.transform.recycle(plan)
        wait = server._slots[0].rec_wait
        return check_recycle(plan, plan.counts + own_counts(plan, plan.base, wait,
                                                            server.master.sq_depth),
                             plan.modified)
    base = build_chain(prof.wqe_field_byte_order != "big",
                       prof.atomic_byte_order,  # type: ignore[arg-type]
                       Geometry(seqlock=m.chains != "v2", readers=m.free_on_nic),
                       lowering=lowering_for(prof))
    mutated = copy.deepcopy(base)
    m.transform(mutated)
    before = {(v.rule, v.wr, v.field) for v in verify(base, prof)}
    return sorted({f"[{v.rule}] {v.wr}.{v.field}" for v in verify(mutated, prof)
                   if (v.rule, v.wr, v.field) not in before})


def applicable(m: Mutant, profile: str | None = None) -> bool:
    """Whether ``m`` changes anything in the chains a campaign's initiator gets on
    ``profile`` (default: the mutant's own)."""
    plan = plan_for(profile or m.profile, seqlock=m.chains != "v2", readers=m.free_on_nic)
    if not plan.offloaded:
        return False
    if isinstance(m.transform, V2Mutation):
        from kbtpsim.chains.v2 import recycle_blockers

        return not recycle_blockers(resolve_profile(profile or m.profile))
    try:
        m.transform(copy.deepcopy(plan.chain))
    except MutantNotApplicable:
        return False
    return True


@dataclass
class Outcome:
    mutant: Mutant
    result: Result
    static: list[str]

    @property
    def caught(self) -> bool:
        return not self.result.ok

    def row(self) -> dict[str, object]:
        first = self.result.divergences[0] if self.result.divergences else None
        return {"mutant": self.mutant.name, "caught": self.caught,
                "by": None if first is None else f"{first.kind}: {first.detail}",
                "requests": self.result.requests, "seed": self.result.spec.seed,
                "profile": self.result.spec.profile, "mix": self.result.spec.mix,
                "verifier": self.static or None, "wall_s": round(self.result.wall_s, 2),
                "replay": self.result.spec.replay() if self.mutant.scenario is None
                else f"kbtpsim mutants --only {self.mutant.name} --seed {self.result.spec.seed}"}


def run_mutant(m: Mutant, seed: int = 1, ops: int | None = None,
               profile: str | None = None) -> Outcome:
    """Run ``m``'s campaign with the mutant in every connection's chain."""
    spec = m.spec(seed, ops, profile)
    if m.scenario is not None:
        start = time.perf_counter()
        seen: dict[str, Any] = {}
        divs = m.scenario(spec.seed, spec.profile, m.transform, seen)
        served = seen["server"].served if "server" in seen else {}
        result = Result(spec, resolve_profile(spec.profile).wqe_field_byte_order == "little",
                        divs, requests=sum(sum(c.values()) for c in served.values()),
                        wall_s=time.perf_counter() - start)
    else:
        result = run_campaign(spec, m.transform)
    try:
        static = static_findings(m, spec.profile)
    except MutantNotApplicable:
        static = []
    return Outcome(m, result, static)


__all__ = ["CATALOGUE", "Mutant", "MutantNotApplicable", "Outcome", "applicable",
           "run_mutant", "static_findings"]
