"""Chains: WAIT/ENABLE, scatter into WQEs, CAS-on-WQE, the prefetch hazard, ring Heads."""

from __future__ import annotations

import pytest

from kbtpsim import atomics
from kbtpsim.nic import (
    Access,
    Condition,
    Opcode,
    Sge,
    Simulation,
    WcStatus,
    WorkRequest,
    WqeFlags,
    ctrl_word,
    encode_wqe,
)
from tests.nic.conftest import ALL, make_pair

S = WqeFlags.SIGNALED


def loopback(sim: Simulation, nic_name: str = "a", profile: str = "cx5",
             managed: bool = False):  # type: ignore[no-untyped-def]
    nic = sim.add_nic(nic_name, profile)
    cq = nic.create_cq(256)
    qp = nic.create_qp(cq, cq, managed=managed)
    sim.connect(qp, qp)
    buf = nic.host.alloc(1 << 16, 4096)
    mr = nic.register_mr(buf, 1 << 16, ALL)
    return nic, cq, qp, buf, mr


def test_wait_enable_chain() -> None:
    """A managed QP runs only what ENABLE allows, after WAIT saw the CQ count."""
    sim = Simulation(trace=True)
    nic, cq, master, buf, mr = loopback(sim)
    tcq = nic.create_cq(16)
    target = nic.create_qp(tcq, tcq, managed=True)
    worker = nic.create_qp(tcq, tcq, managed=True)
    sim.connect(target, worker)
    for i in range(3):
        target.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=bytes([65 + i]),
                                     remote_addr=buf + i, rkey=mr.rkey))
    # master: a signaled NOP, WAIT for it on its own CQ, then ENABLE two of three WQEs.
    master.post_send(WorkRequest(Opcode.NOP, flags=S))
    master.post_send(WorkRequest(Opcode.WAIT, target=cq.cqn, count=1))
    master.post_send(WorkRequest(Opcode.ENABLE, target=target.qpn, count=2, flags=S))
    master.ring_doorbell()
    sim.run()
    assert nic.host.memory.read(buf, 3) == b"AB\0"
    assert [c.status for c in tcq.poll()] == [WcStatus.SUCCESS] * 2
    tr = sim.tracer
    assert tr is not None
    enable_done = tr.timeline("a", master.qpn, 2)["started"]
    assert tr.timeline("a", target.qpn, 0)["fetched"] > enable_done
    assert "fetched" not in tr.timeline("a", target.qpn, 2)


def test_wait_blocks_until_count() -> None:
    sim = Simulation()
    nic, _cq, qp, buf, mr = loopback(sim)
    other_cq = nic.create_cq(16)
    qp.post_send(WorkRequest(Opcode.WAIT, target=other_cq.cqn, count=1))
    qp.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"go",
                             remote_addr=buf, rkey=mr.rkey))
    qp.ring_doorbell()
    sim.run()
    assert nic.host.memory.read(buf, 2) == b"\0\0"  # still waiting
    other = nic.create_qp(other_cq, other_cq)
    sim.connect(other, other)
    other.post_send(WorkRequest(Opcode.NOP, flags=S))
    other.ring_doorbell()
    sim.run()
    assert nic.host.memory.read(buf, 2) == b"go"


def test_receive_scatters_into_another_qps_wqe() -> None:
    """The request's address lands in a READ WQE's raddr; the READ then uses it."""
    p = make_pair()
    srv, cli = p.b, p.a
    order = srv.profile.wqe_field_byte_order
    table = srv.host.alloc(4096, 4096)
    table_mr = srv.register_mr(table, 4096, Access.LOCAL_WRITE | Access.REMOTE_READ)
    srv.host.memory.write(table + 48, b"ENTRY#3!")
    wcq = srv.create_cq(16)
    worker = srv.create_qp(wcq, wcq, managed=True)
    sim = p.sim
    sim.connect(worker, worker)
    out = p.bufb + 512
    idx = worker.post_send(WorkRequest(Opcode.RDMA_READ, (Sge(out, 8, p.mrb.lkey),), S,
                                       remote_addr=0, rkey=table_mr.rkey))
    raddr_at = worker.wqe_field_addr(idx, "raddr")
    p.qb.post_recv([Sge(raddr_at, 8, worker.sq_mr.lkey)])
    master = srv.create_qp(wcq, wcq)
    sim.connect(master, master)
    master.post_send(WorkRequest(Opcode.WAIT, target=p.cqb.cqn, count=1))
    master.post_send(WorkRequest(Opcode.ENABLE, target=worker.qpn, count=1))
    master.ring_doorbell()
    # the initiator sends the address in the server's WQE byte order
    p.qa.post_send(WorkRequest(Opcode.SEND, flags=S,
                               inline_data=(table + 48).to_bytes(8, order)))
    p.qa.ring_doorbell()
    sim.run()
    assert srv.host.memory.read(out, 8) == b"ENTRY#3!"
    assert [c.status for c in wcq.poll()] == [WcStatus.SUCCESS]
    assert cli.host.memory.read(p.bufa, 1) == b"\0"


