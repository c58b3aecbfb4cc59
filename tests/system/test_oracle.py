"""Oracle: the server's completions and final state equal those of a standalone
reference Target fed the same calls in the order the server made them; determinism."""

from __future__ import annotations

import random
from collections.abc import Generator
from typing import Any

import pytest

from kbtpsim.system import Cluster, replay
from kbtpsim.target import SendMessage
from kbtpsim.wire import Feature, Opcode, decode
from tests.system.helpers import BASE_A, BASE_B, config, ini_id, run


def _workload(c: Cluster, seed: int) -> Generator[Any, Any, None]:
    rng = random.Random(seed)

    def client(name: str, base: int) -> Generator[Any, Any, None]:
        ini = c.initiators[name]
        for _ in range(60):
            h = base + rng.randrange(12)
            size = rng.choice([8, 64, 700, 4096])
            data = rng.randbytes(size)
            op = rng.randrange(5)
            if op == 0:
                yield ini.alloc_store(h, data, inline=rng.random() < 0.5,
                                      seal=rng.random() < 0.5)
            elif op == 1:
                yield ini.store(h, data, inline=size <= 64 and rng.random() < 0.5,
                                seal=rng.random() < 0.3)
            elif op == 2:
                yield ini.load(h, allow_unsealed=rng.random() < 0.5)
            elif op == 3:
                yield ini.free(h)
            else:
                yield ini.load(base + 0x800)  # INVALID_HANDLE
            yield c.sim.env.timeout(rng.randrange(3_000_000))

    yield c.sim.env.all_of([c.sim.env.process(client("a", BASE_A)),
                            c.sim.env.process(client("b", BASE_B))])


@pytest.mark.parametrize("features", [Feature(0), Feature.DIRECT_LOAD], ids=["dict", "memory"])
def test_server_matches_a_reference_target(features: Feature) -> None:
    """With direct modes the server's target is memory-backed (its structures are bytes
    in the NIC host's memory); the reference is always the dict-backed Target."""
    cfg = config(names=("a", "b"), blocks=32, quota=10, request_credits=4,
                 features=features)
    cluster = Cluster.build(cfg)
    assert cluster.server.direct == bool(features)
    run(cluster, _workload, 7)
    server = cluster.server
    ref, effects = replay(cfg, server.log)
    # every message the reference sends is what the initiator received, in order
    for name, ini in cluster.initiators.items():
        conn = ini.conn
        assert conn is not None
        expected = [e.data for e in effects
                    if isinstance(e, SendMessage) and e.connection_id == conn.conn_id]
        # the HELLO_ACK differs only in the STags the server's NIC assigned
        assert decode(ini.received[0]).opcode is Opcode.HELLO_ACK
        assert ini.received[1:] == expected[1:], name
        if not features:
            assert ini.received[0] == expected[0]
        assert len(expected) > 40
    assert ref.state() == server.target.state()
    assert ref.stats() == server.target.stats()
    server.target.check_invariant()


def _latencies(seed: int) -> tuple[list[int], bytes]:
    cfg = config(names=("a", "b"), blocks=32, quota=10, request_credits=4)
    cluster = Cluster.build(cfg, seed=seed)
    run(cluster, _workload, 11)
    lat = [r.latency_ps for n in ("a", "b") for r in cluster.initiators[n].results]
    return lat, cluster.initiators["a"].initiator_id


def test_same_seed_same_latencies() -> None:
    first, id1 = _latencies(0)
    second, id2 = _latencies(0)
    assert first == second and id1 == id2
    assert len(first) == 120


def test_initiator_ids_come_from_the_seed() -> None:
    assert ini_id("a", 0) == ini_id("a", 0)
    assert ini_id("a", 0) != ini_id("a", 1) != ini_id("b", 1)
    assert len(ini_id("a")) == 16


def _direct_workload(c: Cluster, seed: int) -> Generator[Any, Any, None]:
    rng = random.Random(seed)

    def client(name: str, base: int) -> Generator[Any, Any, None]:
        ini = c.initiators[name]
        for _ in range(40):
            h = base + rng.randrange(8)
            data = rng.randbytes(rng.choice([16, 300]))
            op = rng.randrange(4)
            if op == 0:
                yield ini.direct_alloc(h, data)
            elif op == 1:
                yield ini.alloc_store(h, data, seal=True)
            elif op == 2:
                yield ini.direct_load(h, retries=2)
            else:
                yield ini.free(h)

    yield c.sim.env.all_of([c.sim.env.process(client("a", BASE_A)),
                            c.sim.env.process(client("b", BASE_B))])


def test_direct_modes_match_a_reference_target() -> None:
    """One-sided FetchAdds are replayed as ``remote_fetch_add`` at the time the server
    noticed them; the partition writes are not (the pool is compared through loads)."""
    cfg = config(names=("a", "b"), blocks=32, quota=8,
                 features=Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC)
    cluster = Cluster.build(cfg)
    run(cluster, _direct_workload, 3)
    server = cluster.server
    assert any(e[0] == "fetch_add" for e in server.log)
    ref, effects = replay(cfg, server.log)
    for ini in cluster.initiators.values():
        conn = ini.conn
        assert conn is not None
        expected = [e.data for e in effects
                    if isinstance(e, SendMessage) and e.connection_id == conn.conn_id]
        assert ini.received[1:] == expected[1:]
    mine, theirs = server.target.state(), ref.state()
    assert mine[:2] == theirs[:2] and mine[3:] == theirs[3:]  # all but the pool digest
    server.target.check_invariant()
    ops = {r.op for ini in cluster.initiators.values() for r in ini.results}
    assert {"DIRECT_ALLOC", "DIRECT_LOAD", "BIND", "ALLOC_STORE", "FREE"} <= ops


def test_replay_covers_disconnects_and_reconnection() -> None:
    cfg = config(names=("a",), request_credits=4, retention_ms=1)
    cluster = Cluster.build(cfg)

    def body(c: Cluster) -> Generator[Any, Any, None]:
        a = c.initiators["a"]
        yield a.alloc_store(BASE_A, b"kept", seal=True)
        yield a.alloc_store(BASE_A + 1, b"x" * 500, inline=False)
        a.close()
        yield c.sim.env.timeout(10_000_000)
        again = c.add_initiator("again", initiator_id=ini_id("a"))
        yield again.connect(c.server)
        yield again.load(BASE_A)
        yield again.free(BASE_A + 1)
        yield again.goodbye()
        again.close()
        yield c.sim.env.timeout(2 * 10**9)  # past the retention time: bindings released

    run(cluster, body)
    server = cluster.server
    kinds = [e[0] for e in server.log]
    assert "disconnect" in kinds and "advance" in kinds
    ref, effects = replay(cfg, server.log)
    for ini in cluster.initiators.values():
        conn = ini.conn
        assert conn is not None
        expected = [e.data for e in effects
                    if isinstance(e, SendMessage) and e.connection_id == conn.conn_id]
        assert ini.received == expected
    assert ref.state() == server.target.state()
    assert server.target.stats().quotas[0].usage == 0
