"""A receive queue re-armed through its doorbell record (mlx5's receive counter in
memory), and CQs that ignore overruns: what recycled chains (chains v2) rely on."""

from __future__ import annotations

import pytest

from kbtpsim.nic import Access, Opcode, Sge, Simulation, WorkRequest, WqeFlags
from kbtpsim.nic.errors import CqOverrun

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
S = WqeFlags.SIGNALED


def _setup():  # type: ignore[no-untyped-def]
    sim = Simulation()
    a = sim.add_nic("a", "ideal-be")
    b = sim.add_nic("b", "ideal-be")
    cqa, rcq, scq = a.create_cq(64), b.create_cq(64), b.create_cq(64)
    qa = a.create_qp(cqa, cqa)
    qb = b.create_qp(scq, rcq, rq_depth=2)
    sim.connect(qa, qb)
    lb = b.create_qp(scq, scq)  # b's loopback QP: the chain that re-arms
    sim.connect(lb, lb)
    ma = a.host.alloc(4096, 4096)
    mra = a.register_mr(ma, 4096, ALL)
    mb = b.host.alloc(4096, 4096)
    mrb = b.register_mr(mb, 4096, ALL)
    return sim, b, rcq, scq, qa, qb, lb, ma, mra, mb, mrb


def _two_receives_and_a_doorbell_record(qb, mb: int, mrb) -> int:  # type: ignore[no-untyped-def]
    """Post two receives on ``qb`` (a 2-WQE ring) and give it a doorbell record at
    ``mb + 1024``; returns its address."""
    for i in range(2):
        qb.post_recv([Sge(mb + 64 * i, 64, mrb.lkey)], wr_id=i)
    qb.attach_rq_doorbell(mb + 1024)
    return mb + 1024


def test_a_fetch_add_on_the_doorbell_record_posts_the_ring_slot_again() -> None:
    sim, b, rcq, _scq, qa, qb, lb, ma, mra, mb, mrb = _setup()
    db = _two_receives_and_a_doorbell_record(qb, mb, mrb)
    assert b.host.memory.read(db, 4) == (2).to_bytes(4, "big")
    for i in range(3):
        qa.post_send(WorkRequest(Opcode.SEND, (Sge(ma, 8 + i, mra.lkey),), S))
    qa.ring_doorbell()
    sim.run()
    assert [c.byte_len for c in rcq.poll(8)] == [8, 9]  # the third waits for a receive
    lb.post_send(WorkRequest(Opcode.FETCH_ADD, (Sge(mb + 2048, 8, mrb.lkey),), S,
                             remote_addr=db, rkey=mrb.rkey, swap_add=1 << 32))
    lb.ring_doorbell()
    sim.run()
    got = rcq.poll(8)
    assert [(c.byte_len, c.wr_id) for c in got] == [(10, 0)]  # slot 0, its wr_id again
    assert qb.rq_post == 3 and b.host.memory.read(db, 4) == (3).to_bytes(4, "big")


def test_a_count_beyond_the_ring_posts_only_what_the_ring_holds() -> None:
    sim, _b, _rcq, _scq, _qa, qb, lb, _ma, _mra, mb, mrb = _setup()
    db = _two_receives_and_a_doorbell_record(qb, mb, mrb)
    lb.post_send(WorkRequest(Opcode.FETCH_ADD, (Sge(mb + 2048, 8, mrb.lkey),), S,
                             remote_addr=db, rkey=mrb.rkey, swap_add=5 << 32))
    lb.ring_doorbell()
    sim.run()
    assert qb.rq_post == 2  # nothing consumed yet: the ring is full


def test_a_cq_that_ignores_overruns_keeps_counting() -> None:
    sim = Simulation()
    n = sim.add_nic("n", "ideal-be")
    strict, loose = n.create_cq(2), n.create_cq(2, ignore_overrun=True)
    for cq in (strict, loose):
        qp = n.create_qp(cq, cq)
        sim.connect(qp, qp)
        for _ in range(3):
            qp.post_send(WorkRequest(Opcode.NOP, flags=S))
        qp.ring_doorbell()
    with pytest.raises(CqOverrun):
        sim.run()
    sim.run()
    assert loose.count == 3 and loose.overwritten == 1 and len(loose) == 2
