"""Which variants each profile offloads, why the others fall back, and measurements."""

from __future__ import annotations

import pytest

from kbtpsim.chains.compiler import VARIANTS
from kbtpsim.chains.layout import aligned_block
from kbtpsim.chains.measure import measure
from kbtpsim.chains.plan import decide, lowering_for
from kbtpsim.nic import PROFILES

#: cx5 with (hypothetical) strided keys: the what-if override; conditions as CAS-on-WQE (C5)
CX5S = PROFILES["cx5"].replace(name="cx5+strided", strided_keys=True)
GRID = {**PROFILES, CX5S.name: CX5S}
#: plain cx5 (RedN's stack: interleaved UMR table key) offloads every variant without ADDR_LE
OFFLOADED = {("ideal", True, v) for v in ("load", "store_inline", "store_read")} | {
    ("ideal-be", False, v) for v in VARIANTS} | {
    (p, False, v) for v in VARIANTS for p in ("cx5", "cx5+strided")}


#: the variants a chain has by default (FREE only with the LOADs' reader counts, C20:
#: tests/chains/v2/test_free.py)
DEFAULT = [v for v in VARIANTS if v != "free"]


@pytest.mark.parametrize("profile", sorted(GRID))
@pytest.mark.parametrize("addr_le", [False, True])
def test_decision_grid(profile: str, addr_le: bool) -> None:
    assert not decide("free", GRID[profile], addr_le).offloaded  # no reader counts
    for v in DEFAULT:
        d = decide(v, GRID[profile], addr_le)
        assert d.offloaded == ((profile, addr_le, v) in OFFLOADED), (profile, addr_le, v)
        if not d.offloaded:
            assert d.reasons()  # never silently software
        assert d.lowering == ("cas" if profile in ("cx5", "cx5+strided", "cx5-100g-roce",
                                                   "cx5-upstream") else "native")


def test_reasons_name_the_missing_capability_or_byte_order() -> None:
    # the calibration profile has cx5's timing and cross-channel but no UMR keys
    bare = PROFILES["cx5-100g-roce"]
    text = " ".join(decide("load", bare, False).reasons())
    assert "'indirect_keys'" in text and "decision D4" in text
    # conditions are CAS-on-WQE there (C5): conditional execution is not a reason
    assert "native_conditional" not in text and "conditional" not in text
    assert "byte-order" not in text  # big-endian WQEs, no ADDR_LE: orders match
    for v in DEFAULT:
        reasons = decide(v, bare, False).reasons()
        assert len(reasons) == 1 and "'indirect_keys'" in reasons[0], (v, reasons)
    # upstream rdma-core + stock firmware: every blocker named
    up = " ".join(decide("alloc_inline", PROFILES["cx5-upstream"], False).reasons())
    for needle in ("'wait_enable'", "'masked_atomics'", "'wqe_checks'", "zero-based"):
        assert needle in up, needle
    assert lowering_for(PROFILES["irdma"]) == "native"  # no cas_on_wqe, no WAIT/ENABLE
    irdma = " ".join(decide("load", PROFILES["irdma"], False).reasons())
    assert "big-endian but irdma WQE fields are little-endian" in irdma
    assert "'wait_enable'" in irdma
    alloc = " ".join(decide("alloc_inline", PROFILES["ideal"], True).reasons())
    assert "Ticket is little-endian" in alloc and "big-endian word" in alloc


def test_explain_names_what_unblocks_upstream() -> None:
    from kbtpsim.chains.plan import decide_op
    from kbtpsim.chains.render import explain

    for op in ("LOAD", "STORE", "ALLOC_STORE"):
        text = explain(decide_op(op, PROFILES["cx5-upstream"], False))
        assert "what would unblock it:" in text
        assert "IBV_EXP_WR_CQE_WAIT" in text and "disable_wqe_checks.sh" in text
        assert "offloaded to the NIC" not in text
        assert "offloaded to the NIC" in explain(decide_op(op, PROFILES["cx5"], False))


@pytest.mark.parametrize(("lo", "hi", "block"), [
    (0x4000, 0x4010, (0x4000, 4)), (0x4001, 0x4010, (0x4008, 3)), (5, 6, (5, 0)),
    (0x4000, 0x4000 + 100, (0x4000, 6)),
])
def test_aligned_block(lo: int, hi: int, block: tuple[int, int]) -> None:
    assert aligned_block(lo, hi) == block


def test_measure_fast_path_costs_no_request_cpu() -> None:
    fast = measure("ideal", "LOAD", 4096)
    assert fast.served == "NIC" and fast.cpu_ns_per_op == 0 and fast.refill_ns_per_op > 0
    slow = measure("cx5-upstream", "LOAD", 4096)
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
