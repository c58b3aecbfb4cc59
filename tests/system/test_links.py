"""Per-connection links that share a port's serialisers (``Link.branch``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kbtpsim.nic import Link, Simulation
from kbtpsim.system import Initiator, SoftwareTargetServer
from tests.system.helpers import BASE_A, BASE_B, config


class _Pkt:
    def __init__(self, n: int) -> None:
        self.wire_len = n


def test_branches_queue_on_the_port_with_their_own_delay() -> None:
    sim = Simulation(seed=0)
    env = sim.env
    port = Link(env, gbps=100, propagation_ns=0, overhead=0)
    near = port.branch(propagation_ns=100)
    far = port.branch(propagation_ns=1000, switch_ns=500)
    assert near.a_to_b.wire is far.a_to_b.wire is port.a_to_b.wire
    assert near.b_to_a.wire is port.b_to_a.wire
    assert (near.a_to_b.delay_ps, far.b_to_a.delay_ps) == (100_000, 1_500_000)
    arrived: dict[str, int] = {}
    wire_ps = port.a_to_b.wire_ps(12_500)  # 1 us at 100 Gb/s
    assert wire_ps == 1_000_000
    near.a_to_b.send(_Pkt(12_500), lambda p: arrived.setdefault("near", int(env.now)))
    far.a_to_b.send(_Pkt(12_500), lambda p: arrived.setdefault("far", int(env.now)))
    env.run()
    # the second packet waits for the first on the shared serialiser
    assert arrived == {"near": 1_100_000, "far": 2_000_000 + 1_500_000}


def test_connections_over_branches_share_the_ports_busy_time() -> None:
    cfg = config(names=("a", "b"))
    sim = Simulation(seed=0)
    server = SoftwareTargetServer(sim, cfg)
    port = Link(sim.env, gbps=100, propagation_ns=0, names=("target", "switch"))
    a = Initiator(sim, "a", initiator_id=cfg.initiators[0].initiator_id)
    b = Initiator(sim, "b", initiator_id=cfg.initiators[1].initiator_id)

    def work() -> Generator[Any, Any, None]:
        yield sim.env.all_of([a.connect(server, port.branch(propagation_ns=300)),
                              b.connect(server, port.branch(propagation_ns=800))])
        yield sim.env.all_of([a.alloc_store(BASE_A, b"a" * 4096, inline=False, seal=True),
                              b.alloc_store(BASE_B, b"b" * 4096, inline=False, seal=True)])
        ra = yield a.load(BASE_A)
        rb = yield b.load(BASE_B)
        assert ra.data == b"a" * 4096 and rb.data == b"b" * 4096

    sim.env.run(until=sim.env.process(work()))
    # both connections' loads (and the stores' RDMA Read requests) left through the port
    assert port.a_to_b.busy_ps >= 2 * port.a_to_b.wire_ps(4096)
    assert port.b_to_a.busy_ps >= 2 * port.b_to_a.wire_ps(4096)
