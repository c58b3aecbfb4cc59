"""The scenario's target section: a target's mode, NIC, CPU, features, pool and
baseline parameters (``target``, ``additional_targets[]``), and the values derived from
it: a NIC section's validated profile (:func:`nic_profile`, initiators' NICs too), the
chain design and the refill batch a target runs with.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from kbtpsim.scenario.fields import Rate, SchemaRuleError, Size, Strict, Time, did_you_mean
from kbtpsim.units import PS_PER_MS, format_time, parse_rate, parse_size, parse_time

#: Target-side operations whose placement ``target.operations`` chooses (offload mode).
TargetOp = Literal["load", "store", "alloc_store", "free", "bind", "hello", "goodbye"]
#: Target operations the chain compiler can offload (the others always run on the CPU).
CHAIN_OPS: tuple[str, ...] = ("load", "store", "alloc_store", "free")
#: Chain operations offloaded only when ``target.operations`` asks for it (FREE: its LOADs
#: then count their readers, decision C20); the others by default
OPT_IN_CHAIN_OPS: tuple[str, ...] = ("free",)


class NicSpec(Strict):
    """A NIC: a named profile (``kbtpsim.nic.PROFILES``) and per-parameter overrides."""

    profile: str = Field("cx5", description="NIC profile name: any name `kbtpsim chains "
                         "list` prints (cx3-40g-ib, cx5, cx5-100g-roce, ideal, ideal-be, "
                         "irdma, cx5+strided; `NAME+strided` adds strided keys to NAME); "
                         "see docs/nic-model.md.")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description="Profile parameters to change, e.g. "
        "`{link_gbps: 200, masked_atomics: false}`; `*_ns` parameters accept times "
        "(`150ns`), `*_gbps` rates (`200Gbps`).")

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        from kbtpsim.nic.profiles import get_profile, profile_names

        try:
            get_profile(value)
        except ValueError:
            names = profile_names()
            hint = did_you_mean(value, names) or f" (known: {', '.join(names)})"
            raise ValueError(f"unknown NIC profile {value!r}{hint}") from None
        return value


class CpuSpec(Strict):
    """The target host's CPU (software mode, and the offloaded target's fallback)."""

    cores: int = Field(1, ge=1, le=1024, description="CPU cores serving requests.")
    op_costs: dict[str, Time] = Field(
        default_factory=dict, description="Processing cost per KBTP opcode, overriding "
        "kbtpsim.system.cpu.DEFAULT_OP_NS (keys: HELLO, LOAD, STORE, ALLOC_STORE, FREE, "
        "BIND, READ_DONE, TIMER, DIRECT, ...).")
    refill_batch: int | None = Field(
        None, ge=1, le=65535, description="Offload mode: re-post (chains v1) or grant the "
        "NIC's re-arming of (v2) finished chains once at least this many have finished "
        "(one doorbell or ENABLE per batch; clamped to the credits; default: 32 with chains "
        "v2, or twice `request_credits` if fewer, 1 with v1; decision C22).")
    repost_wqe: Time | None = Field(
        None, description="Offload mode: CPU time to re-post one WQE of a consumed chain "
        "(default: the NIC profile's `cpu_post_ns`, building a WQE through the verbs API; "
        "copying a pre-built 64-octet WQE is one cache-line write, about 10ns).")
    background: float = Field(
        0.0, description="CPU contention: the share of each core other work on the host "
        "takes (0 <= f < 1; e.g. the inference engine). Each core alternates a background "
        "slice of `slice` with a server window of `slice * (1 - f) / f`, its phase seeded "
        "from `seed` and the target name; the server thread is descheduled during a slice "
        "and resumes after it. Delays everything on the target CPU (software target, "
        "offload fallbacks, refills, baselines), never the NIC (docs/decisions.md, E8).")
    slice: Time = Field(
        "50us", description="CPU contention: length of one background slice (> 0; "
        "a scheduler quantum of the other work).")

    @field_validator("background", mode="before")
    @classmethod
    def _background_fraction(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float) or \
                not 0 <= value < 1:
            raise ValueError(f"must be a fraction of each core, 0 <= f < 1, got {value!r}")
        return value

    @field_validator("slice")
    @classmethod
    def _positive_slice(cls, value: int) -> int:
        if value <= 0:
            raise ValueError(f"must be a positive time (e.g. 50us), got {format_time(value)}")
        return value

    @field_validator("op_costs")
    @classmethod
    def _known_ops(cls, value: dict[str, int]) -> dict[str, int]:
        from kbtpsim.system.cpu import DEFAULT_OP_NS

        for key in value:
            if key not in DEFAULT_OP_NS:
                raise ValueError(f"unknown opcode {key!r}{did_you_mean(key, DEFAULT_OP_NS)}")
        return value


class TargetFeatures(Strict):
    """Features the target offers to every initiator (draft, "HELLO_ACK Body")."""

    addr_le: bool | None = Field(
        None, description="ADDR_LE: address fields little-endian (null: off in software "
        "mode; in offload mode, on when the target NIC's WQE fields are little-endian, the "
        "byte order its chains need).")
    direct_load: bool = Field(False, description="DIRECT_LOAD: one-sided loads through the "
                              "exposed table and pool.")
    direct_alloc: bool = Field(False, description="DIRECT_ALLOC: one-sided allocation from "
                               "a per-initiator ring over a partition of quota blocks.")
    record_completion: bool = Field(False, description="RECORD_COMPLETION (needs "
                                    "`binding: infiniband`).")


#: Target modes that are not KBTP (kbtpsim.baselines).
BASELINE_MODES = ("one_sided_static", "one_sided_dynamic", "two_sided")


class BaselineSpec(Strict):
    """Baseline modes only (docs/baselines.md): the target CPU's copy rate and allocator."""

    copy_rate: Rate = Field(80e9, description="`two_sided`: rate of the target CPU's copy "
                            "of received data into the pool (80Gbps = 10 GB/s, one core).")
    granularity: Size = Field(64, description="`one_sided_dynamic`, `two_sided`: the "
                              "allocator rounds each region up to a multiple of this.")
    register_cost: Time = Field(0, description="`one_sided_dynamic`: extra target CPU "
                                "time per allocation for registering the region (0: the "
                                "pool is registered once and its STag returned).")
    static_layout: Literal["sequence_slots", "blocks"] = Field(
        "sequence_slots", description="`one_sided_static`: a KV-cache prefill initiator "
        "carves its region into slots for the longest sequence (`sequence_slots`) or "
        "places blocks anywhere in it (`blocks`, its own block allocator).")


