"""Baseline servers and clients: data, target CPU, round trips, latency and memory
accounting on tiny cases, against hand-computed expectations."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from kbtpsim.baselines import (
    BaselineClient,
    BaselineResult,
    BaselineServer,
    OneSidedDynamicClient,
    OneSidedDynamicServer,
    OneSidedStaticClient,
    OneSidedStaticServer,
    TwoSidedClient,
    TwoSidedServer,
)
from kbtpsim.baselines.alloc import RangeAllocator
from kbtpsim.baselines.measure import kbtp_memory, round_trips
from kbtpsim.nic import Link, Simulation, get_profile
from kbtpsim.scenario.schema import BaselineSpec
from kbtpsim.system import Cluster
from kbtpsim.target import InitiatorConfig, TargetConfig
from kbtpsim.wire import Status
from kbtpsim.workload import Request

BS = 4096
POLL, POST, DOORBELL = 40, 60, 100  # cx5 profile, ns
NS = 1000  # ps


def config(quota: int = 8, blocks: int = 32) -> TargetConfig:
    return TargetConfig(blocks=blocks, block_size=BS, initiators=(
        InitiatorConfig("a", b"a" * 16, quota, 0x1000, 256),
        InitiatorConfig("b", b"b" * 16, quota, 0x2000, 256)))


def system(server_cls: type[BaselineServer], client_cls: type[BaselineClient],
           spec: BaselineSpec | None = None
           ) -> tuple[Simulation, BaselineServer, dict[str, BaselineClient]]:
    sim = Simulation(seed=0)
    server = server_cls(sim, config(), profile="cx5", cores=1, spec=spec)
    p = get_profile("cx5")
    port = Link(sim.env, gbps=p.link_gbps, propagation_ns=p.propagation_ns + p.phy_ns,
                switch_ns=p.switch_ns, overhead=p.wire_overhead, names=("target", "switch"))
    clients = {n: client_cls(sim, n, profile="cx5") for n in ("a", "b")}
    sim.env.run(until=sim.env.all_of([c.connect(server, port) for c in clients.values()]))
    return sim, server, clients


def do(sim: Simulation, proc: simpy.Process) -> BaselineResult:
    res: BaselineResult = sim.env.run(until=proc)
    return res


Gen = Generator[simpy.Event, Any, Any]


@pytest.mark.parametrize("server_cls,client_cls,rts", [
    (OneSidedStaticServer, OneSidedStaticClient, (1, 1, 0)),
    (OneSidedDynamicServer, OneSidedDynamicClient, (2, 1, 1)),
    (TwoSidedServer, TwoSidedClient, (1, 1, 1)),
])
def test_store_load_free_data_and_round_trips(
        server_cls: type[BaselineServer], client_cls: type[BaselineClient],
        rts: tuple[int, int, int]) -> None:
    sim, _, c = system(server_cls, client_cls)
    data = bytes(range(256)) * 12  # 3072 octets
    st = do(sim, c["a"].alloc_store(0x1000, data))
    assert st.ok and st.round_trips == rts[0] and st.completion is not None
    assert st.completion.data_length == len(data)
    ld = do(sim, c["b"].load(0x1000))  # another initiator reads it
    assert ld.ok and ld.data == data and ld.round_trips == rts[1]
    fr = do(sim, c["a"].free(0x1000))
    assert fr.ok and fr.round_trips == rts[2]
    gone = do(sim, c["b"].load(0x1000))
    assert gone.status == Status.NOT_VALID
    for r in (st, ld):
        assert round_trips(Request("load", 0), r) == r.round_trips  # the result's own count


def test_static_costs_no_target_cpu_and_reserves_regions_up_front() -> None:
    sim, server, c = system(OneSidedStaticServer, OneSidedStaticClient)
    mem = server.memory()
    assert mem.reserved == 2 * 8 * BS and mem.allocated == 0  # two regions of quota blocks
    for k in range(3):
        assert do(sim, c["a"].alloc_store(0x1000 + k, b"x" * 100)).ok
    assert server.memory().allocated == 3 * BS  # its own block allocator: whole blocks
    fr = do(sim, c["a"].free(0x1001))
    assert fr.latency_ps == 0  # local bookkeeping only
    assert server.memory().allocated == 2 * BS and server.memory().reserved == 2 * 8 * BS
    assert server.cpu.busy_ns() == 0
    # a region holds quota blocks: the 9th store has no room
    for k in range(3, 8):
        assert do(sim, c["a"].alloc_store(0x1000 + k, b"y")).ok
    assert do(sim, c["a"].alloc_store(0x1100, b"z")).ok  # the freed block
    assert do(sim, c["a"].alloc_store(0x1101, b"z")).status == Status.NO_SPACE


def test_dynamic_cpu_per_operation_is_hand_computed() -> None:
    sim, server, c = system(OneSidedDynamicServer, OneSidedDynamicClient,
                            BaselineSpec(register_cost="250ns"))
    assert do(sim, c["a"].alloc_store(0x1000, b"k" * 1000)).ok
    assert do(sim, c["b"].load(0x1000)).ok  # one-sided: no CPU
    assert do(sim, c["a"].free(0x1000)).ok
    rep = server.cpu.report()
    # poll + ALLOC_STORE (600) + registration (250) + receive re-post + reply post + doorbell
    assert rep["ALLOC_STORE"]["per_op_ns"] == POLL + 600 + 250 + POST + POST + DOORBELL
    assert rep["FREE"]["per_op_ns"] == POLL + 500 + POST + POST + DOORBELL
    assert "LOAD" not in rep


def test_dynamic_store_is_an_rpc_plus_a_write() -> None:
    """ALLOC_STORE = the allocation RPC, then the RDMA Write of a static store; the RPC's
    latency is a FREE's with the ALLOC_STORE cost (600 ns) instead of FREE's (500 ns)."""
    data = b"d" * 2048
    sim_s, _, cs = system(OneSidedStaticServer, OneSidedStaticClient)
    do(sim_s, cs["a"].alloc_store(0x1001, data))  # the first access of a QP is slower
    static = do(sim_s, cs["a"].alloc_store(0x1000, data)).latency_ps
    sim_d, _, cd = system(OneSidedDynamicServer, OneSidedDynamicClient)
    do(sim_d, cd["a"].alloc_store(0x1001, data))
    dynamic = do(sim_d, cd["a"].alloc_store(0x1000, data)).latency_ps
    free = do(sim_d, cd["a"].free(0x1000)).latency_ps
    assert dynamic - static == pytest.approx(free + 100 * NS, abs=2 * NS)


def test_two_sided_copies_on_the_target_cpu() -> None:
    sim, server, c = system(TwoSidedServer, TwoSidedClient)
    store = do(sim, c["a"].alloc_store(0x1000, b"c" * 4000))  # 4000 octets at 10 GB/s
    assert store.ok
    rep = server.cpu.report()
    assert rep["ALLOC_STORE"]["per_op_ns"] == pytest.approx(
        POLL + 600 + 400 + POST + POST + DOORBELL)
    over = do(sim, c["a"].store(0x1000, b"o" * 64))  # fits its region: an overwrite
    assert over.ok and server.cpu.report()["STORE"]["per_op_ns"] == pytest.approx(
        POLL + 400 + 6.4 + POST + POST + DOORBELL)
    assert do(sim, c["b"].load(0x1000)).data == b"o" * 64
    assert server.cpu.report()["LOAD"]["per_op_ns"] == POLL + 300 + POST + POST + DOORBELL
    # the CPU is on the critical path: a FREE's latency minus a missing LOAD's is the
    # difference of their costs (500 - 300 ns)
    miss = do(sim, c["b"].load(0x7777)).latency_ps
    free = do(sim, c["a"].free(0x1000)).latency_ps
    assert free - miss == pytest.approx(200 * NS, abs=2 * NS)


def test_allocating_memory_accounting() -> None:
    sim, server, c = system(TwoSidedServer, TwoSidedClient)
    mem = server.memory()
    credits = server.config.request_credits
    assert mem.buffers == 2 * (credits + 1) * (24 + BS)  # receive buffers of a block each
    assert do(sim, c["a"].alloc_store(0x1000, b"m" * 1000)).ok  # 1000 -> 1024 (64-octet)
    assert do(sim, c["a"].alloc_store(0x1001, b"m" * 64)).ok
    assert server.memory().reserved == server.memory().allocated == 1024 + 64
    assert do(sim, c["a"].free(0x1000)).ok
    assert server.memory().reserved == 64


def test_kbtp_memory_is_blocks_taken_from_the_ring() -> None:
    cfg = config()
    cluster = Cluster.build(cfg, profile="cx5")

    def work() -> Gen:
        yield cluster.connect_all()
        a = cluster.initiators["a"]
        yield a.alloc_store(0x1000, b"q" * 10, seal=True)
        yield a.alloc_store(0x1001, b"q" * 4000, seal=True)

    cluster.run(work())
    mem = kbtp_memory(cluster.server)
    assert mem.reserved == mem.allocated == 2 * BS and mem.pool == 32 * BS


def test_range_allocator_rounds_fits_first_and_coalesces() -> None:
    a = RangeAllocator(1024, 64)
    x = a.alloc(1)
    y = a.alloc(100)
    z = a.alloc(64)
    assert (x, y, z) == (0, 64, 192) and a.allocated == 64 + 128 + 64
    assert a.alloc(1024) is None
    a.release(y)
    assert a.alloc(128) == 64  # first fit reuses the hole
    a.release(64)
    a.release(0)
    a.release(192)
    assert a.allocated == 0 and a.largest_free == 1024  # all coalesced
