"""What a target configuration allows and requires of the offloaded target's chains: why
a variant is left out of a connection's chain (the reasons in ``ConnectionPlan.software``),
why FREE cannot run on the NIC (:func:`free_on_nic_blockers`, decision C20) and the
aligned table the chains' handle tests need (:func:`aligned_table`)."""

from __future__ import annotations

from kbtpsim.nic import NicProfile
from kbtpsim.target import TargetConfig
from kbtpsim.wire import Feature

#: reasons a variant is left out of a connection's chain (ConnectionPlan.software)
KEPT_ON_CPU = ("kept on the target CPU by the configuration (target.operations, "
               "target.read_source_stores)")
DIRECT_ALLOC_RING = ("the initiator is offered DIRECT_ALLOC: its ALLOC_STOREs take tickets "
                     "from its own ring (decision S1), the chains' ring is the shared one")
FREE_ON_CPU = ("FREE runs on the target CPU unless target.operations.free is offload "
               "(decision C20: the LOADs then count their readers)")


def free_on_nic_blockers(chains: str, profile: NicProfile, config: TargetConfig) -> list[str]:
    """Why this target cannot serve FREE on its NIC (decision C20), or nothing."""
    why = []
    if chains != "v2":
        why.append("it needs chains v2 (target.chains: v2)")
    if not profile.native_conditional:
        why.append(f"NIC profile {profile.name!r} has no native conditional WRs")
    if not profile.strided_keys:
        why.append(f"NIC profile {profile.name!r} has no strided keys (reader counts)")
    domains = {i.trust_domain for i in config.initiators
               if not i.features & Feature.DIRECT_ALLOC}
    if len(domains) > 1:
        why.append("the shared ring serves several trust domains: a freed block must be "
                   "cleared first, which the FREE chain does not do")
    return why


UNKNOWN_INITIATOR = "the connection's initiator is not configured: the CPU serves it all"


def aligned_table(config: TargetConfig) -> tuple[int, int]:
    """The smallest aligned power-of-two block of handles holding every initiator's."""
    lo = min(i.handle_base for i in config.initiators)
    hi = max(i.handle_base + i.handle_count for i in config.initiators)
    bits = max(0, (hi - 1).bit_length())
    while bits > 0 and lo >> (bits - 1) == (hi - 1) >> (bits - 1):
        bits -= 1
    return lo >> bits << bits, 1 << bits
