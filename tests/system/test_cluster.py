"""Topology: the shared server port, several initiators, buffers."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from kbtpsim.nic import PROFILES
from kbtpsim.system import Cluster, Staging, StagingFull
from tests.system.helpers import BASE_A, BASE_B, config, run

MIB = 1 << 20


def _two_loads(shared: bool) -> tuple[int, int]:
    # PCIe faster than the 100 Gb/s link, so the network is the bottleneck
    prof = PROFILES["cx5"].replace(pcie_gbps=400.0)
    cluster = Cluster.build(config(names=("a", "b"), block_size=MIB, blocks=8, quota=2),
                            shared_port=shared, profile=prof)

    def body(c: Cluster) -> Generator[Any, Any, tuple[int, int]]:
        a, b = c.initiators["a"], c.initiators["b"]
        yield a.alloc_store(BASE_A, bytes(MIB), seal=True, inline=False)
        yield b.alloc_store(BASE_B, bytes(MIB), seal=True, inline=False)
        alone = yield a.load(BASE_A)
        both = yield c.sim.env.all_of([a.load(BASE_A), b.load(BASE_B)])
        return alone.latency_ps, max(r.latency_ps for r in both.values())

    alone, both = run(cluster, body)
    return int(alone), int(both)


def test_the_server_port_is_shared() -> None:
    alone, both = _two_loads(shared=True)
    assert 1.8 * alone < both < 2.2 * alone  # two 1 MiB loads share one port
    alone_p2p, both_p2p = _two_loads(shared=False)
    assert alone_p2p == pytest.approx(alone, rel=0.02)
    assert both_p2p < 1.3 * alone_p2p  # separate links: only PCIe and the CPU shared


def test_staging_reuses_and_bounds_its_region() -> None:
    cluster = Cluster.build(config())
    staging = Staging(cluster.server.nic, 4096)
    first = staging.alloc(1000)
    second = staging.alloc(1000)
    assert second - first == 1024
    with pytest.raises(StagingFull):
        staging.alloc(3000)
    staging.free(first)
    staging.free(second)
    assert staging.alloc(4096) == first  # wraps to the start once free
    with pytest.raises(StagingFull):
        staging.alloc(5000)
