"""Host memory bounded by configuration: freed buffers release their pages."""

from __future__ import annotations

import gc

from kbtpsim.nic import Opcode, Sge, Simulation, WorkRequest, WqeFlags
from kbtpsim.nic.packet import Packet
from kbtpsim.sparse import PAGE_SIZE, SparseMemory
from kbtpsim.system import Staging
from tests.nic.conftest import make_pair


def test_discard_releases_only_whole_pages_inside() -> None:
    mem = SparseMemory()
    mem.write(0, b"\x01" * (4 * PAGE_SIZE))
    assert mem.pages_touched == 4
    # [100, 3 pages + 100) covers pages 1 and 2 wholly, pages 0 and 3 in part
    assert mem.discard(100, 3 * PAGE_SIZE) == 2
    assert mem.pages_touched == 2
    assert mem.read(PAGE_SIZE - 1, 2) == b"\x01\x00"  # released pages read as initial
    assert mem.read(3 * PAGE_SIZE, 1) == b"\x01"
    assert mem.discard(0, 10) == 0


def test_discard_reads_back_the_initializer() -> None:
    mem = SparseMemory()
    mem.add_initializer(0, 2 * PAGE_SIZE, lambda a, n: b"\xaa" * n)
    mem.write(0, b"\x00" * PAGE_SIZE)
    mem.discard(0, PAGE_SIZE)
    assert mem.read(0, 4) == b"\xaa" * 4 and mem.pages_touched == 0


def test_staging_pages_stay_bounded_over_a_long_ring() -> None:
    """A staging ring far larger than what is outstanding: after many laps only the
    outstanding pieces' pages are held (they used to stay touched: RSS grew with the
    number of operations)."""
    nic = Simulation(seed=0).add_nic("host", "cx5")
    st = Staging(nic, 64 << 20)
    mem = nic.host.memory
    live = []
    for i in range(400):  # 400 x 1 MiB through a 64 MiB ring: six laps
        live.append(st.put(bytes([i % 251 + 1]) * (1 << 20)))
        if len(live) > 4:
            st.free(live.pop(0))
    assert mem.pages_touched <= 5 * (1 << 20) // PAGE_SIZE + 2
    assert mem.read(live[-1], 1) == bytes([399 % 251 + 1])


def test_sent_packets_leave_no_cycles_holding_their_payload() -> None:
    """A packet's payload-DMA event used to hold the packet as its value while the packet
    held the event (``ready``): a cycle only the garbage collector frees, so every sent
    packet's payload stayed in memory until its next full pass (2 MiB blocks: 286 MB
    peak instead of 234)."""
    p = make_pair("cx5", size=1 << 20)
    p.b.host.memory.write(p.bufb, b"\x5a" * (256 << 10))
    gc.collect()
    gc.disable()
    try:
        p.qb.post_send(WorkRequest(Opcode.RDMA_WRITE, (Sge(p.bufb, 256 << 10, p.mrb.lkey),),
                                   WqeFlags.SIGNALED, remote_addr=p.bufa, rkey=p.mra.rkey))
        p.qb.ring_doorbell()
        p.run()
        assert p.a.host.memory.read(p.bufa + (255 << 10), 4) == b"\x5a" * 4
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        cyclic = [x for x in gc.garbage if isinstance(x, Packet)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cyclic == []
