"""Placement order: in-order (IB/RoCE) and the RDMAP binding (RFC 5040 rules 3, 5, 10)."""

from __future__ import annotations

from kbtpsim.nic import PROFILES, Opcode, Sge, WorkRequest, WqeFlags
from tests.nic.conftest import make_pair

N_PKT = 8


def _placements(profile: str) -> tuple[list[int], int, bool]:
    prof = PROFILES[profile]
    p = make_pair(prof)  # type: ignore[arg-type]
    mtu = prof.mtu
    p.a.host.memory.write(p.bufa, b"w" * (N_PKT * mtu))
    seen = [p.b.watch(p.bufb + k * mtu) for k in range(N_PKT)]
    p.qb.post_recv([Sge(p.bufb + (1 << 19), 64, p.mrb.lkey)])
    p.qa.post_send(WorkRequest(Opcode.RDMA_WRITE, (Sge(p.bufa, N_PKT * mtu, p.mra.lkey),),
                               remote_addr=p.bufb, rkey=p.mrb.rkey))
    p.qa.post_send(WorkRequest(Opcode.SEND, flags=WqeFlags.SIGNALED, inline_data=b"done"))
    p.qa.ring_doorbell()
    p.run()
    [recv] = p.cqb.poll()
    complete = p.b.host.memory.read(p.bufb, N_PKT * mtu) == b"w" * (N_PKT * mtu)
    return [ev.value for ev in seen], recv.time, complete


def test_in_order_placement() -> None:
    times, recv_time, complete = _placements("cx5")
    assert times == sorted(times)
    assert complete and recv_time >= times[-1]


def test_rdmap_places_out_of_order_and_the_send_makes_it_determinate() -> None:
    PROFILES["cx5-rdmap-test"] = PROFILES["cx5"].replace(
        name="cx5-rdmap-test", placement="rdmap", ooo_jitter_ns=3000.0)
    try:
        times, recv_time, complete = _placements("cx5-rdmap-test")
    finally:
        del PROFILES["cx5-rdmap-test"]
    assert times != sorted(times)  # rule 3: Write data placed in any order
    assert complete and recv_time >= max(times)  # rules 5 and 10
