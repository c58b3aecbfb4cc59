"""The chains' keys: a strided table key with a base index, the pool region's Block
Offsets as Tagged Offsets (``Nic.register_mr(..., base_to=)``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from kbtpsim.chains.layout import STRIDE, ChainLayout, enclosing_block
from kbtpsim.chains.server import OffloadedTargetServer
from kbtpsim.nic import Access, Simulation
from kbtpsim.system import Initiator
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


def test_enclosing_block() -> None:
    assert enclosing_block((0x2000, 5), 0x1000, 0x2020) == (0x2000, 5)
    assert enclosing_block((0x2000, 5), 0x1000, 0x4000) == (0x2000, 13)
    assert enclosing_block((0x1100, 5), 0x1000, 0x1120) == (0x1100, 5)
    assert enclosing_block((0x1000, 4), 0x1000, 0x1100) == (0x1000, 8)
    with pytest.raises(ValueError, match="not inside"):
        enclosing_block((0x3000, 5), 0x1000, 0x2020)


@pytest.mark.parametrize(("base", "count"), [(0x2000, 32), (0x2000, 256), (0x1100, 32)])
def test_every_initiator_s_handles_pass_the_table_test(base: int, count: int) -> None:
    """Regression: the table test used the table's largest aligned block, which held the
    first initiator's range only, so every later initiator's requests went to the CPU."""
    config = TargetConfig(blocks=16, block_size=4096, initiators=(
        InitiatorConfig("a", b"\x01" * 16, 4, 0x1000, 32),
        InitiatorConfig("b", b"\x02" * 16, 8, base, count)))
    lay = ChainLayout.of(TargetLayout.plan(config, 0x10000), config)
    for name, lo, n in (("a", 0x1000, 32), ("b", base, count)):
        geo = lay.geometry(config, name)
        tb, bits = geo.table_block
        assert tb <= lo and lo + n <= tb + (1 << bits)  # own range inside the table test
        ob, obits = geo.own_block
        assert (ob, obits) == (lo, (n - 1).bit_length())


def test_a_second_initiator_is_served_by_the_nic() -> None:
    config = TargetConfig(blocks=16, block_size=4096, request_credits=4, initiators=(
        InitiatorConfig("a", Initiator.random_id(0, "a"), 4, 0x1000, 32),
        InitiatorConfig("b", Initiator.random_id(0, "b"), 8, 0x2000, 32)))
    sim = Simulation(seed=0)
    srv = OffloadedTargetServer(sim, config, profile="ideal-be")
    ini = Initiator(sim, "b", seed=0, profile="ideal-be",
                    initiator_id=Initiator.random_id(0, "b"))

    def work() -> Generator[simpy.Event, Any, None]:
        yield ini.connect(srv)
        yield ini.alloc_store(0x2000, b"\x01" * 4096, seal=True)
        yield ini.load(0x2000, invalidate=False)

    sim.env.run(until=sim.env.process(work()))
    sim.env.run(until=sim.env.now + 50_000_000)  # the CPU notices the last credit
    assert srv.served["ALLOC_STORE"] == {"nic": 1, "cpu": 0}
    assert srv.served["LOAD"] == {"nic": 1, "cpu": 0}


def test_a_load_block_spans_the_trust_domain() -> None:
    """Initiators of one trust domain load each other's handles in the NIC: the offloaded
    server widens the table to an aligned block so the LOAD block can hold every range
    (the gaps between ranges are never VALID: the CPU answers INVALID_HANDLE)."""
    from kbtpsim.chains.server import aligned_table

    inits = (InitiatorConfig("p", b"\x01" * 16, 4, 0x1000, 256),
             InitiatorConfig("d0", b"\x02" * 16, 0, 0x2000, 32),
             InitiatorConfig("d1", b"\x03" * 16, 0, 0x3000, 32),
             InitiatorConfig("x", b"\x04" * 16, 0, 0x4000, 32, trust_domain="other"))
    config = TargetConfig(blocks=16, block_size=4096, initiators=inits)
    assert aligned_table(config) == (0, 0x8000)
    config = TargetConfig(blocks=16, block_size=4096, initiators=inits,
                          table_range=aligned_table(config))
    lay = ChainLayout.of(TargetLayout.plan(config, 0x10000), config)
    for name in ("p", "d0", "d1"):  # the domain's ranges, not x's
        assert lay.geometry(config, name).load_block == (0, 14)
    assert lay.geometry(config, "x").load_block == (0x4000, 14)
    with pytest.raises(ValueError, match="table_range"):
        TargetConfig(blocks=16, block_size=4096, initiators=inits, table_range=(0x1000, 16))
