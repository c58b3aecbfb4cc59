"""A randomised differential campaign's specification and outcome: :class:`Spec` (one
campaign: seed, profile, byte order, mix, faults, mutant), :class:`Result` (what it
found), the operation :data:`MIXES` and default :data:`PROFILES`, and the pool campaigns
run on (four initiators, their handles and quotas; :func:`plan_for` the chains one of
them gets). The run itself is in :mod:`kbtpsim.oracle.lockstep`;
:func:`kbtpsim.oracle.campaign.run_campaign` runs one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kbtpsim.nic import NicProfile
from kbtpsim.nic.profiles import get_profile
from kbtpsim.oracle.compare import Divergence
from kbtpsim.oracle.faults import Faults
from kbtpsim.oracle.node import ObservedServer
from kbtpsim.target import InitiatorConfig, TargetConfig

BS = 512  #: Block Size of campaign targets (octets)
BLOCKS = 24
INITIATORS = (("a", 0x1000, "default", 6), ("b", 0x1020, "default", 6),
              ("c", 0x1040, "default", 6), ("d", 0x1080, "other", 6))
HANDLES = 32  #: handles per initiator
PUBLISHED = 2  #: sealed handles per initiator the others LOAD
ROGUE = ("r", 0x10C0, "default", 2)

#: Profiles of the default campaign (``cx5+strided``: cx5 with strided keys).
PROFILES = ("ideal", "ideal-be", "cx5", "irdma")
#: Operation mixes: kind -> weight.
MIXES: dict[str, dict[str, int]] = {
    "default": {"alloc": 14, "store": 12, "load": 14, "xload": 10, "free": 10,
                "alloc_bound": 2, "store_sealed": 3, "stale": 4, "oversize": 2,
                "foreign": 2, "range": 2, "double_free": 3, "small_load": 2, "bind": 1,
                "malformed": 2, "reconnect": 1, "xrace": 8},
    "valid": {"alloc": 20, "store": 18, "load": 20, "xload": 14, "free": 14},
    "invalid": {"alloc": 8, "store": 4, "load": 4, "xload": 4, "free": 6,
                "alloc_bound": 6, "store_sealed": 8, "stale": 10, "oversize": 6,
                "foreign": 6, "range": 6, "double_free": 6, "small_load": 6, "bind": 3,
                "malformed": 6, "reconnect": 3, "status": 4, "nosession": 3},
    "churn": {"alloc": 30, "free": 26, "load": 8, "xload": 6, "store": 6, "stale": 2},
    "fill": {"alloc": 40, "free": 12, "load": 4, "xload": 4},
    # cross-connection races: LOADs of other initiators' private handles while their
    # owners free, re-allocate and store them (decision O3); partial and whole blocks
    "race": {"alloc": 20, "free": 18, "store": 8, "xrace": 24, "load": 4},
    # one connection's requests overlapping (decision C16): LOADs sent back to back and
    # an operation on the initiator's own handles right behind them, all outstanding
    "pipeline": {"burst": 30, "alloc": 10, "free": 8, "store": 6, "load": 4, "xload": 4},
}


def resolve_profile(name: str) -> NicProfile:
    """A profile by name; ``NAME+strided`` is NAME with strided keys."""
    if name.endswith("+strided"):
        base = get_profile(name.removesuffix("+strided"))
        return replace(base, name=name, strided_keys=True)
    return get_profile(name)


def plan_for(profile: str, addr_le: bool | None = None, initiator: str = "a",
             seqlock: bool = True, readers: bool = False, block_size: int = BS) -> Any:
    """The :class:`~kbtpsim.chains.plan.ConnectionPlan` a campaign's ``initiator`` gets on
    ``profile`` (ADDR_LE: the server's default for the profile if None; ``seqlock``
    False: as chains v2 plan it, decision C13, and then Read sources of several packets
    staged, C24; ``readers``: with FREE on the NIC, C20)."""
    from kbtpsim.chains.layout import ChainLayout
    from kbtpsim.chains.plan import plan_connection, stages_reads
    from kbtpsim.target.layout import TargetLayout

    prof = resolve_profile(profile)
    le = prof.wqe_field_byte_order == "little" if addr_le is None else addr_le
    cfg = TargetConfig(blocks=BLOCKS, block_size=block_size, max_inline=block_size,
                       addr_le=le,
                       initiators=tuple(InitiatorConfig(n, bytes([i + 1]) * 16, q, b, HANDLES,
                                                        trust_domain=d)
                                        for i, (n, b, d, q) in enumerate(INITIATORS)))
    lay = ChainLayout.of(TargetLayout.plan(cfg, 1 << 40), cfg)
    return plan_connection(prof, cfg, lay, initiator, seqlock=seqlock, readers=readers,
                           stage_reads=stages_reads("v1" if seqlock else "v2", prof,
                                                    block_size))


@dataclass(frozen=True)
class Spec:
    """One campaign."""

    seed: int
    profile: str = "ideal-be"
    addr_le: bool | None = None  #: None: the server's default for the profile
    ops: int = 120  #: requests in the mixed phases, over all initiators
    mix: str = "default"
    phases: int = 3
    faults: Faults = field(default_factory=Faults)
    mutant: str | None = None
    reference: str = "target"  #: the shadow: "target" (Target) or "model" (kbtpsim.refmodel)
    chains: str = "v1"  #: the offloaded target's chains (target.chains)
    #: FREE on the NIC (target.operations.free: offload, decision C20; chains v2, one
    #: trust domain on the shared ring: every initiator's domain becomes "default")
    free_on_nic: bool = False
    #: Block Size (and Max Inline) of the target; above the profile's mtu a block takes
    #: several packets (a LOAD's data Write, an inline STORE's Send)
    block_size: int = BS
    #: the block table in NIC device memory (target.table_memory: device, decision C29)
    table_in_device_memory: bool = False

    def byte_order(self, prof: NicProfile) -> bool:
        return prof.wqe_field_byte_order == "little" if self.addr_le is None else self.addr_le

    def replay(self) -> str:
        """The command that runs this campaign again."""
        parts = [f"kbtpsim check --seed {self.seed} --profiles {self.profile}",
                 f"--ops {self.ops} --mix {self.mix} --phases {self.phases}"]
        parts.append("--addr-le " + ("default" if self.addr_le is None
                                     else "on" if self.addr_le else "off"))
        if self.faults.names:
            parts.append("--faults " + ",".join(self.faults.names))
        if self.mutant:
            parts.append(f"--mutant {self.mutant}")
        if self.reference != "target":
            parts.append(f"--reference {self.reference}")
        if self.chains != "v1":
            parts.append(f"--chains {self.chains}")
        if self.free_on_nic:
            parts.append("--free-on-nic")
        if self.block_size != BS:
            parts.append(f"--block-size {self.block_size}")
        if self.table_in_device_memory:
            parts.append("--table-memory device")
        return " ".join(parts)


@dataclass
class Result:
    """What one campaign found."""

    spec: Spec
    addr_le: bool
    divergences: list[Divergence]
    requests: int = 0
    nic_served: int = 0
    cpu_served: int = 0
    checkpoints: int = 0
    sim_us: float = 0.0
    wall_s: float = 0.0
    offloaded: tuple[str, ...] = ()
    server: ObservedServer | None = None
    #: what happened that the faults aim at: slot-not-ready hand-overs, deferred frees
    #: (in the shadow), dropped connections, abandoned tickets, delays and stalls
    events: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.divergences

    def summary(self) -> dict[str, Any]:
        return {"seed": self.spec.seed, "profile": self.spec.profile,
                "addr_le": self.addr_le, "mix": self.spec.mix, "ops": self.spec.ops,
                "faults": self.spec.faults.names, "mutant": self.spec.mutant,
                "requests": self.requests, "nic": self.nic_served, "cpu": self.cpu_served,
                "offloaded": list(self.offloaded), "checkpoints": self.checkpoints,
                "divergences": len(self.divergences), "sim_us": round(self.sim_us, 1),
                "events": self.events,
                "wall_s": round(self.wall_s, 2)}
