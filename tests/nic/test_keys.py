"""Indirect (UMR-built) memory keys: layouts, their limits, translation and setup cost."""

from __future__ import annotations

import pytest

from kbtpsim.nic import PROFILES, Access
from kbtpsim.nic.keys import (
    EXP_UMR,
    KLM_MAX,
    MLX5DV,
    Entry,
    IndirectLayout,
    KeyLayoutError,
    Layout,
    check_layout,
    max_entries,
    plan_pool_key,
    plan_table_key,
    umr_cost,
    umr_wqe_size,
)
from kbtpsim.nic.protection import R_REMOTE_READ, R_REMOTE_WRITE, ProtectionTable
from kbtpsim.nic.sim import Simulation
from kbtpsim.nic.umr import pool_key, table_key

RW = Access.LOCAL_WRITE | Access.REMOTE_READ | Access.REMOTE_WRITE


def test_interleaved_key_maps_handle_shifted_one_octet_to_its_entry() -> None:
    sim = Simulation(seed=0)
    nic = sim.add_nic("t", "cx5")
    table = 0x10_0000
    built = table_key(nic, table, 0x1000, 64, RW)
    stag = built.key.stag
    for h in (0x1000, 0x1001, 0x1023, 0x103F):
        for j in (0, 8):
            assert nic.pt.translate(stag, (h << 8) + j, 8, R_REMOTE_READ) == \
                table + 16 * (h - 0x1000) + j
    # outside the table, across the entry's end, into the filler: refused or not an entry
    assert nic.pt.translate(stag, 0x0FFF << 8, 8, R_REMOTE_READ) == -1
    assert nic.pt.translate(stag, 0x1040 << 8, 8, R_REMOTE_READ) == -1
    assert nic.pt.translate(stag, (0x1000 << 8) + 12, 8, R_REMOTE_READ) == -1
    filler = nic.pt.translate(stag, (0x1000 << 8) + 16, 8, R_REMOTE_READ)
    assert not table <= filler < table + 16 * 64
    # the translation cost is set per key (profile's indirect_xlat_ns, an estimate)
    assert nic.pt.xlat_ps[stag] == round(PROFILES["cx5"].indirect_xlat_ns * 1000)
    # the UMR WQE: ctrl + UMR ctrl + mkey context + repeat block header and 2 entries
    assert built.cost.wqe_octets == 128 + 64 and built.cost.nic_ps > 0


def test_pool_list_key_is_block_offset_addressed() -> None:
    sim = Simulation(seed=0)
    nic = sim.add_nic("t", "cx5")
    built = pool_key(nic, 0x200_0000 + 3 * 4096, 3 * 4096, 8 * 4096, RW)
    assert nic.pt.translate(built.key.stag, 3 * 4096, 4096, R_REMOTE_WRITE) == \
        0x200_0000 + 3 * 4096
    assert nic.pt.translate(built.key.stag, 11 * 4096, 1, R_REMOTE_WRITE) == -1
    assert nic.pt.translate(built.key.stag, 3 * 4096 - 1, 1, R_REMOTE_WRITE) == -1


def test_pool_beyond_2gb_takes_several_klm_entries() -> None:
    layout = plan_pool_key(EXP_UMR, 0, 5 * (1 << 30))
    assert [e.byte_count for e in layout.entries] == [KLM_MAX, KLM_MAX, 1 << 30]
    with pytest.raises(KeyLayoutError, match=r"translation entries; one inline UMR WQE"):
        plan_pool_key(EXP_UMR, 0, 40 * KLM_MAX)


def test_entry_region_rights_are_checked() -> None:
    pt = ProtectionTable()
    ro = pt.register(0x1000, 4096, Access.LOCAL_READ)
    layout = IndirectLayout(Layout.LIST, (Entry(0x1000, 4096, ro.lkey),))
    key = pt.register_indirect(layout, RW)
    assert pt.translate(key.stag, 0, 8, R_REMOTE_READ) == 0x1000
    assert pt.translate(key.stag, 0, 8, R_REMOTE_WRITE) == -1  # entry lacks LOCAL_WRITE


@pytest.mark.parametrize(("api", "layout", "needle"), [
    (EXP_UMR, IndirectLayout(Layout.INTERLEAVED, (Entry(0, 1 << 16, 1, 1 << 16),), 4),
     "entry 0 byte_count 65536 is not in 1..65535 (16-bit field)"),
    (EXP_UMR, IndirectLayout(Layout.INTERLEAVED, (Entry(0, 16, 1, 1 << 16),), 4),
     "entry 0 stride 65536 is not in 0..65535"),
    (EXP_UMR, IndirectLayout(Layout.INTERLEAVED, (Entry(0, 16, 1, 16),), 1 << 32),
     "repeat_count 4294967296 is not in 1..4294967295 (32-bit field)"),
    (MLX5DV, IndirectLayout(Layout.INTERLEAVED, (Entry(0, 16, 1, 8),), 4),
     "stride 8 < byte_count 16: mlx5dv sets stride = bytes_count + bytes_skip"),
    (MLX5DV, IndirectLayout(Layout.LIST, (Entry(0, 16, 1),), 1, 0x100),
     "zero-based"),
    (EXP_UMR, IndirectLayout(Layout.LIST, (Entry(0, KLM_MAX + 1, 1),)),
     "a KLM maps up to 2 GB"),
    ("none", IndirectLayout(Layout.LIST, (Entry(0, 16, 1),)), "no indirect keys"),
])
def test_limits_are_one_line_errors(api: str, layout: IndirectLayout, needle: str) -> None:
    with pytest.raises(KeyLayoutError) as exc:
        check_layout(api, layout, "the key")
    msg = str(exc.value)
    assert needle in msg and msg.startswith("the key: ") and "\n" not in msg


def test_table_key_plans() -> None:
    plan = plan_table_key(EXP_UMR, 0x1000, 1024)
    assert plan.layout.start == 0x1000 << 8 and plan.layout.repeat_count == 1024
    assert plan.filler_size == 240 * 1024
    with pytest.raises(KeyLayoutError, match="zero-based"):
        plan_table_key(MLX5DV, 0x1000, 1024)
    assert plan_table_key(MLX5DV, 0, 1024).layout.start == 0  # a table from handle 0 fits
    with pytest.raises(KeyLayoutError, match="repeat_count"):
        plan_table_key(EXP_UMR, 0x1000, 1 << 32)


def test_entry_budget_and_wqe_size() -> None:
    assert max_entries(MLX5DV, Layout.INTERLEAVED) == max_entries(MLX5DV, Layout.LIST) - 1
    one = IndirectLayout(Layout.LIST, (Entry(0, 16, 1),))
    five = IndirectLayout(Layout.LIST, tuple(Entry(0, 16, 1) for _ in range(5)))
    assert umr_wqe_size(one) == 128 + 64 and umr_wqe_size(five) == 128 + 128
    assert umr_cost(PROFILES["cx5"], five).nic_ps > umr_cost(PROFILES["cx5"], one).nic_ps


def test_profiles_name_their_stack() -> None:
    cx5, up = PROFILES["cx5"], PROFILES["cx5-upstream"]
    assert cx5.indirect_keys == "exp_umr" and not cx5.strided_keys
    assert cx5.wait_enable and cx5.masked_atomics and not cx5.wqe_checks
    assert up.indirect_keys == "mlx5dv" and not up.wait_enable and not up.masked_atomics
    assert up.wqe_checks
    with pytest.raises(ValueError, match="'indirect_keys' must be"):
        cx5.replace(indirect_keys="magic")
