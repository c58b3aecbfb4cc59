"""The target CPU's Tickets through its own NIC (decision O8): masked FetchAdds on Head,
each with its own result word; the core is given back while a FetchAdd runs."""

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


def setup() -> tuple[Simulation, NicTicketTaker, TargetCpu]:
    sim = Simulation()
    nic = sim.add_nic("t", "ideal-be")
    slots = nic.host.alloc(16 * SLOTS, 64)
    head, tail = nic.host.alloc(8, 8), nic.host.alloc(8, 8)
    ring = RingLayout("shared", slots, SLOTS, head, tail)
    taker = NicTicketTaker(nic, register_ring(nic, ring), SLOTS)
    return sim, taker, TargetCpu(sim.env, nic.profile, cores=1)


def test_tickets_are_taken_in_turn_with_the_core_given_back() -> None:
    """Two processes on one core take a Ticket each: the second gets the core (and posts
    its FetchAdd) while the first's FetchAdd runs, each gets its own Ticket, and each is
    charged the post, the doorbell and one poll, not the time the FetchAdd took."""
    sim, taker, cpu = setup()
    env = sim.env
    got: dict[str, tuple[int, int, int]] = {}
    posted: dict[str, int] = {}

    def proc(name: str) -> Generator[simpy.Event, Any, None]:
        with cpu.request() as core:
            yield core
            posted[name] = int(env.now)
            ticket, at, held = yield from taker.take(cpu, "ALLOC_STORE", core)
            assert held is not core and held in cpu.resource.users
            got[name] = (ticket, at, int(env.now))
            cpu.resource.release(held)

    env.process(proc("a"))
    env.process(proc("b"))
    sim.run()
    assert sorted(t for t, _, _ in got.values()) == [0, 1]
    a_done = got["a"][2]
    assert posted["b"] < got["a"][1] < a_done  # b ran while a's FetchAdd was in flight
    charged = cpu.busy_ns("ALLOC_STORE") * 1000
    assert charged == 2 * (cpu.post_ps + cpu.doorbell_ps + cpu.poll_ps)
    assert a_done - posted["a"] > cpu.post_ps + cpu.doorbell_ps + cpu.poll_ps
    assert taker.taken == 2 and len(taker.cq) == 0


def test_without_a_core_the_cpu_spins_and_is_charged_for_it() -> None:
    sim, taker, cpu = setup()
    env = sim.env
    out: list[int] = []

    def proc() -> Generator[simpy.Event, Any, None]:
        with cpu.request() as core:
            yield core
            start = int(env.now)
            ticket, _, held = yield from taker.take(cpu, "ALLOC_STORE")
            assert ticket == 0 and held is None
            out.append(int(env.now) - start)

    env.process(proc())
    sim.run()
    assert cpu.busy_ns("ALLOC_STORE") * 1000 == out[0]
