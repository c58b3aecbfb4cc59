"""Which operations a profile runs in chains, and why the others go to the target CPU.

For each fast-path variant the compiler builds the variant's chain for the profile's byte
orders and runs the verifier; a variant with no violation is *offloaded*, any other falls
back to software with the violations as its reasons (nothing degrades silently). The
per-connection chain contains only the offloaded variants.

Conditions are compiled for the profile (:func:`lowering_for`): native conditional WRs
where the profile has them, else CAS-on-WQE (RedN's construction, decision C5) where it has
``cas_on_wqe`` and ``wait_enable``; otherwise native, which the verifier rejects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kbtpsim.chains.compiler import (
    OPERATIONS,
    VARIANTS,
    Geometry,
    Lowering,
    build_chain,
    build_software,
)
from kbtpsim.chains.free import FREE_NEEDS, free_buildable
from kbtpsim.chains.ir import Chain
from kbtpsim.chains.layout import ChainLayout
from kbtpsim.chains.verify import Violation, verify
from kbtpsim.nic.profile import NicProfile
from kbtpsim.target import TargetConfig


@dataclass
class Decision:
    """The outcome for one variant on one profile and byte order."""

    variant: str
    profile: str
    addr_le: bool
    chain: Chain
    violations: list[Violation]
    lowering: Lowering = "native"  #: how the chain's conditions are expressed

    @property
    def offloaded(self) -> bool:
        return not self.violations

    def reasons(self) -> list[str]:
        """The violations, one line per distinct (rule, message), without WR names."""
        seen: dict[str, list[str]] = {}
        for v in self.violations:
            key = f"[{v.rule}] {v.message}"
            cap = re.search(r"needs '(\w+)', which profile (\S+) lacks", v.message)
            if v.rule == "capability" and cap and cap.group(1) == "native_conditional":
                key = (f"[capability] conditional execution needs 'native_conditional', "
                       f"which profile {cap.group(2)} lacks")
            seen.setdefault(key, []).append(f"{v.wr}.{v.field}")
        return [f"{k} (at {', '.join(w[:3])}{', ...' if len(w) > 3 else ''})"
                for k, w in seen.items()]


def lowering_for(profile: NicProfile) -> Lowering:
    """``"cas"`` for a profile without native conditional WRs but with CAS-on-WQE, else
    ``"native"``. (A CAS-armed WQE must also be held back by WAIT/ENABLE until the CAS has
    landed: without ``wait_enable`` the verifier says so, and also names what else the
    CAS form needs, e.g. WQE checks off, rather than only "no native conditional".)"""
    if not profile.native_conditional and profile.cas_on_wqe:
        return "cas"
    return "native"


def decide(variant: str, profile: NicProfile, addr_le: bool,
           geo: Geometry | None = None) -> Decision:
    low = lowering_for(profile)
    if variant == "free" and not free_buildable(geo or Geometry(), low):
        chain = build_software(addr_le, geo)
        chain.name = variant
        return Decision(variant, profile.name, addr_le, chain,
                        [Violation("fr_unbind_s", "", "design", FREE_NEEDS)], low)
    chain = build_chain(addr_le, _order(profile), geo, (variant,), low)
    chain.name = variant
    return Decision(variant, profile.name, addr_le, chain, verify(chain, profile), low)


def decide_op(op: str, profile: NicProfile, addr_le: bool,
              geo: Geometry | None = None) -> list[Decision]:
    return [decide(v, profile, addr_le, geo) for v in OPERATIONS[op]]


def _order(profile: NicProfile):  # type: ignore[no-untyped-def]
    return profile.atomic_byte_order


#: Variants :class:`~kbtpsim.chains.post.ChainServer` can post (all of them).
RUNNABLE = frozenset(VARIANTS)
NOT_RUNNABLE = "the chain verifies on this profile, but ChainServer cannot post it"


@dataclass
class ConnectionPlan:
    """The chain one connection pre-posts, and the variants left to the CPU."""

    chain: Chain
    offloaded: tuple[str, ...]
    software: dict[str, list[str]] = field(default_factory=dict)


def stages_reads(chains: str, profile: NicProfile, block_size: int) -> bool:
    """Decision C24: whether chains ``chains`` on ``profile`` read a Read-source store's
    data into staging and copy it into the block behind a test of the Read's CQE: chains
    v2 (the connection QP's CQEs land at fixed places in its CQ, one round of credits
    deep) with native conditions (the test reads the CQE in host memory), for blocks of
    several packets (a Read of one packet lands whole or not at all: it reads straight
    into the block, one step shorter)."""
    return chains == "v2" and profile.native_conditional and block_size > profile.mtu


def plan_connection(profile: NicProfile, config: TargetConfig, layout: ChainLayout,
                    initiator: str, variants: tuple[str, ...] | None = None,
                    seqlock: bool = True, readers: bool = False,
                    stage_reads: bool = False) -> ConnectionPlan:
    """Verify each variant for this connection's geometry; build the chain of the sound
    ones (with none, the chain is the dispatch prefix alone: every request goes to the
    CPU). ``seqlock=False``: LOADs without the entry re-read, for a target that
    quiesces frees (decision C13). ``readers``: LOADs count their readers and FREE may
    run on the NIC (decision C20). ``stage_reads``: Read-source stores read into
    staging and copy into the block behind a test of the Read's CQE (decision C24)."""
    geo = layout.geometry(config, initiator, seqlock, readers, stage_reads)
    wanted = tuple(v for v in VARIANTS if v != "free" or readers) if variants is None \
        else variants  # default: every variant, FREE only with reader counts (C20)
    ok: list[str] = []
    software: dict[str, list[str]] = {}
    for v in wanted:
        d = decide(v, profile, config.addr_le, geo)
        if d.offloaded and v in RUNNABLE:
            ok.append(v)
        elif d.offloaded:
            software[v] = [NOT_RUNNABLE]
        else:
            software[v] = d.reasons()
    chain = (build_chain(config.addr_le, _order(profile), geo, tuple(ok),
                         lowering_for(profile)) if ok
             else build_software(config.addr_le, geo))
    return ConnectionPlan(chain, tuple(ok), software)