def _cas_chain(bucket_key: int, expected_key: int) -> tuple[bytes, list[WcStatus]]:
    """RedN's pattern: READ a key into a disarmed WQE's QPN octets, CAS its control word
    against (NOP, expected key), WAIT for the CAS, ENABLE the patched QP."""
    sim = Simulation()
    nic, wcq, worker, buf, mr = loopback(sim)
    prof = nic.profile
    tcq = nic.create_cq(16)
    target = nic.create_qp(tcq, tcq, managed=True)
    sim.connect(target, target)
    bucket = buf + 1024
    nic.host.memory.write(bucket, bucket_key.to_bytes(3, prof.wqe_field_byte_order))
    dest = buf + 2048
    armed = WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"TAKEN", remote_addr=dest,
                        rkey=mr.rkey)
    disarmed = WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"TAKEN",
                           remote_addr=dest, rkey=mr.rkey, armed=False)
    idx = target.post_send(disarmed)
    wo, ao = prof.wqe_field_byte_order, prof.atomic_byte_order
    expect_raw = encode_wqe(disarmed, wo, index=idx, qpn=expected_key)
    armed_raw = encode_wqe(armed, wo, index=idx, qpn=target.qpn)
    assert target.ctrl_word(idx, qpn=expected_key) == ctrl_word(expect_raw, ao)
    assert target.ctrl_word(idx, armed) == ctrl_word(armed_raw, ao)
    worker.post_send(WorkRequest(Opcode.RDMA_READ,
                                 (Sge(target.wqe_field_addr(idx, "qpn"), 3, target.sq_mr.lkey),),
                                 remote_addr=bucket, rkey=mr.rkey))
    worker.post_send(WorkRequest(Opcode.CAS, (Sge(buf, 8, mr.lkey),), S | WqeFlags.FENCE,
                                 remote_addr=target.wqe_field_addr(idx, "ctrl_word"),
                                 rkey=target.sq_mr.rkey, compare=ctrl_word(expect_raw, ao),
                                 swap_add=ctrl_word(armed_raw, ao)))
    worker.post_send(WorkRequest(Opcode.WAIT, target=wcq.cqn, count=1))
    worker.post_send(WorkRequest(Opcode.ENABLE, target=target.qpn, count=idx + 1))
    worker.ring_doorbell()
    sim.run()
    return nic.host.memory.read(dest, 5), [c.status for c in tcq.poll()]


def test_cas_on_wqe_taken() -> None:
    data, statuses = _cas_chain(0xBEEF42, 0xBEEF42)
    assert data == b"TAKEN"
    assert statuses == [WcStatus.SUCCESS]


def test_cas_on_wqe_not_taken() -> None:
    data, statuses = _cas_chain(0xBEEF42, 0x123456)
    assert data == bytes(5)
    assert statuses == [WcStatus.SUCCESS]  # the untouched WQE ran as a signaled NOP


