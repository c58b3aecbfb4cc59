"""Semantics of each operation and each error path, between two NICs."""

from __future__ import annotations

import pytest

from kbtpsim import atomics
from kbtpsim.nic import (
    Access,
    CapabilityError,
    NicError,
    Opcode,
    QpState,
    RingFull,
    Sge,
    Simulation,
    WcOpcode,
    WcStatus,
    WorkRequest,
    WqeFlags,
)
from tests.nic.conftest import ALL, Pair, make_pair

S = WqeFlags.SIGNALED


def post(p: Pair, *wrs: WorkRequest) -> None:
    for wr in wrs:
        p.qa.post_send(wr)
    p.qa.ring_doorbell()
    p.run()


def test_write_places_data_and_completes(pair: Pair) -> None:
    pair.a.host.memory.write(pair.bufa, b"x" * 10000)
    post(pair, WorkRequest(Opcode.RDMA_WRITE, (Sge(pair.bufa, 10000, pair.mra.lkey),), S,
                           remote_addr=pair.bufb + 8, rkey=pair.mrb.rkey, wr_id=7))
    assert pair.b.host.memory.read(pair.bufb + 8, 10000) == b"x" * 10000
    [cqe] = pair.cqa.poll()
    assert (cqe.wr_id, cqe.status, cqe.opcode, cqe.byte_len) == (
        7, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE, 10000)
    assert pair.cqb.poll() == []  # a plain WRITE consumes no receive


def test_gather_from_several_sges(pair: Pair) -> None:
    mem = pair.a.host.memory
    mem.write(pair.bufa, b"abc")
    mem.write(pair.bufa + 100, b"defg")
    sges = (Sge(pair.bufa, 3, pair.mra.lkey), Sge(pair.bufa + 100, 4, pair.mra.lkey))
    post(pair, WorkRequest(Opcode.RDMA_WRITE, sges, S, remote_addr=pair.bufb,
                           rkey=pair.mrb.rkey))
    assert pair.b.host.memory.read(pair.bufb, 7) == b"abcdefg"


def test_write_with_imm_consumes_a_receive(pair: Pair) -> None:
    pair.qb.post_recv([], wr_id=5)
    post(pair, WorkRequest(Opcode.RDMA_WRITE_WITH_IMM, flags=S, remote_addr=pair.bufb,
                           rkey=pair.mrb.rkey, imm=0xABCD, inline_data=b"hi"))
    [rc] = pair.cqb.poll()
    assert (rc.wr_id, rc.opcode, rc.imm, rc.byte_len) == (5, WcOpcode.RECV_RDMA_WITH_IMM,
                                                          0xABCD, 2)
    assert pair.b.host.memory.read(pair.bufb, 2) == b"hi"


def test_send_scatters_over_receive_sges(pair: Pair) -> None:
    pair.a.host.memory.write(pair.bufa, bytes(range(100)))
    lk = pair.mrb.lkey
    pair.qb.post_recv([Sge(pair.bufb, 10, lk), Sge(pair.bufb + 1000, 200, lk)], wr_id=3)
    post(pair, WorkRequest(Opcode.SEND_WITH_IMM, (Sge(pair.bufa, 100, pair.mra.lkey),), S,
                           imm=42))
    mem = pair.b.host.memory
    assert mem.read(pair.bufb, 10) == bytes(range(10))
    assert mem.read(pair.bufb + 1000, 90) == bytes(range(10, 100))
    [rc] = pair.cqb.poll()
    assert (rc.wr_id, rc.byte_len, rc.imm, rc.status) == (3, 100, 42, WcStatus.SUCCESS)
    assert pair.cqa.poll()[0].opcode is WcOpcode.SEND


