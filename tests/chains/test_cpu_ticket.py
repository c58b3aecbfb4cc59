"""The target CPU's Tickets through its own NIC (decision O8): masked FetchAdds on Head,
one at a time; the core spins until the CQE and the spin is charged."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy

from kbtpsim.chains.cpu_ticket import NicTicketTaker
from kbtpsim.chains.layout import register_ring
from kbtpsim.nic import Simulation
from kbtpsim.system.cpu import TargetCpu
from kbtpsim.target.layout import RingLayout

SLOTS = 8


def setup(cores: int) -> tuple[Simulation, NicTicketTaker, TargetCpu]:
    sim = Simulation()
    nic = sim.add_nic("t", "ideal-be")
    slots = nic.host.alloc(16 * SLOTS, 64)
    head, tail = nic.host.alloc(8, 8), nic.host.alloc(8, 8)
    ring = RingLayout("shared", slots, SLOTS, head, tail)
    taker = NicTicketTaker(nic, register_ring(nic, ring), SLOTS)
    return sim, taker, TargetCpu(sim.env, nic.profile, cores=cores)


def test_two_cores_take_successive_tickets_in_turn() -> None:
    """Two processes, each on its own core, take a Ticket each: they get 0 and 1 (the
    masked FetchAdd advances Head by one slot), one after the other (one result word)."""
    sim, taker, cpu = setup(cores=2)
    env = sim.env
    got: dict[str, tuple[int, int]] = {}

    def proc(name: str) -> Generator[simpy.Event, Any, None]:
        with cpu.request() as core:
            yield core
            got[name] = yield from taker.take(cpu, "ALLOC_STORE")

    env.process(proc("a"))
    env.process(proc("b"))
    sim.run()
    assert got["a"][0] == 0 and got["b"][0] == 1
    assert got["a"][1] < got["b"][1]
    assert taker.taken == 2 and len(taker.cq) == 0


def test_the_core_spins_until_the_cqe_and_is_charged_for_it() -> None:
    """The whole time in ``take`` is busy CPU time: post, doorbell, the spin on the CQ
    while the FetchAdd runs through the NIC, and the poll that sees it."""
    sim, taker, cpu = setup(cores=1)
    env = sim.env
    held: list[int] = []

    def proc() -> Generator[simpy.Event, Any, None]:
        with cpu.request() as core:
            yield core
            start = int(env.now)
            yield from taker.take(cpu, "ALLOC_STORE")
            held.append(int(env.now) - start)

    env.process(proc())
    sim.run()
    assert held[0] > cpu.post_ps + cpu.doorbell_ps + cpu.poll_ps  # it waited for the NIC
    assert cpu.busy_ns("ALLOC_STORE") * 1000 == held[0]
