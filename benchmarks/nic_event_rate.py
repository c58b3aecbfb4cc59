"""Speed of the NIC model: simulated WRs and simpy events per wall-clock second.

Run: ``python benchmarks/nic_event_rate.py [--wrs N]``. It streams small RDMA WRITEs and
READs over 4 QP pairs between two cx5 NICs, then runs a bare simpy timeout loop in the same
process, and prints both event rates. Events are counted from the environment's event-id
counter, so the model is not slowed down to count them. Not part of the default test run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import simpy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbtpsim.nic import Opcode, Sge, Simulation, WorkRequest, WqeFlags
from tests.nic.conftest import ALL


def _events(env: simpy.Environment) -> int:
    return next(env._eid)  # type: ignore[attr-defined]  # events scheduled so far


def model_rate(n_wrs: int, n_qps: int = 4) -> tuple[float, float, int, int]:
    """(WRs per second, events per second, WRs, events) for the NIC model."""
    sim = Simulation()
    a, b = sim.add_nic("a", "cx5"), sim.add_nic("b", "cx5")
    buf_a, buf_b = a.host.alloc(1 << 20), b.host.alloc(1 << 20)
    mra, mrb = a.register_mr(buf_a, 1 << 20, ALL), b.register_mr(buf_b, 1 << 20, ALL)
    pairs = []
    for _ in range(n_qps):
        cqa, cqb = a.create_cq(1 << 16), b.create_cq(1 << 16)
        qa, qb = a.create_qp(cqa, cqa, 256, 16), b.create_qp(cqb, cqb, 256, 16)
        sim.connect(qa, qb)
        pairs.append((qa, cqa))
    per_qp = n_wrs // n_qps
    env = sim.env

    def thread(qp, cq):  # type: ignore[no-untyped-def]
        posted = 0
        while posted < per_qp:
            n = min(64, per_qp - posted)
            for i in range(n):
                op = Opcode.RDMA_WRITE if (posted + i) % 2 else Opcode.RDMA_READ
                flags = WqeFlags.SIGNALED if i == n - 1 else WqeFlags.NONE
                qp.post_send(WorkRequest(op, (Sge(buf_a, 64, mra.lkey),), flags,
                                         remote_addr=buf_b, rkey=mrb.rkey))
            qp.ring_doorbell()
            posted += n
            yield from cq.wait(1)

    for qp, cq in pairs:
        env.process(thread(qp, cq))
    t0 = time.perf_counter()
    sim.run()
    wall = time.perf_counter() - t0
    events = _events(env)
    return per_qp * n_qps / wall, events / wall, per_qp * n_qps, events


def bare_rate(n_events: int) -> float:
    """Events per second of a bare simpy loop of timeouts."""
    env = simpy.Environment()

    def loop():  # type: ignore[no-untyped-def]
        for _ in range(n_events):
            yield env.timeout(1)

    env.process(loop())
    t0 = time.perf_counter()
    env.run()
    return _events(env) / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wrs", type=int, default=40_000, help="WRs to simulate")
    args = ap.parse_args()
    wrs_s, ev_s, wrs, events = model_rate(args.wrs)
    bare = bare_rate(events)
    print(f"model: {wrs} WRs, {events} events; {wrs_s:,.0f} WRs/s, {ev_s:,.0f} events/s, "
          f"{events / wrs:.1f} events/WR")
    print(f"bare simpy timeout loop: {bare:,.0f} events/s")
    print(f"model event rate / bare loop: {ev_s / bare:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
