"""The chains' keys: a strided table key with a base index, the pool region's Block
Offsets as Tagged Offsets (``Nic.register_mr(..., base_to=)``)."""

from __future__ import annotations

from kbtpsim.chains.layout import STRIDE, ChainLayout
from kbtpsim.nic import Access, Simulation
from kbtpsim.target import InitiatorConfig, TargetConfig
from kbtpsim.target.layout import TargetLayout


def test_table_anywhere_and_pool_offsets() -> None:
    config = TargetConfig(blocks=4, block_size=4096, addr_le=True, max_inline=4096,
                          initiators=(InitiatorConfig("A", b"\x01" * 16, 4, 0x4000, 16),))
    tl = TargetLayout.plan(config, 0x10000)  # table below 16 x Table Base Handle
    assert tl.table_addr < 16 * tl.table_base_handle
    lay = ChainLayout.of(tl, config)
    nic = Simulation().add_nic("t", "ideal")
    table, pool = lay.register(nic)
    assert table is not None
    h = lay.table_base + 3
    assert nic.pt.translate(table.rkey, h * STRIDE + 4, 12, int(Access.REMOTE_WRITE)) == \
        lay.entry_addr(h) + 4
    assert nic.pt.translate(table.rkey, h * STRIDE, 8, int(Access.REMOTE_ATOMIC)) == \
        lay.entry_addr(h)
    bo = (config.first_block + 1) * config.block_size
    assert nic.pt.translate(pool.lkey, bo, 4096, int(Access.LOCAL_WRITE)) == lay.block_addr(bo)
