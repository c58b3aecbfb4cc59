"""The target CPU model: per-operation costs, cores, accounting."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from kbtpsim.system import Cluster, CpuCosts
from tests.system.helpers import BASE_A, BASE_B, config, run


def test_cpu_time_per_operation_is_the_sum_of_its_parts() -> None:
    cluster = Cluster.build(config())

    def body(c: Cluster) -> Generator[Any, Any, None]:
        a = c.initiators["a"]
        yield a.alloc_store(BASE_A, b"x" * 32, seal=True)  # inline
        yield a.alloc_store(BASE_A + 1, b"y" * 4096, inline=False)  # RDMA Read
        yield a.load(BASE_A)

    run(cluster, body)
    cpu = cluster.server.cpu
    poll, post, bell = 40, 60, 100  # cx5 cpu_poll_ns, cpu_post_ns, cpu_doorbell_ns
    inline = poll + 600 + post + post + bell  # repost recv, SEND, doorbell
    read = poll + 600 + post + post + bell + poll + 200 + post + bell  # READ, then SEND
    assert cpu.busy_ns("ALLOC_STORE") == inline + read
    assert cpu.ops("ALLOC_STORE") == 2
    assert cpu.per_op_ns("LOAD") == poll + 300 + post + 2 * post + bell  # WRITE + SEND
    assert cpu.report()["HELLO"]["ops"] == 1


def test_costs_are_configurable_and_checked() -> None:
    with pytest.raises(ValueError, match="unknown operations"):
        CpuCosts(per_op_ns={"LAOD": 1})
    with pytest.raises(ValueError, match="post_ns"):
        CpuCosts(post_ns=-1)
    costs = CpuCosts(per_op_ns={"LOAD": 1000}, post_ns=0, doorbell_ns=0, poll_ns=0)
    cluster = Cluster.build(config(), costs=costs)

    def body(c: Cluster) -> Generator[Any, Any, None]:
        a = c.initiators["a"]
        yield a.load(BASE_A)

    run(cluster, body)
    assert cluster.server.cpu.per_op_ns("LOAD") == 1000


@pytest.mark.parametrize("cores", [1, 2])
def test_more_cores_serve_connections_in_parallel(cores: int) -> None:
    slow = CpuCosts(per_op_ns={"STORE": 20_000})
    cluster = Cluster.build(config(names=("a", "b")), cores=cores, costs=slow)

    def body(c: Cluster) -> Generator[Any, Any, int]:
        start = c.sim.now
        procs = [c.initiators[n].store(base + i, b"x") for i in range(5)
                 for n, base in (("a", BASE_A), ("b", BASE_B))]
        yield c.sim.env.all_of(procs)
        return c.sim.now - start

    took = run(cluster, body)
    # 10 requests of 20 us each: one core takes >= 200 us, two cores about half
    if cores == 1:
        assert took >= 200_000_000
    else:
        assert 100_000_000 <= took < 120_000_000
