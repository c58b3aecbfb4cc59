"""bench.py: latency rows and closed-loop throughput; the NIC additions it relies on."""

from __future__ import annotations

import pytest

from kbtpsim.nic import Access, ProtectionError, Simulation
from kbtpsim.system import bench


def test_small_loads_are_cpu_bound_and_scale_with_cores() -> None:
    one = bench.throughput(size=64, cores=1, initiators=2, requests=40)
    two = bench.throughput(size=64, cores=2, initiators=2, requests=40)
    assert one["cpu_utilisation"] > 0.9
    assert 1.2e6 < one["ops_per_s"] < 1.7e6  # ~620 ns of target CPU per LOAD
    assert two["ops_per_s"] > 1.7 * one["ops_per_s"]


def test_latency_rows() -> None:
    rows = bench.measure("cx5", sizes=(4096,), repeat=1)
    by_op = {r["op"]: r for r in rows}
    assert set(by_op) >= {"LOAD", "STORE", "STORE inline", "ALLOC_STORE", "DIRECT_LOAD"}
    assert by_op["DIRECT_LOAD"]["cpu_ns"] is None
    assert by_op["LOAD"]["latency_ns"] < by_op["DIRECT_LOAD"]["latency_ns"]
    assert "| LOAD | 4096 |" in bench.format_rows(rows)


def test_register_and_bind_with_explicit_tagged_offsets_and_stags() -> None:
    nic = Simulation().add_nic("n", "cx5")
    qp = nic.create_qp(nic.create_cq(4), nic.create_cq(4))
    addr = nic.host.alloc(8192)
    mr = nic.register_mr(addr, 8192, Access.LOCAL_WRITE | Access.MW_BIND, base_to=0x1000,
                         stag=0x7AB1)
    assert mr.stag == 0x7AB1 and nic.pt.translate(0x7AB1, 0x1010, 16, 0) == addr + 0x10
    win = nic.bind_mw(mr, qp, addr + 4096, 4096, Access.REMOTE_WRITE, base_to=0x30000)
    assert nic.pt.translate(win.stag, 0x30008, 8, int(Access.REMOTE_WRITE), qp.qpn) == \
        addr + 4096 + 8
    with pytest.raises(ProtectionError, match="in use"):
        nic.register_mr(addr, 64, Access.LOCAL_WRITE, stag=0x7AB1)
    with pytest.raises(ProtectionError, match="valid"):
        nic.register_mr(addr, 64, Access.LOCAL_WRITE, stag=0x100)
    # automatic STags skip one taken explicitly
    taken = nic.register_mr(addr, 64, Access.LOCAL_WRITE, stag=(100 << 8) | 0x5A)
    assert all(nic.register_mr(addr, 64, Access.LOCAL_WRITE).stag != taken.stag
               for _ in range(120))
