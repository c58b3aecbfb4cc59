"""The published hardware figures the calibration profiles are set against, and the model's.

``PUBLISHED`` copies the rows of the calibration sources table (``docs/calibration.md``)
that a nicbench test measures, each marked in-sample (a parameter was fitted to it) or
out-of-sample; :func:`geomean_error` is a profile's error over its out-of-sample rows;
:func:`compare_published` runs those tests on the calibration profiles and returns each
model figure beside the published one with its relative error (the tables in
``docs/nic-model.md`` and ``docs/calibration.md`` are its output, printed by
``benchmarks/nic_calibration.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbtpsim.nic import bench
from kbtpsim.nic.profiles import get_profile
from kbtpsim.nic.units import Pcie
from kbtpsim.nic.wqe import Opcode, Sge, WorkRequest


@dataclass(frozen=True, slots=True)
class Published:
    profile: str
    test: str
    size: int
    value: float
    unit: str
    row: int  #: row number in docs/calibration.md
    source: str
    in_sample: bool = False  #: a parameter was fitted to this figure (docs/calibration.md)


_CX5 = "morrismeyer/warpforge holmes-lab/mark1/mellanox-perf/CONNECTX5.md"
_CX3 = "stmatengss/useful_shell_instructions tmp.sh"
_NFP = "pcie-bench/data nfp6000-1.2GHz_hsw-Xeon-E5-2620v3_dell-t630/lat_dma_sizes.txt"

PUBLISHED = (
    Published("cx5-100g-roce", "write_lat", 8, 990.0, "ns", 1, _CX5, True),
    Published("cx5-100g-roce", "send_lat", 8, 920.0, "ns", 2, _CX5, True),
    # in-sample: the TLP overhead (an estimate) was chosen with row 3 in view
    Published("cx5-100g-roce", "write_bw", 1 << 20, 55.9, "Gbps", 3, _CX5, True),
    Published("cx5-100g-roce", "read_bw", 1 << 20, 56.0, "Gbps", 3, _CX5, True),
    Published("cx3-40g-ib", "write_lat", 2, 980.0, "ns", 4, _CX3, True),
    Published("cx3-40g-ib", "write_lat", 4096, 3740.0, "ns", 4, _CX3, True),
    Published("cx3-40g-ib", "write_lat", 65536, 19970.0, "ns", 4, _CX3, True),
    Published("cx3-40g-ib", "send_lat", 2, 1070.0, "ns", 5, _CX3, True),
    Published("cx3-40g-ib", "send_lat", 4096, 3770.0, "ns", 5, _CX3, True),
    Published("cx3-40g-ib", "atomic_same", 8, 2.45, "Mops", 6, _CX3, True),
    # small-message rates on one QP (perftest -a: TX depth 128, CQ moderation 100)
    *(Published("cx3-40g-ib", "write_rate", s, v, "Mops", 11, _CX3, s == 8)
      for s, v in ((2, 5.13), (4, 7.55), (8, 7.43), (16, 7.41), (32, 7.79), (64, 5.17))),
    *(Published("cx3-40g-ib", "read_rate", s, v, "Mops", 12, _CX3, s == 8)
      for s, v in ((2, 4.55), (4, 4.53), (8, 4.55), (16, 4.53), (32, 4.67), (64, 4.68))),
    Published("cx3-40g-ib", "read_lat", 2, 1990.0, "ns", 14, _CX3),
    Published("cx3-40g-ib", "atomic_lat", 8, 2340.0, "ns", 14, _CX3),
    # A different device (Netronome NFP-6000): a range check of the PCIe parameters only.
    Published("cx5-100g-roce", "dma_read_lat", 8, 533.0, "ns", 8, _NFP),
    Published("cx5-100g-roce", "dma_read_lat", 64, 546.0, "ns", 8, _NFP),
    Published("cx5-100g-roce", "dma_read_lat", 512, 706.0, "ns", 8, _NFP),
    Published("cx5-100g-roce", "dma_read_lat", 2048, 1133.0, "ns", 8, _NFP),
)
#: rows that check a different device (not in a profile's out-of-sample error)
OTHER_DEVICE = frozenset({8})


def _bw(profile: str, opcode: Opcode, size: int) -> float:
    def make(rig: Any, i: int) -> WorkRequest:
        if opcode is Opcode.RDMA_WRITE:
            return bench._write_wr(rig, size, True, bench.S)
        return WorkRequest(opcode, (Sge(rig.bufa, size, rig.mra.lkey),), bench.S,
                           remote_addr=rig.bufb, rkey=rig.mrb.rkey)

    n, ps = bench._stream(profile, make, 32)
    return n * size * 8 / (ps / 1000)


def _rate(profile: str, opcode: Opcode, size: int, iters: int = 2000) -> float:
    """Message rate (M/s) of one QP as perftest's ``ib_{read,write}_bw`` runs it: TX depth
    128, one signaled WR in 100 (``--cq-mod``), one post (and doorbell) per WR."""
    def make(rig: Any, i: int) -> WorkRequest:
        if opcode is Opcode.RDMA_WRITE:
            return bench._write_wr(rig, size, True, bench.S)
        return WorkRequest(opcode, (Sge(rig.bufa, size, rig.mra.lkey),), bench.S,
                           remote_addr=rig.bufb, rkey=rig.mrb.rkey)

    n, ps = bench._stream(profile, make, iters, cq_mod=100)
    return n / (ps / 1e6)


def model_figure(profile: str, test: str, size: int) -> float:
    """The model's figure for one published row."""
    if test == "write_rate":
        return _rate(profile, Opcode.RDMA_WRITE, size)
    if test == "read_rate":
        return _rate(profile, Opcode.RDMA_READ, size)
    if test == "read_lat":
        return bench._rdma_lat(profile, size, 20, False)
    if test == "atomic_lat":
        return bench._rdma_lat(profile, size, 20, True)
    if test == "write_lat":
        return bench.write_lat(profile, size, 10)
    if test == "send_lat":
        return bench.send_lat(profile, size, 10)
    if test == "write_bw":
        return _bw(profile, Opcode.RDMA_WRITE, size)
    if test == "read_bw":
        return _bw(profile, Opcode.RDMA_READ, size)
    if test == "atomic_same":
        def make(rig: Any, i: int) -> WorkRequest:
            return WorkRequest(Opcode.FETCH_ADD, (Sge(rig.bufa, 8, rig.mra.lkey),), bench.S,
                               remote_addr=rig.bufb, rkey=rig.mrb.rkey, swap_add=1)

        n, ps = bench._stream(profile, make, 500)
        return n / (ps / 1e6)
    if test == "dma_read_lat":
        p = get_profile(profile)
        import simpy

        pcie = Pcie(simpy.Environment(), gbps=p.pcie_gbps, latency_ns=p.pcie_latency_ns,
                    mem_ns=p.host_mem_ns, nic_mem_ns=p.nic_mem_ns, mps=p.pcie_mps,
                    tlp_overhead=p.pcie_tlp_overhead)
        return (pcie.read_lat_ps + pcie.xfer_ps(size)) / 1000
    raise ValueError(f"no model figure for test {test!r}")


def compare_published() -> list[dict[str, Any]]:
    """Each published figure beside the model's, with the relative error."""
    out = []
    for pub in PUBLISHED:
        model = model_figure(pub.profile, pub.test, pub.size)
        out.append({"profile": pub.profile, "test": pub.test, "size": pub.size,
                    "unit": pub.unit, "published": pub.value, "model": round(model, 2),
                    "rel_err": round((model - pub.value) / pub.value, 4), "row": pub.row,
                    "source": pub.source, "in_sample": pub.in_sample})
    return out


def geomean_error(rows: list[dict[str, Any]], profile: str) -> tuple[float, int]:
    """(error, n) over ``profile``'s out-of-sample rows of its own device: the geometric
    mean of model/published folded to >= 1, minus 1 (``exp(mean |ln(m/p)|) - 1``)."""
    import math

    logs = [abs(math.log(r["model"] / r["published"])) for r in rows
            if r["profile"] == profile and not r["in_sample"]
            and r["row"] not in OTHER_DEVICE]
    if not logs:
        return math.nan, 0
    return math.exp(sum(logs) / len(logs)) - 1, len(logs)
