"""The named NIC profiles (``PROFILES``) and lookup by name.

* ``cx5``: ConnectX-5 as RedN runs it (MLNX_OFED 4.x experimental verbs and the firmware
  patch that disables WQE checks): cross-channel WAIT/ENABLE, masked atomics, CAS-on-WQE,
  UMR-built interleaved/list keys (``indirect_keys="exp_umr"``), big-endian WQE fields;
  timing of the ``cx5-100g-roce`` calibration. No hypothetical capability.
* ``cx5-upstream``: the same card with upstream rdma-core and stock firmware: no
  WAIT/ENABLE and no masked atomics in user space, WQE checks on, zero-based
  ``mlx5dv_wr_mr_interleaved``/``_list`` keys (``indirect_keys="mlx5dv"``).
* ``irdma``: shaped like Intel E810 (irdma): little-endian WQE fields, no cross-channel
  WAIT/ENABLE, no masked atomics, no CAS-on-WQE.
* ``ideal``: every capability, including native conditional WRs and strided keys, with
  little-endian WQE fields (the draft's ADDR_LE).
* ``ideal-be``: what the draft's formats need of a NIC *without* ADDR_LE: big-endian WQE
  fields and atomics (as on cx5), plus native conditional WRs and strided keys, with
  cx5's WAIT/ENABLE and masked atomics (see docs/nic-model.md);
* ``cx3-40g-ib`` and ``cx5-100g-roce``: calibration profiles for the published figures in
  ``docs/calibration.md`` (see docs/nic-model.md for each value's source).
"""

from __future__ import annotations

from kbtpsim.nic.profile import NicProfile

#: ConnectX-5 EN, 100GbE RoCEv2, PCIe Gen3 x8, direct cable (docs/calibration.md rows 1-3, 10).
CX5_100G_ROCE = NicProfile(
    name="cx5-100g-roce",
    clock_mhz=500.0,
    doorbell_cycles=30,
    decode_cycles=40,
    tx_cycles=30,
    rx_cycles=30,
    pu_count=8,
    pcie_gbps=63.0,  # Gen3 x8: 8 GT/s x 8 lanes x 128/130
    pcie_tlp_overhead=30,
    pcie_latency_ns=200.0,
    host_mem_ns=80.0,
    mmio_ns=200.0,
    link_gbps=100.0,
    mtu=4096,
    wire_overhead=82,  # Eth 14 + IPv4 20 + UDP 8 + BTH 12 + ICRC 4 + FCS 4 + preamble/IFG 20
    propagation_ns=10.0,
    phy_ns=60.0,
)

#: ConnectX-3, InfiniBand QDR 4x (32 Gb/s of data after 8b/10b), MTU 2048 (rows 4-6).
CX3_40G_IB = NicProfile(
    name="cx3-40g-ib",
    clock_mhz=500.0,
    doorbell_cycles=45,
    decode_cycles=65,
    tx_cycles=60,
    rx_cycles=60,
    pu_count=4,
    pcie_gbps=32.0,  # fitted: Gen2 x8 (5 GT/s x 8 x 8b/10b) matches the 4 KB / 64 KB rows
    pcie_tlp_overhead=30,
    pcie_latency_ns=130.0,  # fitted to the same-address FetchAdd rate (row 6)
    host_mem_ns=80.0,
    mmio_ns=130.0,
    link_gbps=32.0,
    mtu=2048,
    wire_overhead=28,  # LRH 8 + BTH 12 + ICRC 4 + VCRC 2 + delimiters 2
    propagation_ns=10.0,
    phy_ns=55.0,  # fitted: rows 4, 5 (with cpu_doorbell_ns below)
    cpu_doorbell_ns=73.0,  # fitted: small-Write message rate, row 11 (8 B)
    read_req_cycles=49,  # fitted: small-Read message rate, row 12 (8 B)
    max_rd_atomic=16,
    masked_atomics=False,
    wait_enable=False,
    cas_on_wqe=False,
)

#: ConnectX-5 with RedN's stack (docs/nic-model.md, "Capabilities by profile").
CX5 = CX5_100G_ROCE.replace(
    name="cx5", wait_enable=True, masked_atomics=True, cas_on_wqe=True, wqe_checks=False,
    indirect_keys="exp_umr", strided_keys=False, native_conditional=False)

#: ConnectX-5 with upstream rdma-core and stock firmware.
CX5_UPSTREAM = CX5_100G_ROCE.replace(
    name="cx5-upstream", wait_enable=False, masked_atomics=False, cas_on_wqe=True,
    wqe_checks=True, indirect_keys="mlx5dv", strided_keys=False, native_conditional=False)

IRDMA = CX5_100G_ROCE.replace(
    name="irdma",
    wqe_field_byte_order="little",
    atomic_byte_order="little",
    wait_enable=False,
    masked_atomics=False,
    cas_on_wqe=False,
    blueflame=False,  # estimate: irdma has push mode, modelled as a plain doorbell
    max_sge=13,
    wire_overhead=82,
)

IDEAL = CX5_100G_ROCE.replace(
    name="ideal",
    wqe_field_byte_order="little",
    atomic_byte_order="little",
    native_conditional=True,
    strided_keys=True,
)

IDEAL_BE = CX5_100G_ROCE.replace(
    name="ideal-be",
    wqe_field_byte_order="big",
    atomic_byte_order="big",
    wait_enable=True,
    masked_atomics=True,
    native_conditional=True,
    strided_keys=True,
)

PROFILES: dict[str, NicProfile] = {
    p.name: p for p in (CX5, CX5_UPSTREAM, IRDMA, IDEAL, IDEAL_BE, CX3_40G_IB, CX5_100G_ROCE)
}


#: Variant suffixes: ``NAME+strided`` is profile NAME with strided keys (hypothetical: a
#: what-if override, no NIC offers them).
VARIANTS: dict[str, dict[str, object]] = {"strided": {"strided_keys": True}}
#: Variants that are named wherever profiles are listed (``kbtpsim chains list``, the
#: ``check`` campaigns): cx5 with strided keys, the chain designs' reference point.
LISTED_VARIANTS = ("cx5+strided",)


def profile_names() -> list[str]:
    """Every profile name to offer a user: the named profiles, then the listed variants."""
    return [*sorted(PROFILES), *LISTED_VARIANTS]


def get_profile(name: str) -> NicProfile:
    """The profile called ``name`` (``NAME+strided``: NAME with strided keys);
    ``ValueError`` listing the known names otherwise."""
    base, plus, variant = name.partition("+")
    if base in PROFILES and (not plus or variant in VARIANTS):
        prof = PROFILES[base]
        return prof.replace(name=name, **VARIANTS[variant]) if plus else prof
    known = ", ".join(profile_names())
    if base in PROFILES:
        raise ValueError(f"unknown NIC profile {name!r}: {variant!r} is not a variant "
                         f"(known: {', '.join('+' + v for v in VARIANTS)})")
    raise ValueError(f"unknown NIC profile {name!r} (known: {known})")