class TargetSpec(Strict):
    """A KBTP target: its mode, NIC, CPU and pool (draft, "Target State")."""

    name: str = Field("target", min_length=1, description="Name of the target host.")
    mode: Literal["software", "offload", "one_sided_static", "one_sided_dynamic",
                  "two_sided"] = Field(
        "software", description="`software`: the target runs on CPU cores; `offload`: "
        "NIC chains with software fallback (kbtpsim.chains, docs/chains.md). "
        "Baselines, not KBTP (docs/baselines.md): `one_sided_static` (per-initiator "
        "regions registered up front, RDMA Write/Read), `one_sided_dynamic` (an RPC "
        "allocates each region, then RDMA Write/Read), `two_sided` (data in Sends, the "
        "target CPU allocates and copies).")
    operations: dict[TargetOp, Literal["software", "offload"]] = Field(
        default_factory=dict, description="Offload mode: where each operation runs "
        "(default: offload where the NIC profile allows it; `free` only when set to "
        "`offload`: FREE on the NIC makes every LOAD count itself a reader of its handle, "
        "which costs the LOAD a NIC atomic, and needs chains v2 on a profile with native "
        "conditional WRs and strided keys, and one trust domain on the shared ring; "
        "docs/chains.md, decision C20).")
    read_source_stores: Literal["offload", "software"] = Field(
        "offload", description="Offload mode: where STOREs and ALLOC_STOREs with an RDMA "
        "Read source (a Data Descriptor: the target Reads the data from the initiator) are "
        "served. `offload`: by their chain variants, where the NIC profile allows them; "
        "`software`: on the target CPU, and every connection's chain leaves their two "
        "variants out (`store_read`, `alloc_read`): a shorter chain and recycle segment "
        "for initiators that store inline. One connection's sealed LOADs on `ideal-be` at "
        "window 8: 531.9 k against 498.7 k LOADs/s (docs/chains.md, 'What binds at window "
        "8 today').")
    table_memory: Literal["host", "device"] = Field(
        "host", description="Offload mode: where the block table lives. `host`: host "
        "memory, with the pool and the rings; `device`: the NIC's on-chip device memory "
        "(as rdma-core's `ibv_alloc_dm` / `mlx5dv_alloc_dm` MEMIC allocate it; the chains' "
        "WQE rings and scratch are there already), so the chains' Reads, Writes and "
        "atomics of an entry cost no PCIe round trip, while every entry the target CPU "
        "reads costs it an MMIO read (a PCIe round trip, estimate) and every entry it "
        "writes an MMIO write. Its capacity is not modelled (docs/chains.md, decision "
        "C29).")
    chains: Literal["v1", "v2"] | None = Field(
        None, description="Offload mode: the chain design. `v1`: the CPU re-posts every "
        "finished chain (60 ns a WQE); `v2`: the NIC re-arms each credit's chain in place "
        "(pristine restores, FetchAdds advancing the WAIT/ENABLE counts, receives re-armed "
        "through the receive doorbell record) and the CPU only grants it, one ENABLE per "
        "batch of `cpu.refill_batch` (docs/chains.md, 'Chains v2'; decision C11). "
        "Default: v2 where the NIC profile can re-arm chains, v1 where it cannot "
        "(`kbtpsim chains explain OP --nic PROFILE --chains v2` says why; decision C14); "
        "results.json `targets.<name>.chains` records the design that ran.")
    chain_recyclers: int = Field(
        3, ge=1, le=64, description="Offload mode, chains v2: recycler QPs per connection "
        "(the credit slots dealt out in turn; a grant rings each one it uses). One "
        "re-arms a connection's credits one segment at a time (about 6 us each), which "
        "bounds what pipelining (decision C16) gains at a wider window; three (with "
        "grants per 32 credits, `cpu.refill_batch`) let one connection's sealed LOADs "
        "run about 2.5x faster at window 8 than at window 1 (decision C27), four or six "
        "hardly faster (with `table_memory: device`, four: 3.0x; decision C29), for a "
        "doorbell per recycler and grant and more NIC work at once "
        "(docs/chains.md, 'Pipelining', 'What binds at window 8 today'; decisions C22, "
        "C25, C27). Ignored with chains v1.")
    nic: NicSpec = Field(default_factory=NicSpec, description="The target's NIC.")
    cpu: CpuSpec = Field(default_factory=CpuSpec, description="The target's CPU.")
    blocks: int = Field(1024, ge=1, le=1 << 28, description="F: blocks in the pool.")
    block_size: Size = Field(32 << 10, description="Block Size (a multiple of 8).")
    ring_slots: int | None = Field(
        None, description="N: slots of the shared free-block ring (a power of two >= F; "
        "default the smallest such).")
    rings: Literal["shared", "per_initiator"] = Field(
        "shared", description="`shared`: one free-block ring for all ALLOC_STOREs; "
        "`per_initiator`: each initiator allocates from its own ring over a partition of "
        "quota blocks (the DIRECT_ALLOC layout, offered to every initiator).")
    max_inline: Size = Field(4096, description="Max Inline: largest inline store.")
    request_credits: int = Field(64, ge=1, le=65535,
                                 description="Request Credits per connection.")
    ticket_timeout: Time = Field(format_time(100 * PS_PER_MS),
                                 description="Ticket Timeout (whole ms).")
    retention: Time = Field(format_time(30_000 * PS_PER_MS),
                            description="How long a disconnected session's bindings are "
                            "kept (whole ms).")
    counter_mode: Literal["masked", "unmasked"] = Field(
        "masked", description="Head/Tail counters: masked FetchAdd or Ticket << 32.")
    binding: Literal["rdmap", "infiniband"] = Field(
        "rdmap", description="Transport binding (RECORD_COMPLETION needs infiniband).")
    features: TargetFeatures = Field(default_factory=TargetFeatures,
                                     description="Features offered.")
    staging: Size = Field(256 << 20, description="Registered staging memory for data in "
                          "flight (LOAD data and bounce buffers).")
    baseline: BaselineSpec = Field(default_factory=lambda: BaselineSpec(),
                                   description="Parameters of the baseline modes.")


