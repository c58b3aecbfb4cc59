"""A DIRECT_ALLOC Head has two kinds of users: the initiator's FetchAdds through the
target's NIC, and the target itself (bookkeeping of those tickets; its own ticket for the
initiator's ALLOC_STORE). Regressions of docs/decisions.md, S1."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario import scenario_from_dict
from kbtpsim.system import Cluster, OpResult, replay
from kbtpsim.system.direct import HeadGate
from kbtpsim.wire import Feature, Status
from tests.system.helpers import BASE_A, config, connect_only

DIRECT = Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC

#: the runner's reproducer: DIRECT_ALLOC alongside initiators doing ALLOC_STORE
REPRO: dict[str, Any] = {
    "stop": {"operations": 400},
    "target": {"blocks": 64, "block_size": "4KiB", "features": {"direct_alloc": True}},
    "initiators": [
        {"count": 2, "workload": {"mix": {"alloc_store": 1, "load": 1, "free": 1},
                                  "length": {"value": 1000}}},
        {"name": "d", "workload": {"mix": {"direct_alloc": 1, "load": 1, "free": 1}}},
    ],
}


def test_a_fetch_add_is_known_to_the_target_when_its_head_write_is_visible() -> None:
    """The run may stop (and the oracle inspect the target) right after a FetchAdd's
    write to the Head became visible: the target's tickets must already include it,
    otherwise Tail - Head + outstanding tickets no longer counts the ring's blocks and
    the state differs from the reference (which replays the log)."""
    cfg = config(features=DIRECT)
    cluster = Cluster.build(cfg)
    connect_only(cluster)
    server = cluster.server
    assert server.layout is not None
    head_addr = server.layout.rings[1].head_addr
    a = cluster.initiators["a"]
    env = cluster.sim.env
    a.direct_alloc(BASE_A, b"one-sided")
    visible = server.nic.watch(head_addr)  # registered after the server's own watch
    env.run(until=visible)
    target = server.target
    assert target.initiators["a"].direct is not None
    assert target.rings[1].head_ticket == 1
    assert dict(target.initiators["a"].direct.outstanding) == {0: int(env.now)}
    target.check_invariant()
    ref, _ = replay(cfg, server.log)
    assert ref.state() == target.state()
    ref.check_invariant()
    assert server.observe_heads() == 0  # nothing left to notice


def _race(delay_ns: int) -> tuple[Cluster, list[OpResult]]:
    cluster = Cluster.build(config(features=DIRECT))
    connect_only(cluster)
    a = cluster.initiators["a"]
    env = cluster.sim.env

    def body() -> Generator[Any, Any, list[OpResult]]:
        via_target = a.alloc_store(BASE_A, b"cpu", inline=True)
        yield env.timeout(delay_ns * 1000)
        one_sided = a.direct_alloc(BASE_A + 1, b"nic")
        return [(yield via_target), (yield one_sided)]

    return cluster, cluster.run(body())


@pytest.mark.parametrize("delay_ns", range(150, 451, 25))
def test_alloc_store_and_direct_alloc_in_flight_together_get_distinct_tickets(
        delay_ns: int) -> None:
    """The target CPU's read-modify-write of the Head (ALLOC_STORE) and the NIC's
    FetchAdd on it are not atomic with respect to each other: without the initiator's
    HeadGate, a FetchAdd whose posted write lands after the CPU read the Head returned
    the CPU's ticket too (the direct allocation then polled a consumed slot forever)."""
    cluster, (stored, placed) = _race(delay_ns)
    assert stored.ok and placed.ok
    assert stored.completion is not None and placed.completion is not None
    assert stored.completion.block_offset != placed.completion.block_offset
    server = cluster.server
    server.target.check_invariant()
    ref, _ = replay(server.config, server.log)
    mine, theirs = server.target.state(), ref.state()
    # the pool differs: the one-sided write into the block is not in the log
    assert mine[:2] + mine[3:] == theirs[:2] + theirs[3:]


def test_head_gate_admits_runs_of_one_kind_in_arrival_order() -> None:
    env = simpy.Environment()
    gate = HeadGate(env)
    order: list[tuple[str, int]] = []

    def user(kind: str, start: int, hold: int) -> Generator[Any, Any, None]:
        yield env.timeout(start)
        yield from gate.enter(kind)
        assert not gate.busy["target" if kind == "fetch_add" else "fetch_add"]
        order.append((kind, int(env.now)))
        yield env.timeout(hold)
        gate.leave(kind)

    for args in (("target", 0, 10), ("target", 1, 10), ("fetch_add", 2, 5),
                 ("target", 3, 1), ("fetch_add", 4, 5)):
        env.process(user(*args))
    env.run()
    # the third target waits behind the first fetch_add (no overtaking), the second
    # fetch_add arrived behind it and so waits for it
    assert order == [("target", 0), ("target", 1), ("fetch_add", 11), ("target", 16),
                     ("fetch_add", 17)]
    assert gate.waits == 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_runner_repro_matches_the_reference_target(seed: int) -> None:
    out = run_scenario(scenario_from_dict({**REPRO, "seed": seed}), oracle=True)
    assert [str(d) for d in out.divergences] == []
    assert out.system is not None
    for server in out.system.servers.values():
        server.target.check_invariant()


def test_concurrent_fetch_adds_on_one_head_return_distinct_tickets() -> None:
    out = run_scenario(scenario_from_dict({**REPRO, "seed": 0}), oracle=True)
    assert out.system is not None
    ops = out.system.servers["target"].target.stats().ops
    assert ops.get(("BIND", Status.MALFORMED.name), 0) == 0
