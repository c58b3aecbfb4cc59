"""TargetLayout: placement of the table, rings, counters and pool (docs/decisions.md, T14)."""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbtpsim.target import CounterMode, Target, TargetConfig
from kbtpsim.target.bytestore import SparseBytes
from kbtpsim.target.layout import TargetLayout
from kbtpsim.wire import Feature, TableEntry

from .harness import BS, Client, ini

DA = Feature.DIRECT_ALLOC


def config(**kw: object) -> TargetConfig:
    base: dict[str, object] = {
        "blocks": 16, "block_size": BS, "first_block": 3,
        "initiators": (ini("a", 3, 0x100, 8, features=DA), ini("b", 2, 0x200, 8),
                       ini("c", 5, 0x300, 4, features=DA)),
    }
    return TargetConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_plan_places_everything_apart_and_aligned() -> None:
    cfg = config()
    lay = TargetLayout.plan(cfg, 0x1234_5678, align=4096)
    assert [r.name for r in lay.rings] == ["shared", "direct:a", "direct:c"]
    assert [r.n_slots for r in lay.rings] == [16, 4, 8]  # shared N from all blocks
    assert (lay.table_base_handle, lay.table_count) == (0x100, 0x204)
    assert lay.table_addr % 4096 == 0 and lay.table_addr >= 0x1234_5678
    assert lay.pool_addr % 4096 == 0
    for ring in lay.rings:
        assert ring.slots_addr % 4096 == 0
        assert ring.head_addr % 8 == 0 and ring.tail_addr % 8 == 0
        assert ring.slot_addr(48) == ring.slots_addr + 48
    regions = sorted((a, a + n) for _, a, n in lay.regions(cfg))
    for (_, end), (start, _) in pairwise(regions):
        assert end <= start
    assert lay.entry_addr(0x100) == lay.table_addr
    assert lay.entry_addr(0x303) == lay.table_addr + 16 * 0x203
    assert lay.block_addr(3 * BS) == lay.pool_addr + 3 * BS
    assert Target(cfg).layout == TargetLayout.plan(cfg)  # planned in dict mode too


@given(blocks=st.integers(1, 64), first=st.integers(0, 100), align=st.sampled_from([8, 64, 4096]),
       quotas=st.lists(st.integers(1, 4), max_size=3), base=st.integers(0, 1 << 40))
def test_plan_never_overlaps(blocks: int, first: int, align: int, quotas: list[int],
                             base: int) -> None:
    quotas = quotas[: max(0, blocks // 4)]
    inits = tuple(ini(f"i{n}", q, 0x1000 * (n + 1), 16, features=DA if n % 2 else 0)
                  for n, q in enumerate(quotas))
    cfg = TargetConfig(blocks=blocks, block_size=BS, first_block=first, initiators=inits)
    lay = TargetLayout.plan(cfg, base, align=align)
    regions = sorted((a, a + n, name) for name, a, n in lay.regions(cfg) if n)
    assert regions[0][0] >= base
    for (_, end, _), (start, _, _) in pairwise(regions):
        assert end <= start
    for ring in lay.rings:
        assert ring.head_addr % 8 == 0 and ring.tail_addr % 8 == 0
        assert ring.slots_addr % align == 0


def test_bad_layouts_are_refused() -> None:
    cfg = config()
    lay = TargetLayout.plan(cfg)
    with pytest.raises(ValueError, match="align"):
        TargetLayout.plan(cfg, align=12)
    with pytest.raises(ValueError, match="8-aligned"):
        dataclasses.replace(lay, rings=(dataclasses.replace(lay.rings[0], head_addr=4),
                                        *lay.rings[1:]))
    with pytest.raises(ValueError, match="overlap"):
        bad = dataclasses.replace(lay, pool_addr=lay.table_addr - 3 * BS)
        Target(cfg, store=SparseBytes(), layout=bad)
    with pytest.raises(ValueError, match="rings"):
        Target(cfg, layout=dataclasses.replace(lay, rings=lay.rings[:1]))
    with pytest.raises(ValueError, match="counter_byte_order"):
        dataclasses.replace(lay, counter_byte_order="middle")  # type: ignore[arg-type]


@pytest.mark.parametrize("addr_le", [False, True])
@pytest.mark.parametrize("order", ["big", "little"])
@pytest.mark.parametrize("mode", [CounterMode.MASKED, CounterMode.UNMASKED])
def test_byte_orders_in_memory(addr_le: bool, order: str, mode: CounterMode) -> None:
    """Block Offset fields follow ADDR_LE; Head/Tail are in counter_byte_order."""
    cfg = config(addr_le=addr_le, counter_mode=mode)
    store = SparseBytes()
    lay = TargetLayout.plan(cfg, counter_byte_order=order)  # type: ignore[arg-type]
    target = Target(cfg, store=store, layout=lay)
    shared = lay.rings[0]
    f = len(target.shared_ring.blocks)
    # initial slot 1: Sequence 1 (big-endian), Reserved, block 4 (first_block 3 + 1)
    raw = store.read(shared.slot_addr(16), 16)
    assert raw[:8] == b"\0\0\0\1\0\0\0\0"
    assert raw[8:] == (4 * BS).to_bytes(8, "little" if addr_le else "big")
    tail = store.read(shared.tail_addr, 8)
    word = (f << 32 | 16 * f) if mode is CounterMode.MASKED else f << 32
    assert tail == word.to_bytes(8, order)  # type: ignore[arg-type]
    target.connect(1, 0)
    client = Client(target, "b", 1)
    client.hello()
    client.alloc_store(0x201, b"hello")
    raw = store.read(lay.entry_addr(0x201), 16)
    assert raw[:8] == b"\x00\x01\x00\x02\x00\x00\x00\x05"  # VALID, Generation 2, Length 5
    assert raw[8:] == (3 * BS).to_bytes(8, "little" if addr_le else "big")
    assert TableEntry.decode(raw, addr_le).block_offset == 3 * BS
    assert store.read(lay.block_addr(3 * BS), 5) == b"hello"
    head = (1 << 32 | 16) if mode is CounterMode.MASKED else 1 << 32
    assert store.read(shared.head_addr, 8) == head.to_bytes(8, order)  # type: ignore[arg-type]
    # never-bound entries read as Generation 1 (decision D1)
    assert store.read(lay.entry_addr(0x300), 16) == TableEntry(generation=1).encode(addr_le)