def _self_modify(guard: str, profile: str = "cx5") -> bytes:
    """WQE k writes a new address into the raddr of a later WQE of the same QP."""
    sim = Simulation()
    nic, cq, qp, buf, mr = loopback(sim, profile=profile,
                                    managed=False)
    old, new = buf + 100, buf + 200
    order = nic.profile.wqe_field_byte_order
    later = WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"DATA", remote_addr=old,
                        rkey=mr.rkey)
    n_before = 2 if guard == "wait" else 1
    target_idx = qp.post_index + n_before
    # post a placeholder to learn the field address, then the real chain
    patch = WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=new.to_bytes(8, order),
                        remote_addr=0, rkey=qp.sq_mr.rkey)
    qp.post_send(patch)
    if guard == "wait":
        qp.post_send(WorkRequest(Opcode.WAIT, target=cq.cqn, count=1))
    qp.post_send(later)
    raddr_at = qp.wqe_field_addr(target_idx, "raddr")
    nic.host.memory.write(qp.wqe_field_addr(0, "raddr"), raddr_at.to_bytes(8, order))
    qp.ring_doorbell()
    sim.run()
    mem = nic.host.memory
    return b"old" if mem.read(old, 4) == b"DATA" else b"new" if mem.read(new, 4) == b"DATA" \
        else b"none"


def test_prefetch_hazard_executes_stale() -> None:
    assert _self_modify("none") == b"old"


def test_prefetch_hazard_fixed_by_wait() -> None:
    assert _self_modify("wait") == b"new"


def test_prefetch_past_wait_profile_keeps_the_hazard() -> None:
    sim = Simulation()
    from kbtpsim.nic import PROFILES

    prof = PROFILES["cx5"].replace(name="cx5-pp", prefetch_past_wait=True)
    nic, cq, qp, buf, mr = loopback(sim, profile=prof)  # type: ignore[arg-type]
    order = prof.wqe_field_byte_order
    qp.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=bytes(8), remote_addr=0,
                             rkey=qp.sq_mr.rkey))
    qp.post_send(WorkRequest(Opcode.WAIT, target=cq.cqn, count=1))
    qp.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"DATA",
                             remote_addr=buf + 100, rkey=mr.rkey))
    nic.host.memory.write(qp.wqe_field_addr(0, "inline") , (buf + 200).to_bytes(8, order))
    nic.host.memory.write(qp.wqe_field_addr(0, "raddr"),
                          qp.wqe_field_addr(2, "raddr").to_bytes(8, order))
    qp.ring_doorbell()
    sim.run()
    assert nic.host.memory.read(buf + 100, 4) == b"DATA"  # stale


@pytest.mark.parametrize(("loop_ns", "stale"), [(50.0, False), (2000.0, True)])
def test_without_guard_the_outcome_is_timing(loop_ns: float, stale: bool) -> None:
    """With prefetch depth 0 the next WQE is fetched as soon as the previous one starts:
    whether the patch lands first depends on timing; only WAIT/ENABLE guarantees it."""
    from kbtpsim.nic import PROFILES

    prof = PROFILES["cx5"].replace(name="cx5-np", prefetch_depth=0, loopback_ns=loop_ns)
    sim = Simulation()
    nic, _cq, qp, buf, mr = loopback(sim, profile=prof)  # type: ignore[arg-type]
    order = prof.wqe_field_byte_order
    qp.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=(buf + 200).to_bytes(
        8, order), remote_addr=0, rkey=qp.sq_mr.rkey))
    qp.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"DATA",
                             remote_addr=buf + 100, rkey=mr.rkey))
    nic.host.memory.write(qp.wqe_field_addr(0, "raddr"),
                          qp.wqe_field_addr(1, "raddr").to_bytes(8, order))
    qp.ring_doorbell()
    sim.run()
    assert (nic.host.memory.read(buf + 100, 4) == b"DATA") is stale


def test_masked_fetch_add_on_ring_head_matches_atomics() -> None:
    p = make_pair()
    n_slots = 4
    order = p.b.profile.atomic_byte_order
    head = p.bufb + 4096
    mask = atomics.ring_add_mask(n_slots)
    for i in range(6):
        p.qa.post_send(WorkRequest(Opcode.MASKED_FETCH_ADD, (Sge(p.bufa + 8 * i, 8, p.mra.lkey),),
                                   S, remote_addr=head, rkey=p.mrb.rkey,
                                   swap_add=atomics.RING_ADD_DATA, swap_mask=mask))
    p.qa.ring_doorbell()
    p.run()
    value, returned = 0, []
    for _ in range(6):
        returned.append(value)
        value = atomics.advance_counter(value, n_slots)
    got = [p.a.host.memory.read_u64(p.bufa + 8 * i, order) for i in range(6)]
    assert got == returned
    assert p.b.host.memory.read_u64(head, order) == value
    # the draft's example values (N = 4): offsets wrap after four slots
    assert [atomics.unpack_counter(v) for v in got[:5]] == [
        (0, 0), (1, 16), (2, 32), (3, 48), (4, 0)]


