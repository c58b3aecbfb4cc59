"""Deliberate chain bugs (mutants), each a transformation of the compiled per-credit chain,
and the campaign that must catch it.

The catalogue (:data:`CATALOGUE`) pairs each transformation
(:mod:`kbtpsim.oracle.transforms`, re-exported here) with the campaign or scripted
interleaving that must catch it; :func:`run_mutant` runs one. Every mutant runs as
compiled: the server does not verify the mutated chain
(:class:`~kbtpsim.oracle.node.ObservedServer` applies ``chain_transform`` after the
plan). :func:`static_findings` says in addition whether the verifier
(:mod:`kbtpsim.chains.verify`) would have rejected it.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbtpsim.chains.compiler import Geometry, build_chain
from kbtpsim.chains.ir import Chain
from kbtpsim.chains.plan import lowering_for, stages_reads
from kbtpsim.chains.verify import verify
from kbtpsim.oracle.campaign import BS, Result, Spec, plan_for, resolve_profile, run_campaign
from kbtpsim.oracle.drops import run_drop_after_store_read
from kbtpsim.oracle.faults import Faults
from kbtpsim.oracle.interleaving import (
    run_aliased_handles,
    run_generation_wrap,
    run_load_during_free,
    run_load_then_store,
    run_refused_alloc_then_load,
    run_unsealed_load_then_seal,
    run_unsealed_loads,
)
from kbtpsim.oracle.node import V2Mutation
from kbtpsim.oracle.transforms import (
    MutantNotApplicable,
    alloc_shared_oldw,
    byte_order,
    cas_skip_entry,
    cas_skip_generation,
    cas_skip_length,
    cas_skip_load_entry,
    complete_early,
    drop_wait,
    skip_consume,
    skip_generation,
    skip_length,
    skip_quota,
    skip_sealed,
    skip_sequence,
    skip_session,
    skip_status,
    swap_length_offset,
    v2_alloc_genwrap,
    v2_dispatch_stale_advance,
    v2_early_always,
    v2_early_unguarded,
    v2_early_unsealed,
    v2_free_genwrap,
    v2_free_no_readers,
    v2_gate_stale,
    v2_load_no_readers,
    v2_load_recv_top,
    v2_load_recv_unguarded,
    v2_load_skip_entry,
    v2_load_skip_sealed,
    v2_load_ungated,
    v2_skip_restore,
    v2_skip_wqe_restore,
    v2_staged_unchecked,
    v2_stale_count,
)


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
    block_size: int = BS  #: the target's Block Size (and Max Inline)
    #: a scripted interleaving that catches it instead of a random campaign: called as
    #: (seed, profile, transform, observe) -> divergences (kbtpsim.oracle.interleaving)
    scenario: Callable[..., list[Any]] | None = None

    def spec(self, seed: int, ops: int | None = None, profile: str | None = None) -> Spec:
        return Spec(seed=seed, profile=profile or self.profile,
                    ops=self.ops if ops is None else ops, mix=self.mix, phases=2,
                    faults=self.faults, mutant=self.name, chains=self.chains,
                    free_on_nic=self.free_on_nic, block_size=self.block_size)


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


def _aliased_handles(seed: int, profile: str, transform: Any,
                     observe: dict[str, Any]) -> list[Any]:
    """LOADs of handles that differ from a bound one only in the top octet, or lie
    outside the readable block: random campaigns name unknown handles inside it."""
    return run_aliased_handles(profile, seed, observe=observe, chains="v2",
                               transform=transform)


def _unsealed_load_then_seal(seed: int, profile: str, transform: Any,
                             observe: dict[str, Any]) -> list[Any]:
    """A LOAD of an unsealed block without ALLOW_UNSEALED (the CPU answers it) and the
    STORE that seals the block right behind: random campaigns reach a CPU-answered LOAD
    with a NIC-served request of its connection right behind it too rarely."""
    return run_unsealed_load_then_seal(profile, seed, observe=observe, chains="v2",
                                       transform=transform)


def _refused_alloc_then_load(seed: int, profile: str, transform: Any,
                             observe: dict[str, Any]) -> list[Any]:
    """An ALLOC_STORE the CPU refuses with a LOAD right behind it on the connection: at
    window 1 the next request comes only after the refusal's COMPLETION (a credit's
    master WAITs for its receive before the gate since decision C25)."""
    return run_refused_alloc_then_load(profile, seed, observe=observe, chains="v2",
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


def _staged_read_cut(seed: int, profile: str, transform: Any,
                     observe: dict[str, Any]) -> list[Any]:
    """A Read-source STORE of a 256 KiB block (64 packets, staged by chains v2, decision
    C24) whose connection fails once the Read's first packet is in staging, so that the
    rest of the Read never comes, while other work holds the target's cores, so that the
    chain runs on past the Read's flushed CQE before the CPU stops it: random
    campaigns' blocks are one packet (512 octets), a Read of a few packets is on the wire
    whole before a failure can cut it, and an idle CPU stops the chain first."""
    return run_drop_after_store_read(profile, seed, observe=observe,
                                     block_size=256 * 1024, first_packet=True,
                                     chains="v2", transform=transform, busy_ns=200_000.0)


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
           mix="pipeline", chains="v2"),
    Mutant("v2-no-quiesce", V2Mutation(quiesce=False), "chains v2: a FREE returns its "
           "block to the ring at once, while another connection's LOAD chain, which does "
           "not re-read the entry, may still read the block (decision C13)",
           chains="v2", scenario=_load_during_free),
    Mutant("v2-load-skip-sealed", v2_load_skip_sealed, "chains v2: the direct LOAD "
           "takes an unsealed entry without ALLOW_UNSEALED (its Flags redirect always "
           "runs, decision C15)", chains="v2", scenario=_unsealed_loads),
    Mutant("v2-load-recv-top", v2_load_recv_top, "chains v2: the two-step LOAD does "
           "not test the handle's top octet, which its entry Read's address leaves out "
           "(decision C21)", chains="v2", scenario=_aliased_handles),
    Mutant("v2-load-recv-unguarded", v2_load_recv_unguarded, "chains v2: the two-step "
           "LOAD's entry Read runs whatever the handle, also outside the table's key "
           "(decision C21)", chains="v2", scenario=_aliased_handles),
    Mutant("v2-load-skip-entry", v2_load_skip_entry, "chains v2: the direct LOAD does "
           "not test the entry's Flags (VALID, SEALED), only its Data Length",
           mix="race", chains="v2"),
    Mutant("v2-early-unsealed", v2_early_unsealed, "chains v2 (pipelining): a LOAD of "
           "an unsealed block (ALLOW_UNSEALED) releases the next credit before its data "
           "Write has read the block (decision C16)", chains="v2",
           scenario=_load_then_store),
    Mutant("v2-early-unguarded", v2_early_unguarded, "chains v2 (decision C31): the "
           "LOAD's opportunistic release behind its entry Read ignores its request "
           "markers, so a LOAD the CPU answers releases the next credit too",
           chains="v2", scenario=_unsealed_load_then_seal),
    Mutant("v2-early-always", v2_early_always, "chains v2 (pipelining): an "
           "ALLOC_STORE or STORE releases the next credit early even when the CPU serves it",
           chains="v2", scenario=_refused_alloc_then_load),
    Mutant("v2-alloc-genwrap", v2_alloc_genwrap, "chains v2: the ALLOC_STORE's "
           "Generation marker tests 0xFFFE, so an allocation at 0xFFFF binds Generation 0 "
           "(decision C18)", chains="v2", scenario=_generation_wrap),
    Mutant("alloc-shared-oldw", alloc_shared_oldw, "ALLOC_STORE's skip-0 add reads the "
           "word both ALLOC_STORE variants write: an allocation at 0xFFFF skips 0 twice",
           scenario=_generation_wrap_v1),
    Mutant("v2-load-ungated", V2Mutation(prepared=v2_load_ungated), "chains v2 "
           "(decision C25): a LOAD dispatched before the gate reads its entry without "
           "waiting for the gate, out of its connection's request order", mix="pipeline",
           chains="v2"),
    Mutant("v2-dispatch-stale-advance", V2Mutation(advance=v2_dispatch_stale_advance),
           "chains v2 (dispatch): a variant's advancer leaves its sub-master's WAITs on "
           "its own CQ where they were", mix="valid", chains="v2"),
    Mutant("v2-gate-stale", V2Mutation(advance=v2_gate_stale), "chains v2 (decision "
           "C27): a variant's advancer does not advance the releases of the variant's own "
           "gate, so the next time the slot serves it the credits behind it wait for a "
           "gate that stays shut", mix="valid", chains="v2"),
    Mutant("v2-free-no-readers", v2_free_no_readers, "chains v2, FREE on the NIC: the "
           "FREE does not test the handle's reader count, so it returns the block while "
           "another connection's LOAD may still read it (decision C20)", chains="v2",
           free_on_nic=True, scenario=_load_during_nic_free),
    Mutant("v2-free-genwrap", v2_free_genwrap, "chains v2, FREE on the NIC: the FREE's "
           "Generation marker tests 0xFFFE, so a FREE at 0xFFFF unbinds to Generation 0 "
           "(decision C20)", chains="v2", free_on_nic=True,
           scenario=_generation_wrap_nic_free),
    Mutant("v2-staged-unchecked", v2_staged_unchecked, "chains v2: a Read-source store "
           "copies its staged data into the block without testing that the Read "
           "completed, so a Read a connection failure cut is copied part read (decision "
           "C24)", chains="v2", block_size=256 * 1024, scenario=_staged_read_cut),
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
        if m.transform.prepared is not None:  # the prepared chain: dispatch's rules
            from kbtpsim.chains.v2.dispatch import check_dispatch

            chain = copy.deepcopy(server.chain)
            before = set(check_dispatch(chain))
            m.transform.prepared(chain)
            return sorted(set(check_dispatch(chain)) - before)
        plan = copy.deepcopy(server._slots[0].plan)
        assert plan is not None
        assert m.transform.recycle is not None
        m.transform.recycle(plan)
        wait = server._slots[0].rec_wait
        return check_recycle(plan, plan.counts + own_counts(plan, plan.base, wait,
                                                            server.master.sq_depth),
                             plan.modified, server._slots[0].private)
    base = build_chain(prof.wqe_field_byte_order != "big",
                       prof.atomic_byte_order,  # type: ignore[arg-type]
                       Geometry(block_size=m.block_size, max_inline=m.block_size,
                                seqlock=m.chains != "v2", readers=m.free_on_nic,
                                stage_reads=stages_reads(m.chains, prof, m.block_size)),
                       lowering=lowering_for(prof))
    mutated = copy.deepcopy(base)
    m.transform(mutated)
    before = {(v.rule, v.wr, v.field) for v in verify(base, prof)}
    return sorted({f"[{v.rule}] {v.wr}.{v.field}" for v in verify(mutated, prof)
                   if (v.rule, v.wr, v.field) not in before})


def applicable(m: Mutant, profile: str | None = None) -> bool:
    """Whether ``m`` changes anything in the chains a campaign's initiator gets on
    ``profile`` (default: the mutant's own)."""
    plan = plan_for(profile or m.profile, seqlock=m.chains != "v2", readers=m.free_on_nic,
                    block_size=m.block_size)
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
