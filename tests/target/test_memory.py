"""A pool of 2^25 blocks of 32 KiB (1 TiB) costs memory only for the blocks written."""

from __future__ import annotations

import tracemalloc

from kbtpsim.target import Target, TargetConfig
from kbtpsim.wire import AllocStore, DataDescriptor, RequestFlag, Status

from .harness import Client, ini

BLOCKS = 1 << 25
STORES = 10_000
GIB = 1 << 30


def test_sparse_pool_table_and_ring() -> None:
    tracemalloc.start()
    try:
        config = TargetConfig(blocks=BLOCKS, block_size=32 * 1024,
                              initiators=(ini("big", STORES, 0, count=1 << 24),))
        target = Target(config)
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
    print(f"\n2^25 blocks, {STORES} stores of 4 KiB: current {current / 2**20:.1f} MiB, "
          f"peak {peak / 2**20:.1f} MiB")
    assert peak < GIB // 8  # well under 1 GiB: ~41 MB of data plus bookkeeping