def test_send_waits_for_a_late_receive(pair: Pair) -> None:
    pair.qa.post_send(WorkRequest(Opcode.SEND, flags=S, inline_data=b"late"))
    pair.qa.ring_doorbell()
    pair.sim.run(until=20_000_000)
    assert pair.cqa.poll() == []
    pair.qb.post_recv([Sge(pair.bufb, 64, pair.mrb.lkey)])
    pair.run()
    assert pair.b.host.memory.read(pair.bufb, 4) == b"late"
    assert pair.cqa.poll()[0].status is WcStatus.SUCCESS


def test_send_waiting_for_a_receive_is_dropped_when_the_qp_fails(pair: Pair) -> None:
    """A Send that waits for a receive WQE on a QP that then goes into the error state is
    refused (the requester gets REM_OP_ERR) and the receiver goes on: it does not stall
    with every later packet, acknowledgements included, queued behind it (found by the
    oracle's ``pipeline`` mix with connection drops)."""
    pair.qa.post_send(WorkRequest(Opcode.SEND, flags=S, inline_data=b"late"))
    pair.qa.ring_doorbell()
    pair.sim.run(until=20_000_000)
    assert pair.cqa.poll() == []  # waiting for a receive (RNR)
    pair.qb.to_error()
    pair.run()
    assert [c.status for c in pair.cqa.poll()] == [WcStatus.REM_OP_ERR]
    assert not pair.qb.rxq and pair.qb.rx_msg is None
    assert pair.b.host.memory.read(pair.bufb, 4) == bytes(4)


def test_multi_packet_read(pair: Pair) -> None:
    data = bytes(i % 251 for i in range(20000))
    pair.b.host.memory.write(pair.bufb + 4096, data)
    post(pair, WorkRequest(Opcode.RDMA_READ, (Sge(pair.bufa, 20000, pair.mra.lkey),), S,
                           remote_addr=pair.bufb + 4096, rkey=pair.mrb.rkey))
    assert pair.a.host.memory.read(pair.bufa, 20000) == data
    [cqe] = pair.cqa.poll()
    assert cqe.opcode is WcOpcode.RDMA_READ and cqe.byte_len == 20000


@pytest.mark.parametrize(
    ("opcode", "fields", "expect"),
    [
        (Opcode.CAS, {"compare": 100, "swap": 7}, lambda v: atomics.compare_swap(v, 100, 7)),
        (Opcode.CAS, {"compare": 1, "swap": 7}, lambda v: atomics.compare_swap(v, 1, 7)),
        (Opcode.FETCH_ADD, {"swap": 2**64 - 1}, lambda v: atomics.fetch_add(v, 2**64 - 1)),
        (Opcode.MASKED_CAS,
         {"compare": 0x64, "compare_mask": 0xFF, "swap": 0xAB00, "swap_mask": 0xFF00},
         lambda v: atomics.masked_compare_swap(v, 0x64, 0xFF, 0xAB00, 0xFF00)),
        (Opcode.MASKED_FETCH_ADD, {"swap": 0x1_0000_0010, "swap_mask": 1 << 31},
         lambda v: atomics.masked_fetch_add(v, 0x1_0000_0010, 1 << 31)),
    ],
)
def test_atomics_match_reference(opcode: Opcode, fields: dict, expect) -> None:  # type: ignore[no-untyped-def]
    p = make_pair()
    order = p.b.profile.atomic_byte_order
    p.b.host.memory.write_u64(p.bufb + 64, 100, order)
    wr = WorkRequest(opcode, (Sge(p.bufa, 8, p.mra.lkey),), S, remote_addr=p.bufb + 64,
                     rkey=p.mrb.rkey, swap_add=fields.get("swap", 0),
                     compare=fields.get("compare", 0), swap_mask=fields.get("swap_mask", 0),
                     compare_mask=fields.get("compare_mask", 0))
    post(p, wr)
    assert p.b.host.memory.read_u64(p.bufb + 64, order) == expect(100)
    assert p.a.host.memory.read_u64(p.bufa, order) == 100  # original value returned
    assert p.cqa.poll()[0].status is WcStatus.SUCCESS


