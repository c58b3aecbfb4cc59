"""Timing structure: contention, atomics lock table, latency composition, bandwidth."""

from __future__ import annotations

from kbtpsim.nic import PROFILES, Opcode, Sge, WorkRequest, WqeFlags
from tests.nic.conftest import make_pair

S = WqeFlags.SIGNALED


def _atomics_time(spread: bool, profile: object = "cx5") -> int:
    p = make_pair(profile)  # type: ignore[arg-type]
    for i in range(64):
        addr = p.bufb + (64 * i if spread else 0)
        p.qa.post_send(WorkRequest(Opcode.FETCH_ADD, (Sge(p.bufa, 8, p.mra.lkey),), S,
                                   remote_addr=addr, rkey=p.mrb.rkey, swap_add=1))
    p.qa.ring_doorbell()
    p.run()
    assert len(p.cqa.poll(100)) == 64
    total = sum(p.b.host.memory.read_u64(p.bufb + 64 * i, "big") for i in range(64))
    assert total == 64
    return p.sim.now


def test_same_address_atomics_are_much_slower_than_spread() -> None:
    assert _atomics_time(spread=False) > 2 * _atomics_time(spread=True)


def test_one_lock_serialises_spread_atomics_too() -> None:
    one_lock = PROFILES["cx5"].replace(name="cx5-1lock", atomic_lock_slots=1)
    assert _atomics_time(True, one_lock) > 2 * _atomics_time(True)


def _one(opcode: Opcode, size: int) -> int:
    p = make_pair()
    wr = WorkRequest(opcode, (Sge(p.bufa, size, p.mra.lkey),), S, remote_addr=p.bufb,
                     rkey=p.mrb.rkey)
    p.qa.post_send(wr)
    p.qa.ring_doorbell()
    p.run()
    return p.cqa.poll()[0].time


def test_read_latency_follows_from_its_parts() -> None:
    """A WRITE pays a DMA read at the requester, a READ the same DMA read at the responder;
    the READ then also waits for its response's placement (one PCIe latency), while the
    WRITE's ACK leaves as soon as the data has been received."""
    prof = PROFILES["cx5"]
    read, write = _one(Opcode.RDMA_READ, 64), _one(Opcode.RDMA_WRITE, 64)
    assert abs((read - write) - prof.pcie_latency_ns * 1000) < 0.2 * prof.pcie_latency_ns * 1000
    big_read = _one(Opcode.RDMA_READ, 65536)
    wire_ps = 65536 * 8 / prof.link_gbps * 1000
    assert big_read - read > wire_ps  # the response is serialised on the link


def test_two_qps_contend_for_the_link() -> None:
    def run(n_qps: int) -> int:
        p = make_pair()
        qps = [p.qa]
        for _ in range(n_qps - 1):
            qa = p.a.create_qp(p.cqa, p.cqa)
            qb = p.b.create_qp(p.cqb, p.cqb)
            p.sim.connect(qa, qb)
            qps.append(qa)
        for qp in qps:
            for _ in range(8):
                qp.post_send(WorkRequest(Opcode.RDMA_WRITE, (Sge(p.bufa, 65536, p.mra.lkey),),
                                         S, remote_addr=p.bufb, rkey=p.mrb.rkey))
            qp.ring_doorbell()
        p.run()
        return p.sim.now

    one, two = run(1), run(2)
    assert two > 1.7 * one  # same NIC port and PCIe: twice the bytes take ~twice as long


def test_bandwidth_is_bounded_by_pcie() -> None:
    p = make_pair()
    n, size = 16, 1 << 18
    for _ in range(n):
        p.qa.post_send(WorkRequest(Opcode.RDMA_WRITE, (Sge(p.bufa, size, p.mra.lkey),), S,
                                   remote_addr=p.bufb, rkey=p.mrb.rkey))
    p.qa.ring_doorbell()
    p.run()
    gbps = n * size * 8 / (p.sim.now / 1000)
    assert 45 < gbps < 63  # PCIe Gen3 x8 with TLP headers, below the 100G link
