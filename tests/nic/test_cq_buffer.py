"""CQs with a buffer in memory: 64-octet CQEs in the mlx5 layout, readable by WRs."""

from __future__ import annotations

import pytest

from kbtpsim.nic import Access, Condition, Opcode, Sge, Simulation, WorkRequest, WqeFlags
from kbtpsim.nic.cq import (
    CQE_BYTE_CNT,
    CQE_OP_OWN,
    CQE_QPN,
    CQE_REQ,
    CQE_RESP_SEND,
    CQE_WQE_COUNTER,
    Cqe,
    WcOpcode,
    encode_cqe,
)
from kbtpsim.nic.errors import WcStatus

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ

S = WqeFlags.SIGNALED


def _setup(profile: str = "ideal", depth: int = 4):  # type: ignore[no-untyped-def]
    sim = Simulation()
    a = sim.add_nic("a", profile)
    b = sim.add_nic("b", profile)
    buf = b.host.alloc(64 * depth, 4096)
    b.host.memory.write(buf, b"\xee" * 64 * depth)
    rcq = b.create_cq(depth, buffer_addr=buf)
    scq = b.create_cq(64)
    cqa = a.create_cq(64)
    qa = a.create_qp(cqa, cqa)
    qb = b.create_qp(scq, rcq)
    sim.connect(qa, qb)
    ma = a.host.alloc(1 << 16, 4096)
    mra = a.register_mr(ma, 1 << 16, ALL)
    mb = b.host.alloc(1 << 16, 4096)
    mrb = b.register_mr(mb, 1 << 16, ALL)
    return sim, a, b, rcq, scq, qa, qb, ma, mra, mb, mrb, buf


def test_receive_cqes_are_written_with_the_byte_count() -> None:
    sim, _a, b, rcq, _scq, qa, qb, ma, mra, mb, mrb, buf = _setup()
    for i in range(6):  # wraps the 4-entry buffer
        qb.post_recv([Sge(mb, 4096, mrb.lkey)], wr_id=i)
        qa.post_send(WorkRequest(Opcode.SEND, (Sge(ma, 10 + i, mra.lkey),), S))
        qa.ring_doorbell()
        sim.run()
        got = rcq.poll(8)
        assert [c.byte_len for c in got] == [10 + i]
        raw = b.host.memory.read(rcq.slot_addr(i), 64)
        assert raw == encode_cqe(got[0], i, 4)
        assert int.from_bytes(raw[CQE_BYTE_CNT:CQE_BYTE_CNT + 4], "big") == 10 + i
        assert int.from_bytes(raw[CQE_QPN:CQE_QPN + 4], "big") == qb.qpn
        assert int.from_bytes(raw[CQE_WQE_COUNTER:CQE_WQE_COUNTER + 2], "big") == i
        assert raw[CQE_OP_OWN] == CQE_RESP_SEND << 4 | (i // 4)
    assert rcq.slot_addr(5) == buf + 64


def test_without_a_buffer_nothing_is_written() -> None:
    sim = Simulation()
    nic = sim.add_nic("n", "ideal")
    cq = nic.create_cq(4)
    assert cq.buffer_addr is None
    with pytest.raises(ValueError):
        cq.slot_addr(0)
    with pytest.raises(ValueError):
        nic.create_cq(4, buffer_addr=0x1008)


def test_encode_cqe_fields() -> None:
    c = Cqe(7, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE, 0x123, 0x10005, byte_len=0x1000)
    raw = encode_cqe(c, 5, 4)
    assert raw[CQE_OP_OWN] == CQE_REQ << 4 | 1
    assert raw[CQE_WQE_COUNTER:CQE_WQE_COUNTER + 2] == b"\x00\x05"
    err = encode_cqe(Cqe(7, WcStatus.LOC_LEN_ERR, WcOpcode.RECV, 1, 0), 0, 4)
    assert err[CQE_OP_OWN] >> 4 == 14 and err[55] == int(WcStatus.LOC_LEN_ERR)


def test_a_conditional_wr_tests_the_byte_count_after_a_wait() -> None:
    """WAIT on the receive CQ, then a conditional Write that runs only if the received
    message had 24 octets: the pattern the chains use."""
    sim, _a, b, rcq, _scq, qa, qb, ma, mra, mb, mrb, buf = _setup()
    lcq = b.create_cq(64)
    lp = b.create_qp(lcq, lcq)
    sim.connect(lp, lp)
    flag = mb + 8192
    rkey = b.register_mr(buf, 64 * 4, Access.LOCAL_WRITE)
    for i, n in enumerate((24, 25, 24)):
        b.host.memory.write(flag, bytes(8))
        qb.post_recv([Sge(mb, 4096, mrb.lkey)], wr_id=i)
        lp.post_send(WorkRequest(Opcode.WAIT, target=rcq.cqn, count=i + 1))
        compare = (24).to_bytes(8, "big")
        lp.post_send(WorkRequest(
            Opcode.RDMA_WRITE, flags=S, remote_addr=flag, rkey=mrb.rkey, inline_data=b"\x01",
            cond=Condition(rcq.slot_addr(i) + CQE_BYTE_CNT - 4, rkey.lkey,
                           int.from_bytes(compare, "little"), (1 << 64) - 1)))
        lp.ring_doorbell()
        qa.post_send(WorkRequest(Opcode.SEND, (Sge(ma, n, mra.lkey),), S))
        qa.ring_doorbell()
        sim.run()
        assert b.host.memory.read(flag, 1) == (b"\x01" if n == 24 else b"\x00")


def test_make_cqe_equals_the_dataclass() -> None:
    """The NIC's fast CQE constructor sets every field the dataclass has."""
    import dataclasses

    from kbtpsim.nic.cq import _CQE_FIELDS, Cqe, make_cqe

    assert tuple(f.name for f in dataclasses.fields(Cqe)) == _CQE_FIELDS
    kw = {"wr_id": 7, "status": WcStatus.REM_ACCESS_ERR, "opcode": WcOpcode.RECV, "qpn": 9,
          "wqe_index": 3, "byte_len": 40, "imm": 5, "invalidated_stag": 6, "time": 100,
          "sampled": 50}
    assert make_cqe(**kw) == Cqe(**kw)
    assert repr(make_cqe(wr_id=1, status=WcStatus.SUCCESS, opcode=WcOpcode.SEND, qpn=2,
                         wqe_index=0)) == repr(Cqe(1, WcStatus.SUCCESS, WcOpcode.SEND, 2, 0))