def test_nop_and_unsignaled(pair: Pair) -> None:
    post(pair, WorkRequest(Opcode.NOP),
         WorkRequest(Opcode.RDMA_WRITE, inline_data=b"z", remote_addr=pair.bufb,
                     rkey=pair.mrb.rkey),
         WorkRequest(Opcode.NOP, flags=S, wr_id=9))
    [cqe] = pair.cqa.poll()
    assert (cqe.wr_id, cqe.opcode) == (9, WcOpcode.NOP)
    assert pair.qa.retired == 3


def test_remote_access_error_then_flush(pair: Pair) -> None:
    ro = pair.b.register_mr(pair.bufb, 4096, Access.REMOTE_READ)
    post(pair,
         WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"no", remote_addr=pair.bufb,
                     rkey=ro.rkey, wr_id=1),
         WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"ok", remote_addr=pair.bufb,
                     rkey=pair.mrb.rkey, wr_id=2),
         WorkRequest(Opcode.NOP, wr_id=3))
    cqes = pair.cqa.poll()
    assert [(c.wr_id, c.status) for c in cqes] == [
        (1, WcStatus.REM_ACCESS_ERR), (2, WcStatus.WR_FLUSH_ERR), (3, WcStatus.WR_FLUSH_ERR)]
    assert pair.qa.state is QpState.ERROR
    assert pair.b.host.memory.read(pair.bufb, 2) == b"\0\0"
    # later WRs flush too
    pair.qa.post_send(WorkRequest(Opcode.NOP, wr_id=4))
    pair.run()
    assert [(c.wr_id, c.status) for c in pair.cqa.poll()] == [(4, WcStatus.WR_FLUSH_ERR)]


@pytest.mark.parametrize("where", ["outside", "no_right", "bad_stag"])
def test_remote_access_errors(where: str) -> None:
    p = make_pair(size=8192)
    rkey, addr = p.mrb.rkey, p.bufb
    if where == "outside":
        addr = p.bufb + 8190
    elif where == "no_right":
        rkey = p.b.register_mr(p.bufb, 64, Access.LOCAL_WRITE).rkey
    else:
        rkey = 0x12345
    post(p, WorkRequest(Opcode.RDMA_READ, (Sge(p.bufa, 8, p.mra.lkey),), S, remote_addr=addr,
                        rkey=rkey))
    assert p.cqa.poll()[0].status is WcStatus.REM_ACCESS_ERR


def test_local_protection_error(pair: Pair) -> None:
    ro = pair.a.register_mr(pair.bufa, 64, Access.REMOTE_READ)  # no LOCAL_WRITE
    post(pair, WorkRequest(Opcode.RDMA_READ, (Sge(pair.bufa, 8, ro.lkey),), S,
                           remote_addr=pair.bufb, rkey=pair.mrb.rkey),
         WorkRequest(Opcode.NOP, flags=S))
    assert [c.status for c in pair.cqa.poll()] == [WcStatus.LOC_PROT_ERR,
                                                   WcStatus.WR_FLUSH_ERR]


def test_receive_too_small_is_length_error(pair: Pair) -> None:
    pair.qb.post_recv([Sge(pair.bufb, 4, pair.mrb.lkey)], wr_id=1)
    pair.qb.post_recv([Sge(pair.bufb, 4, pair.mrb.lkey)], wr_id=2)
    post(pair, WorkRequest(Opcode.SEND, flags=S, inline_data=b"too long"))
    assert pair.cqa.poll()[0].status is WcStatus.REM_INV_REQ_ERR
    assert [(c.wr_id, c.status) for c in pair.cqb.poll()] == [
        (1, WcStatus.LOC_LEN_ERR), (2, WcStatus.WR_FLUSH_ERR)]
    assert pair.qb.state is QpState.ERROR


