"""A pool of 2^25 blocks of 32 KiB (1 TiB) costs memory only for the blocks written,
with the dict-backed and the memory-backed (byte store laid out as the draft says) target."""

from __future__ import annotations

import tracemalloc

import pytest

from kbtpsim.sparse import SparseMemory
from kbtpsim.target import Target, TargetConfig
from kbtpsim.wire import AllocStore, DataDescriptor, RequestFlag, Status

from .harness import Client, ini, loaded_data

BLOCKS = 1 << 25
STORES = 10_000
GIB = 1 << 30


@pytest.mark.parametrize("memory_backed", [False, True], ids=["dict", "bytes"])
def test_sparse_pool_table_and_ring(memory_backed: bool) -> None:
    tracemalloc.start()
    try:
        config = TargetConfig(blocks=BLOCKS, block_size=32 * 1024,
                              initiators=(ini("big", STORES, 0, count=1 << 24),))
        target = Target(config, store=SparseMemory() if memory_backed else None)
        target.connect(1, 0)
        client = Client(target, "big", 1)
        client.hello()
        payload = bytes(range(256)) * 16  # 4 KiB inline per store
        for h in range(STORES):
            msg = AllocStore(flags=RequestFlag.INLINE, request_id=h, handle=h,
                             data_descriptor=DataDescriptor(0, 0, len(payload)),
                             inline_data=payload)
            (effect,) = client.send(msg)
            assert effect.message.status is Status.OK
        target.check_invariant()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stats = target.stats()
    assert stats.pool_blocks_materialized == STORES
    assert stats.rings[0].available == BLOCKS - STORES
    assert target.table.get(STORES - 1).valid
    assert loaded_data(client.load(STORES - 1, 4096)) == payload
    kind = "memory-backed" if memory_backed else "dict-backed"
    print(f"\n{kind} 2^25 blocks, {STORES} stores of 4 KiB: current "
          f"{current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB")
    assert peak < GIB // 8  # well under 1 GiB: ~41 MB of data plus bookkeeping
