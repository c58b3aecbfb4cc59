"""Shared builders for the NIC tests."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kbtpsim.nic import (
    Access,
    CompletionQueue,
    MemoryRegion,
    Nic,
    QueuePair,
    Simulation,
)

ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC


@dataclass
class Pair:
    sim: Simulation
    a: Nic
    b: Nic
    cqa: CompletionQueue
    cqb: CompletionQueue
    qa: QueuePair
    qb: QueuePair
    bufa: int
    bufb: int
    mra: MemoryRegion
    mrb: MemoryRegion

    def run(self) -> None:
        self.sim.run()


def make_pair(profile: str = "cx5", size: int = 1 << 20, trace: bool = False,
              **qp_kw: object) -> Pair:
    sim = Simulation(trace=trace)
    a = sim.add_nic("a", profile)
    b = sim.add_nic("b", profile)
    cqa, cqb = a.create_cq(4096), b.create_cq(4096)
    qa = a.create_qp(cqa, cqa, **qp_kw)  # type: ignore[arg-type]
    qb = b.create_qp(cqb, cqb, **qp_kw)  # type: ignore[arg-type]
    sim.connect(qa, qb)
    bufa, bufb = a.host.alloc(size, 4096), b.host.alloc(size, 4096)
    mra = a.register_mr(bufa, size, ALL)
    mrb = b.register_mr(bufb, size, ALL)
    return Pair(sim, a, b, cqa, cqb, qa, qb, bufa, bufb, mra, mrb)


@pytest.fixture
def pair() -> Pair:
    return make_pair()