def test_misaligned_atomic(pair: Pair) -> None:
    post(pair, WorkRequest(Opcode.FETCH_ADD, (Sge(pair.bufa, 8, pair.mra.lkey),), S,
                           remote_addr=pair.bufb + 4, rkey=pair.mrb.rkey, swap_add=1))
    assert pair.cqa.poll()[0].status is WcStatus.REM_INV_REQ_ERR


def test_garbage_wqe_is_local_qp_op_error(pair: Pair) -> None:
    pair.qa.post_send(WorkRequest(Opcode.NOP, flags=S))
    pair.a.host.memory.write(pair.qa.wqe_addr(0) + 3, b"\x7e")  # no such opcode
    pair.qa.ring_doorbell()
    pair.run()
    assert pair.cqa.poll()[0].status is WcStatus.LOC_QP_OP_ERR


def test_unconnected_qp() -> None:
    p = make_pair()
    lone = p.a.create_qp(p.cqa, p.cqa)
    lone.post_send(WorkRequest(Opcode.SEND, flags=S, inline_data=b"x"))
    lone.ring_doorbell()
    p.run()
    assert p.cqa.poll()[0].status is WcStatus.LOC_QP_OP_ERR


def test_ring_full_and_api_errors(pair: Pair) -> None:
    qp = pair.a.create_qp(pair.cqa, pair.cqa, sq_depth=2, rq_depth=1)
    qp.post_send(WorkRequest(Opcode.NOP))
    qp.post_send(WorkRequest(Opcode.NOP))
    with pytest.raises(RingFull):
        qp.post_send(WorkRequest(Opcode.NOP))
    qp.post_recv([])
    with pytest.raises(RingFull):
        qp.post_recv([])
    with pytest.raises(ValueError, match="max_sge"):
        pair.qa.post_recv([Sge(0, 1, 1)] * 17)
    with pytest.raises(ValueError, match="max_inline"):
        pair.qa.post_send(WorkRequest(Opcode.SEND, inline_data=bytes(65)))
    with pytest.raises(NicError, match="no field"):
        pair.qa.post_send(WorkRequest(Opcode.NOP))
        pair.qa.wqe_field_addr(0, "raddr")
    with pytest.raises(ValueError, match="result SGE"):
        WorkRequest(Opcode.CAS)


def test_capabilities_are_enforced() -> None:
    p = make_pair("irdma")
    with pytest.raises(CapabilityError):
        p.qa.post_send(WorkRequest(Opcode.WAIT, target=1, count=1))
    with pytest.raises(CapabilityError):
        p.a.create_qp(p.cqa, p.cqa, managed=True)
    with pytest.raises(CapabilityError):
        p.qa.post_send(WorkRequest(Opcode.MASKED_FETCH_ADD, (Sge(p.bufa, 8, p.mra.lkey),)))
    with pytest.raises(CapabilityError):
        p.a.register_strided(p.bufa, 16, 4, 16, Access.REMOTE_READ)


def test_fence_orders_after_reads(pair: Pair) -> None:
    """A fenced WRITE of what a READ fetched sends the new data; unfenced sends stale."""
    lk, rk = pair.mra.lkey, pair.mrb.rkey
    pair.b.host.memory.write(pair.bufb, b"NEW!")
    pair.a.host.memory.write(pair.bufa, b"old.")
    rd = WorkRequest(Opcode.RDMA_READ, (Sge(pair.bufa, 4, lk),), remote_addr=pair.bufb,
                     rkey=rk)
    post(pair, rd, WorkRequest(Opcode.RDMA_WRITE, (Sge(pair.bufa, 4, lk),), S,
                               remote_addr=pair.bufb + 100, rkey=rk))
    assert pair.b.host.memory.read(pair.bufb + 100, 4) == b"old."
    post(pair, rd, WorkRequest(Opcode.RDMA_WRITE, (Sge(pair.bufa, 4, lk),), S | WqeFlags.FENCE,
                               remote_addr=pair.bufb + 200, rkey=rk))
    assert pair.b.host.memory.read(pair.bufb + 200, 4) == b"NEW!"


