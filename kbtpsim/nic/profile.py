"""NIC profiles: frozen parameter sets, their validation and the named registry.

Every parameter is documented (with its source, or marked as an estimate) in
``docs/nic-model.md``. Times are in nanoseconds, bandwidths in Gb/s, sizes in octets; the
NIC converts them once to integer picoseconds. ``profile.replace(**overrides)`` returns a
validated copy; an unknown name or an impossible value raises ``ValueError`` naming it.

Capability flags chains query: ``wait_enable``, ``masked_atomics``, ``cas_on_wqe``,
``wqe_checks``, ``indirect_keys``, ``native_conditional``, ``strided_keys`` (hypothetical:
a what-if override), ``max_sge``, ``wqe_field_byte_order``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

_POSITIVE = (
    "clock_mhz", "link_gbps", "pcie_gbps", "pcie_mps", "pcie_mrrs", "mtu", "max_sge",
    "sq_wqe_size", "max_rd_atomic", "atomic_lock_slots", "atomic_units", "loopback_gbps",
    "pu_count", "dma_engines",
)
_NON_NEGATIVE = (
    "doorbell_cycles", "fetch_cycles", "decode_cycles", "tx_cycles", "rx_cycles",
    "atomic_cycles", "cqe_cycles", "pcie_latency_ns", "host_mem_ns", "nic_mem_ns",
    "mmio_ns", "cpu_poll_ns", "wire_overhead", "propagation_ns", "phy_ns", "switch_ns",
    "loopback_ns", "prefetch_depth", "pcie_tlp_overhead", "max_inline", "ooo_jitter_ns",
    "cpu_post_ns", "cpu_doorbell_ns", "umr_cycles", "indirect_xlat_ns", "read_req_cycles",
)
_POW2 = ("pcie_mps", "pcie_mrrs", "sq_wqe_size", "mtu", "atomic_lock_slots")


@dataclass(frozen=True, slots=True)
class NicProfile:
    """One NIC's parameters and capabilities (see docs/nic-model.md, "Parameters")."""

    name: str
    # --- clock and per-unit costs (cycles of the NIC clock) ---
    clock_mhz: float = 500.0
    doorbell_cycles: int = 20
    fetch_cycles: int = 10
    decode_cycles: int = 25
    tx_cycles: int = 20
    rx_cycles: int = 20
    atomic_cycles: int = 30
    cqe_cycles: int = 15
    #: responder's extra receive-unit work per RDMA Read request (setting up the response)
    read_req_cycles: int = 0
    pu_count: int = 1  #: parallel processing units (decode, tx, rx, completion)
    dma_engines: int = 1
    atomic_units: int = 4
    atomic_lock_slots: int = 64
    # --- host interface: PCIe ---
    pcie_latency_ns: float = 250.0  #: one-way NIC <-> host memory controller
    host_mem_ns: float = 80.0  #: DRAM access added to a DMA read
    pcie_gbps: float = 63.0  #: raw per-direction bandwidth (Gen3 x8 = 7.88 GB/s)
    pcie_mps: int = 256
    pcie_mrrs: int = 512
    pcie_tlp_overhead: int = 24
    mmio_ns: float = 250.0  #: CPU doorbell write until the NIC sees it
    cpu_post_ns: float = 60.0  #: CPU cost of building and posting one WQE
    cpu_poll_ns: float = 40.0  #: CPU polling loop: mean delay to notice a change
    cpu_doorbell_ns: float = 100.0  #: CPU cost of one MMIO doorbell (write-combining flush)
    nic_mem_ns: float = 20.0  #: on-NIC (device) memory access
    # --- network ---
    link_gbps: float = 100.0
    mtu: int = 4096
    wire_overhead: int = 78  #: per-packet header, CRC, preamble, inter-frame gap
    propagation_ns: float = 10.0
    phy_ns: float = 0.0  #: MAC + PHY (+ FEC) latency of one link traversal, both ends
    switch_ns: float = 0.0
    loopback_ns: float = 50.0
    loopback_gbps: float = 200.0
    # --- queues and behaviour ---
    prefetch_depth: int = 8
    prefetch_past_wait: bool = False
    max_rd_atomic: int = 16
    max_inline: int = 64
    blueflame: bool = True
    sq_wqe_size: int = 128
    wqe_checks: bool = False
    placement: str = "in_order"  #: "in_order" (IB/RoCE) or "rdmap" (RFC 5040 rule 3)
    ooo_jitter_ns: float = 0.0  #: rdmap: extra placement delay drawn per Write packet
    # --- capabilities ---
    wait_enable: bool = True
    masked_atomics: bool = True
    cas_on_wqe: bool = True
    native_conditional: bool = False
    strided_keys: bool = False  #: hypothetical (no NIC offers it): what-if override
    #: indirect memory keys built by a UMR WQE (kbtpsim.nic.keys): "none", "exp_umr"
    #: (MLNX_OFED 4.x experimental verbs) or "mlx5dv" (upstream rdma-core)
    indirect_keys: str = "none"
    umr_cycles: int = 200  #: estimate: NIC work to write one mkey context and its entries
    indirect_xlat_ns: float = 20.0  #: estimate: extra translation per indirect-key access
    max_sge: int = 16
    wqe_field_byte_order: str = "big"
    atomic_byte_order: str = "big"
    loopback: bool = True

    def __post_init__(self) -> None:
        for name in _POSITIVE + _NON_NEGATIVE:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"NIC profile parameter {name!r} must be a number, "
                                 f"got {value!r}")
        for name in _POSITIVE:
            if not getattr(self, name) > 0:
                raise ValueError(f"NIC profile parameter {name!r} must be positive, "
                                 f"got {getattr(self, name)!r}")
        for name in _NON_NEGATIVE:
            if not getattr(self, name) >= 0:
                raise ValueError(f"NIC profile parameter {name!r} must be >= 0, "
                                 f"got {getattr(self, name)!r}")
        for name in _POW2:
            value = getattr(self, name)
            if int(value) != value or int(value) & (int(value) - 1):
                raise ValueError(f"NIC profile parameter {name!r} must be a power of two, "
                                 f"got {value!r}")
        for name in ("wqe_field_byte_order", "atomic_byte_order"):
            if getattr(self, name) not in ("big", "little"):
                raise ValueError(f"NIC profile parameter {name!r} must be 'big' or 'little'")
        if self.indirect_keys not in ("none", "exp_umr", "mlx5dv"):
            raise ValueError("NIC profile parameter 'indirect_keys' must be 'none', "
                             f"'exp_umr' or 'mlx5dv', got {self.indirect_keys!r}")
        if self.placement not in ("in_order", "rdmap"):
            raise ValueError("NIC profile parameter 'placement' must be 'in_order' or 'rdmap'")
        if self.sq_wqe_size < 64:
            raise ValueError("NIC profile parameter 'sq_wqe_size' must be at least 64")
        if 16 + 16 * self.max_sge > 4096:
            raise ValueError("NIC profile parameter 'max_sge' is too large (receive WQE > 4 KiB)")
        if self.max_inline + 36 > self.sq_wqe_size:
            raise ValueError("NIC profile parameter 'max_inline' does not fit 'sq_wqe_size'")

    def replace(self, **overrides: Any) -> NicProfile:
        """A validated copy with some parameters changed."""
        names = {f.name for f in dataclasses.fields(self)}
        for key in overrides:
            if key not in names:
                raise ValueError(f"unknown NIC profile parameter {key!r}")
        return dataclasses.replace(self, **overrides)

    @property
    def rq_wqe_size(self) -> int:
        """Receive WQE stride: max_sge data segments, rounded up to a power of two."""
        size = 16 * self.max_sge
        return 1 << (size - 1).bit_length()

    @property
    def cycle_ps(self) -> float:
        return 1e6 / self.clock_mhz