@pytest.mark.parametrize(("stored", "taken"), [(7, True), (8, False)])
def test_native_conditional(stored: int, taken: bool) -> None:
    sim = Simulation()
    nic, cq, qp, buf, mr = loopback(sim, profile="ideal")
    order = nic.profile.atomic_byte_order
    nic.host.memory.write_u64(buf + 64, stored, order)
    qp.post_send(WorkRequest(Opcode.RDMA_WRITE, flags=S, inline_data=b"yes",
                             remote_addr=buf + 128, rkey=mr.rkey,
                             cond=Condition(buf + 64, mr.lkey, 7)))
    qp.ring_doorbell()
    sim.run()
    assert (nic.host.memory.read(buf + 128, 3) == b"yes") is taken
    assert cq.poll()[0].status is WcStatus.SUCCESS


def test_strided_key_finds_entry_from_scattered_handle() -> None:
    """A handle scaled by the stride is the TO of its 16-octet table entry."""
    p = make_pair("ideal")
    table = p.b.host.alloc(16 * 100, 64)
    for k in range(100):
        p.b.host.memory.write(table + 16 * k, k.to_bytes(16, "little"))
    key = p.b.register_strided(table, 16, 100, 1 << 12, Access.REMOTE_READ)
    p.qa.post_send(WorkRequest(Opcode.RDMA_READ, (Sge(p.bufa, 16, p.mra.lkey),), S,
                               remote_addr=42 << 12, rkey=key.rkey))
    p.qa.post_send(WorkRequest(Opcode.RDMA_READ, (Sge(p.bufa + 16, 32, p.mra.lkey),), S,
                               remote_addr=43 << 12, rkey=key.rkey))
    p.qa.ring_doorbell()
    p.run()
    assert p.a.host.memory.read(p.bufa, 16) == (42).to_bytes(16, "little")
    assert [c.status for c in p.cqa.poll()] == [WcStatus.SUCCESS, WcStatus.REM_ACCESS_ERR]


def test_atomic_result_lands_in_a_later_wqe() -> None:
    """ALLOC_STORE's first step: FetchAdd on a Head returns the slot address into a READ's
    raddr; WAIT on the FetchAdd's CQE, then ENABLE the READ."""
    sim = Simulation()
    nic, wcq, worker, buf, mr = loopback(sim)
    tcq = nic.create_cq(16)
    target = nic.create_qp(tcq, tcq, managed=True)
    sim.connect(target, target)
    order = nic.profile.atomic_byte_order
    head, ring = buf + 8, buf + 4096
    for k in range(4):
        nic.host.memory.write(ring + 16 * k, bytes([0xA0 + k]) * 16)
    nic.host.memory.write_u64(head, ring, order)
    dest = buf + 8192
    for _ in range(2):
        i = target.post_send(WorkRequest(Opcode.RDMA_READ, (Sge(dest, 16, mr.lkey),), S,
                                         remote_addr=0, rkey=mr.rkey))
        worker.post_send(WorkRequest(Opcode.FETCH_ADD,
                                     (Sge(target.wqe_field_addr(i, "raddr"), 8,
                                          target.sq_mr.lkey),),
                                     S, remote_addr=head, rkey=mr.rkey, swap_add=16))
        worker.post_send(WorkRequest(Opcode.WAIT, target=wcq.cqn, count=wcq.count + 1))
        worker.post_send(WorkRequest(Opcode.ENABLE, target=target.qpn, count=i + 1))
        worker.ring_doorbell()
        sim.run()
        wcq.poll()
    assert nic.host.memory.read(dest, 16) == bytes([0xA1]) * 16  # second slot
    assert [c.status for c in tcq.poll()] == [WcStatus.SUCCESS] * 2