def test_memory_window_send_with_invalidate(pair: Pair) -> None:
    parent = pair.b.register_mr(pair.bufb, 4096, Access.LOCAL_WRITE | Access.MW_BIND)
    mw = pair.b.bind_mw(parent, pair.qb, pair.bufb + 64, 64, Access.REMOTE_WRITE)
    post(pair, WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"mw", remote_addr=mw.addr,
                           rkey=mw.rkey))
    assert pair.b.host.memory.read(pair.bufb + 64, 2) == b"mw"
    pair.qb.post_recv([])
    post(pair, WorkRequest(Opcode.SEND_WITH_INVALIDATE, flags=S, imm=mw.rkey))
    assert pair.cqb.poll()[0].invalidated_stag == mw.rkey
    post(pair, WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"no", remote_addr=mw.addr,
                           rkey=mw.rkey))
    statuses = [c.status for c in pair.cqa.poll()]
    assert statuses[-1] is WcStatus.REM_ACCESS_ERR


def test_window_only_serves_its_qp() -> None:
    p = make_pair()
    other_a = p.a.create_qp(p.cqa, p.cqa)
    other_b = p.b.create_qp(p.cqb, p.cqb)
    p.sim.connect(other_a, other_b)
    parent = p.b.register_mr(p.bufb, 4096, Access.LOCAL_WRITE | Access.MW_BIND)
    mw = p.b.bind_mw(parent, p.qb, p.bufb, 64, Access.REMOTE_WRITE)
    other_a.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"x",
                                  remote_addr=mw.addr, rkey=mw.rkey))
    other_a.ring_doorbell()
    p.run()
    assert p.cqa.poll()[0].status is WcStatus.REM_ACCESS_ERR


def test_local_invalidate(pair: Pair) -> None:
    parent = pair.b.register_mr(pair.bufb, 4096, Access.LOCAL_WRITE | Access.MW_BIND)
    mw = pair.b.bind_mw(parent, pair.qb, pair.bufb, 64, Access.REMOTE_READ)
    pair.qb.post_send(WorkRequest(Opcode.LOCAL_INV, flags=S, imm=mw.rkey))
    pair.qb.ring_doorbell()
    pair.run()
    assert pair.cqb.poll()[0].status is WcStatus.SUCCESS
    assert pair.b.pt.get(mw.rkey) is None


def test_sq_in_nic_memory() -> None:
    p = make_pair(sq_in_nic_memory=True)
    assert p.qa.sq_mr.in_nic_memory
    post(p, WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"dm", remote_addr=p.bufb,
                        rkey=p.mrb.rkey))
    assert p.b.host.memory.read(p.bufb, 2) == b"dm"


def test_no_cas_on_wqe_profile_refuses_atomics_on_rings() -> None:
    p = make_pair("irdma")
    assert not p.qa.sq_mr.access & Access.REMOTE_ATOMIC
    with pytest.raises(CapabilityError, match="CAS-on-WQE"):
        p.a.register_mr(p.qa.sq_addr, 64, Access.LOCAL_WRITE | Access.REMOTE_ATOMIC)


def test_wqe_checks_reject_a_foreign_qpn() -> None:
    from kbtpsim.nic import PROFILES

    prof = PROFILES["cx5"].replace(name="cx5-checked", wqe_checks=True)
    p = make_pair(prof)  # type: ignore[arg-type]
    p.qa.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"a",
                               remote_addr=p.bufb, rkey=p.mrb.rkey))
    p.qa.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"b",
                               remote_addr=p.bufb + 1, rkey=p.mrb.rkey))
    p.a.host.memory.write(p.qa.wqe_field_addr(1, "qpn"), b"\x00\x00\x07")
    p.qa.ring_doorbell()
    p.run()
    assert [c.status for c in p.cqa.poll()] == [WcStatus.SUCCESS, WcStatus.LOC_QP_OP_ERR]


