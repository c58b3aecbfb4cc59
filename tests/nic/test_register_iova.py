"""``Nic.register_mr(..., base_to=)``: a region whose Tagged Offsets start elsewhere than
its address (ibv_reg_mr_iova), as the chains register the pool (TO = Block Offset) and a
ring (slots at TO 2^32); and a strided key with a base index through the NIC API."""

from __future__ import annotations

from kbtpsim.nic import Access, Opcode, Simulation, WorkRequest, WqeFlags

RW = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


def test_remote_write_at_a_tagged_offset_base() -> None:
    sim = Simulation()
    a, b = sim.add_nic("a", "ideal-be"), sim.add_nic("b", "ideal-be")
    ca, cb = a.create_cq(16), b.create_cq(16)
    qa, qb = a.create_qp(ca, ca), b.create_qp(cb, cb)
    sim.connect(qa, qb)
    addr = b.host.alloc(8192, 4096)
    mr = b.register_mr(addr, 8192, RW, base_to=1 << 32)
    assert mr.to_of(addr + 16) == (1 << 32) + 16
    qa.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=WqeFlags.SIGNALED,
                             remote_addr=(1 << 32) + 16, rkey=mr.rkey, inline_data=b"slot"))
    qa.ring_doorbell()
    sim.run()
    assert b.host.memory.read(addr + 16, 4) == b"slot"
    table = b.host.alloc(4096, 4096)
    key = b.register_strided(table, 16, 8, 256, RW, base_index=0x4000)
    assert b.pt.translate(key.rkey, 0x4003 * 256 + 4, 12, int(Access.REMOTE_WRITE)) == \
        table + 3 * 16 + 4
