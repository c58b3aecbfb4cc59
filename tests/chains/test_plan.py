"""Which variants each profile offloads, why the others fall back, and measurements."""

from __future__ import annotations

import pytest

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.layout import aligned_block
from kbtpsim.chains.measure import measure
from kbtpsim.chains.plan import decide, lowering_for
from kbtpsim.nic import PROFILES

#: cx5 with strided keys: no native conditional WRs, conditions as CAS-on-WQE (C5)
CX5S = PROFILES["cx5"].replace(name="cx5+strided", strided_keys=True)
GRID = {**PROFILES, CX5S.name: CX5S}
OFFLOADED = {("ideal", True, v) for v in ("load", "store_inline", "store_read")} | {
    ("ideal-be", False, v) for v in VARIANTS} | {("cx5+strided", False, v) for v in VARIANTS}


@pytest.mark.parametrize("profile", sorted(GRID))
@pytest.mark.parametrize("addr_le", [False, True])
def test_decision_grid(profile: str, addr_le: bool) -> None:
    for v in VARIANTS:
        d = decide(v, GRID[profile], addr_le)
        assert d.offloaded == ((profile, addr_le, v) in OFFLOADED), (profile, addr_le, v)
        if not d.offloaded:
            assert d.reasons()  # never silently software
        assert d.lowering == ("cas" if profile in ("cx5", "cx5+strided", "cx5-100g-roce")
                              else "native")


def test_reasons_name_the_missing_capability_or_byte_order() -> None:
    cx5 = " ".join(decide("load", PROFILES["cx5"], False).reasons())
    assert "'strided_keys'" in cx5 and "decision D4" in cx5
    # conditions are CAS-on-WQE on cx5 (C5): conditional execution is not a reason
    assert "native_conditional" not in cx5 and "conditional" not in cx5
    assert "byte-order" not in cx5  # big-endian WQEs, no ADDR_LE: orders match
    for v in VARIANTS:
        reasons = decide(v, PROFILES["cx5"], False).reasons()
        assert len(reasons) == 1 and "'strided_keys'" in reasons[0], (v, reasons)
    assert lowering_for(PROFILES["irdma"]) == "native"  # no cas_on_wqe, no WAIT/ENABLE
    irdma = " ".join(decide("load", PROFILES["irdma"], False).reasons())
    assert "big-endian but irdma WQE fields are little-endian" in irdma
    assert "'wait_enable'" in irdma
    alloc = " ".join(decide("alloc_inline", PROFILES["ideal"], True).reasons())
    assert "Ticket is little-endian" in alloc and "big-endian word" in alloc


@pytest.mark.parametrize(("lo", "hi", "block"), [
    (0x4000, 0x4010, (0x4000, 4)), (0x4001, 0x4010, (0x4008, 3)), (5, 6, (5, 0)),
    (0x4000, 0x4000 + 100, (0x4000, 6)),
])
def test_aligned_block(lo: int, hi: int, block: tuple[int, int]) -> None:
    assert aligned_block(lo, hi) == block


def test_measure_fast_path_costs_no_request_cpu() -> None:
    fast = measure("ideal", "LOAD", 4096)
    assert fast.served == "NIC" and fast.cpu_ns_per_op == 0 and fast.refill_ns_per_op > 0
    slow = measure("cx5", "LOAD", 4096)
    assert slow.served == "CPU" and slow.cpu_ns_per_op > 0


def test_geometry_of_a_connection() -> None:
    from kbtpsim.chains.harness import iid
    from kbtpsim.chains.layout import ChainLayout
    from kbtpsim.target import InitiatorConfig, TargetConfig
    from kbtpsim.target.layout import TargetLayout

    def geo(domain_b: str):  # type: ignore[no-untyped-def]
        cfg = TargetConfig(blocks=8, block_size=4096, initiators=(
            InitiatorConfig("A", iid("A"), 4, 0x4000, 16),
            InitiatorConfig("B", iid("B"), 4, 0x4010, 16, trust_domain=domain_b)))
        lay = ChainLayout.of(TargetLayout.plan(cfg, 1 << 40), cfg)
        return lay.geometry(cfg, "A")

    same = geo("default")
    assert same.own_block == (0x4000, 4) and same.load_block == (0x4000, 5)
    assert same.table_block == (0x4000, 5)
    other = geo("other")
    assert other.load_block == (0x4000, 4)  # B's handles are not A's to load