def test_same_address_fetch_adds_behind_queued_writes_return_distinct_values() -> None:
    """Atomicity: a FetchAdd's result is forwarded to the next atomic on the address even
    while its posted write to memory waits behind other DMA writes (found by the scenario
    oracle: two DIRECT_ALLOC FetchAdds on one Head returned the same ticket)."""
    sim = Simulation()
    a, b = sim.add_nic("a", "cx5"), sim.add_nic("b", "cx5")
    size = 1 << 21
    bufa, bufb = a.host.alloc(size, 4096), b.host.alloc(size, 4096)
    mra, mrb = a.register_mr(bufa, size, ALL), b.register_mr(bufb, size, ALL)
    qps = []
    for _ in range(4):
        cqa, cqb = a.create_cq(4096), b.create_cq(4096)
        qa, qb = a.create_qp(cqa, cqa), b.create_qp(cqb, cqb)
        sim.connect(qa, qb)
        qps.append(qa)
    counter = bufb  # the shared word; large WRITEs elsewhere keep b's DMA writes queued
    for i, qp in enumerate(qps):
        if i == 0:
            qp.post_send(WorkRequest(Opcode.RDMA_WRITE, (Sge(bufa + 4096, 1 << 20, mra.lkey),),
                                     remote_addr=bufb + 4096, rkey=mrb.rkey))
        for k in range(8):
            qp.post_send(WorkRequest(Opcode.FETCH_ADD, (Sge(bufa + 64 * (8 * i + k), 8,
                                                             mra.lkey),),
                                     WqeFlags.SIGNALED, remote_addr=counter, rkey=mrb.rkey,
                                     swap_add=1))
        qp.ring_doorbell()
    sim.run()
    olds = sorted(int.from_bytes(a.host.memory.read(bufa + 64 * j, 8), "big")
                  for j in range(32))
    assert olds == list(range(32))
    assert b.host.memory.read_u64(counter, "big") == 32


def test_a_wr_held_before_it_executes_is_flushed_if_its_qp_fails_meanwhile(
        pair: Pair) -> None:
    """A fault hook holding a fetched WR before it starts (the oracle's chain delay)
    models a slow NIC, not one that runs WRs of a QP in the error state: a QP that fails
    while the WR is held flushes it (IBV_WC_WR_FLUSH_ERR) and it writes nothing."""
    held = 1_000_000  # 1 us

    def hook(phase: str, index: int) -> int:
        return held if phase == "exec" and index == 0 else 0

    pair.qa.fault_hook = hook
    pair.qa.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, remote_addr=pair.bufb,
                                  rkey=pair.mrb.rkey, inline_data=b"late", wr_id=3))
    pair.qa.ring_doorbell()
    env = pair.sim.env
    env.run(until=held // 2)  # fetched and held
    pair.qa.to_error()
    pair.run()
    assert pair.b.host.memory.read(pair.bufb, 4) == bytes(4)
    [cqe] = pair.cqa.poll()
    assert (cqe.wr_id, cqe.status) == (3, WcStatus.WR_FLUSH_ERR)


def test_a_late_cqe_fault_keeps_each_cq_in_order(pair: Pair) -> None:
    """The ``cqe`` fault (kbtpsim.oracle.faults) generates a CQE late; a later CQE of the
    same CQ is not generated before it (a completion engine writes a CQ in order)."""
    delays = iter([2_000_000, 0])  # the first CQE 2 us late, the second on time
    pair.a.cqe_hook = lambda _cq: next(delays)
    for wr_id in (1, 2):
        pair.qa.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, remote_addr=pair.bufb,
                                      rkey=pair.mrb.rkey, inline_data=b"x", wr_id=wr_id))
    pair.qa.ring_doorbell()
    pair.run()
    cqes = pair.cqa.poll()
    assert [c.wr_id for c in cqes] == [1, 2]
    assert cqes[0].time <= cqes[1].time
    assert cqes[1].time - cqes[0].time < 2_000_000  # the second waited for the first