def nic_profile(spec: NicSpec, path: str) -> Any:
    """The validated :class:`~kbtpsim.nic.NicProfile` of ``spec``."""
    from kbtpsim.nic import get_profile
    from kbtpsim.units import UnitError, parse_frequency

    base = get_profile(spec.profile)
    names = set(type(base).__dataclass_fields__)
    values: dict[str, Any] = {}
    for key, value in spec.overrides.items():
        where = f"{path}.overrides.{key}"
        if key not in names or key == "name":
            raise SchemaRuleError(where, f"unknown NIC profile parameter"
                                  f"{did_you_mean(key, sorted(names - {'name'}))}")
        if isinstance(value, str):
            try:
                if key.endswith("_ns"):
                    value = parse_time(value) / 1000
                elif key.endswith("_gbps"):
                    value = parse_rate(value) / 1e9
                elif key.endswith("_mhz"):
                    value = parse_frequency(value) / 1e6
                elif key in ("max_inline", "mtu", "pcie_mps", "pcie_mrrs", "sq_wqe_size"):
                    value = parse_size(value)
            except UnitError as exc:
                raise SchemaRuleError(where, str(exc)) from None
        values[key] = value
    try:
        return base.replace(**values)
    except (ValueError, TypeError) as exc:
        m = re.search(r"parameter '([a-z_0-9]+)'", str(exc))
        where = f"{path}.overrides.{m.group(1)}" if m else f"{path}.overrides"
        raise SchemaRuleError(where, str(exc)) from None


def chain_design(tgt: TargetSpec) -> str:
    """The chain design ``tgt`` runs: ``target.chains`` if given, else v2 where its NIC
    profile can re-arm chains and v1 where it cannot (decision C14)."""
    if tgt.chains is not None:
        return tgt.chains
    from kbtpsim.chains.v2 import default_design

    return default_design(nic_profile(tgt.nic, "target.nic"))


def refill_batch(tgt: TargetSpec) -> int:
    """``target.cpu.refill_batch`` if given, else with chains v2 32 or twice the request
    credits if fewer (grants per 32 credits: decision C22; 8 before), and 1 with v1
    (decision C14). The offloaded server posts ``request_credits + refill_batch`` credit
    slots per connection, so the default at most triples them."""
    if tgt.cpu.refill_batch is not None:
        return tgt.cpu.refill_batch
    return min(32, 2 * tgt.request_credits) if chain_design(tgt) == "v2" else 1
