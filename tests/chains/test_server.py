"""OffloadedTargetServer: system Initiators against the chains, checked against the
software target (the oracle) fed the same requests."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from kbtpsim.chains.server import CHAIN, REFILL, OffloadedTargetServer
from kbtpsim.nic import Simulation
from kbtpsim.system import Initiator
from kbtpsim.target import InitiatorConfig, ReadInitiator, SendMessage, Target, TargetConfig

BS = 4096


def _config(seed: int = 0) -> TargetConfig:
    return TargetConfig(blocks=16, block_size=BS, request_credits=4, initiators=(
        InitiatorConfig("a", Initiator.random_id(seed, "a"), 8, 0x1000, 256),))


def _block(c: int) -> bytes:
    return bytes([c]) * BS


def _workload(ini: Initiator, inv: bool = False) -> Generator[simpy.Event, Any, list[Any]]:
    """``inv``: the non-inline requests with INVALIDATE (the Initiator's default)."""
    out = []
    out.append((yield ini.alloc_store(0x1000, _block(1), seal=True)))  # alloc_inline
    out.append((yield ini.alloc_store(0x1001, _block(2), inline=False,
                                      invalidate=inv)))  # alloc_read
    out.append((yield ini.load(0x1000, invalidate=inv)))  # load
    out.append((yield ini.store(0x1001, _block(3), inline=False,
                                invalidate=inv)))  # store_read
    out.append((yield ini.store(0x1001, _block(4), seal=True)))  # store_inline
    out.append((yield ini.load(0x1001, invalidate=inv)))
    out.append((yield ini.free(0x1000)))  # CPU
    out.append((yield ini.bind(0x1002, 7, BS, 0)))  # CPU (no such ticket)
    out.append((yield ini.alloc_store(0x1003, _block(5), seal=True)))
    return out


def _run(profile: str, seed: int = 0, refill_batch: int = 1, inv: bool = False
         ) -> tuple[OffloadedTargetServer, Initiator, list[Any]]:
    sim = Simulation(seed=seed)
    srv = OffloadedTargetServer(sim, _config(seed), profile=profile, refill_batch=refill_batch)
    ini = Initiator(sim, "a", seed=seed, profile=profile,
                    initiator_id=Initiator.random_id(seed, "a"))

    def work() -> Generator[simpy.Event, Any, list[Any]]:
        yield ini.connect(srv)
        return (yield from _workload(ini, inv))

    proc = sim.env.process(work())
    results = sim.env.run(until=proc)
    sim.env.run(until=sim.env.now + 50_000_000)  # the CPU notices the last credits
    return srv, ini, results


#: the data the target RDMA-reads, in order (alloc_read, store_read)
SOURCES = (_block(2), _block(3))


def _reference(srv: OffloadedTargetServer, ini: Initiator,
               sources: tuple[bytes, ...] = SOURCES) -> tuple[Target, list[bytes]]:
    """A dict-backed Target fed the requests the server received, in order (one
    connection); RDMA Reads answered with ``sources`` (default :data:`SOURCES`), in order.
    Returns it and what it sent."""
    ref = Target(srv.config)
    conn = ini.conn
    assert conn is not None
    ref.connect(conn.conn_id, 0)
    pending = list(sources)
    sent: list[bytes] = []
    queue: list[Any] = []
    for data in conn.received:
        queue = list(ref.handle(conn.conn_id, data, 0))
        while queue:
            e = queue.pop(0)
            if isinstance(e, ReadInitiator):
                queue[:0] = ref.complete_read(e.token, pending.pop(0), 0)
            elif isinstance(e, SendMessage):
                sent.append(e.data)
    return ref, sent


def _mismatches(srv: OffloadedTargetServer, ini: Initiator,
                sources: tuple[bytes, ...] = SOURCES) -> list[str]:
    """Memory of the offloaded target vs a dict-backed Target fed the same requests."""
    ref, _ = _reference(srv, ini, sources)
    lay, mem, out = srv.layout, srv.nic.host.memory, []
    assert lay is not None
    addr_le = srv.config.addr_le
    for h in range(lay.table_base_handle, lay.table_base_handle + 256):
        want = ref.table.get(h).encode(addr_le)
        if mem.read(lay.entry_addr(h), 16) != want:
            out.append(f"entry {h:#x}")
    for bo in ref.pool.offsets:
        if mem.read(lay.block_addr(bo), BS) != ref.pool.read(bo, BS):
            out.append(f"block {bo:#x}")
    order = lay.counter_byte_order
    for ring, where in zip(ref.rings, lay.rings, strict=True):
        for s in range(ring.n_slots):
            if mem.read(where.slot_addr(16 * s), 16) != ring.slot(16 * s).encode(addr_le):
                out.append(f"ring {ring.name} slot {s}")
        for name, want_word in (("head", ring.head), ("tail", ring.tail)):
            if mem.read_u64(getattr(where, f"{name}_addr"), order) != want_word:
                out.append(f"ring {ring.name} {name}")
    for name, sess in ref.initiators.items():
        mine = srv.target.initiators[name]
        for what in ("bound", "tickets", "freeing", "usage"):
            if getattr(mine, what) != getattr(sess, what):
                out.append(f"initiator {name}: {what}")
    return out


def _completions(srv: OffloadedTargetServer, ini: Initiator,
                 sources: tuple[bytes, ...] = SOURCES) -> list[bytes]:
    return _reference(srv, ini, sources)[1]


@pytest.mark.parametrize("inv", [False, True], ids=["inv-clear", "inv-set"])
def test_ideal_be_fast_path_on_the_nic_rest_on_the_cpu(inv: bool) -> None:
    srv, ini, results = _run("ideal-be", inv=inv)
    assert srv.offloaded(ini.conn) == ("load", "store_inline", "store_read",  # type: ignore
                                       "alloc_inline", "alloc_read")
    assert [r.completion.status for r in results][:7] == [0] * 7
    assert results[7].completion.status != 0  # BIND of a ticket never taken
    assert results[2].data == _block(1) and results[5].data == _block(4)
    # windows: revoked by the NIC's Send with Invalidate exactly with INVALIDATE (C9)
    assert [r.stag_revoked for r in results if r.stag is not None] == [inv] * 4
    rep = srv.op_report()
    for op, n in (("LOAD", 2), ("STORE", 2), ("ALLOC_STORE", 3)):
        assert rep[op]["nic"] == n and rep[op]["cpu"] == 0, (op, rep[op])
        assert rep[op]["cpu_ns"] == 0 and rep[op]["cpu_ns_per_op"] == 0
    for op in ("FREE", "BIND", "HELLO"):
        assert rep[op]["nic"] == 0 and rep[op]["cpu"] == 1 and rep[op]["cpu_ns"] > 0
    assert rep[REFILL]["cpu_ns"] > 0 and rep[CHAIN]["cpu"] == 7
    # the oracle: completions and memory equal the software target's
    assert ini.received == _completions(srv, ini)
    assert _mismatches(srv, ini) == []


def test_cx5_offloads_with_its_umr_keys_same_results() -> None:
    srv, ini, results = _run("cx5")
    assert set(srv.offloaded(ini.conn)) == {  # type: ignore[arg-type]
        "load", "store_inline", "store_read", "alloc_inline", "alloc_read"}
    assert sum(v["nic"] for v in srv.op_report().values()) > 0
    assert ini.received == _completions(srv, ini)
    assert _mismatches(srv, ini) == []
    _, _, be_results = _run("ideal-be")
    assert [r.completion for r in results] == [r.completion for r in be_results]


def test_cx5_upstream_everything_on_the_cpu_same_results() -> None:
    srv, ini, results = _run("cx5-upstream")
    rep = srv.op_report()
    assert srv.offloaded(ini.conn) == ()  # type: ignore[arg-type]
    assert all(v["nic"] == 0 for v in rep.values())
    assert rep["LOAD"]["cpu"] == 2 and rep["LOAD"]["cpu_ns"] > 0
    assert ini.received == _completions(srv, ini)
    assert _mismatches(srv, ini) == []
    _, _, be_results = _run("ideal-be")
    assert [r.completion for r in results] == [r.completion for r in be_results]


@pytest.mark.parametrize("batch", [1, 3])
def test_refill_batching(batch: int) -> None:
    srv, ini, _ = _run("ideal-be", refill_batch=batch)
    assert ini.received == _completions(srv, ini)
    assert _mismatches(srv, ini) == []
    cs = srv.chain_server(ini.conn)  # type: ignore[arg-type]
    assert cs.doorbells >= 2


def test_deterministic() -> None:
    a = _run("ideal-be", seed=3)
    b = _run("ideal-be", seed=3)
    assert [r.latency_ps for r in a[2]] == [r.latency_ps for r in b[2]]
    assert a[1].received == b[1].received
    assert a[0].op_report() == b[0].op_report()


@pytest.mark.parametrize("profile", ["ideal-be", "ideal"])
def test_initiator_defaults_invalidate_served_by_the_nic(profile: str) -> None:
    """The standard Initiator sets INVALIDATE on every non-inline request (its windows
    are valid for one request): LOAD, STORE and (ideal-be) ALLOC_STORE with a Read source
    are served by the chains, whose COMPLETION is a Send with Invalidate of the window's
    STag (decision C9): the initiator sees the window revoked, as from the software
    target."""
    sim = Simulation(seed=0)
    srv = OffloadedTargetServer(sim, _config(), profile=profile, refill_batch=1)
    ini = Initiator(sim, "a", seed=0, profile=profile, initiator_id=Initiator.random_id(0, "a"))

    def work() -> Generator[simpy.Event, Any, list[Any]]:
        yield ini.connect(srv)
        out = [(yield ini.alloc_store(0x1000, _block(1), seal=True))]  # inline: no window
        out.append((yield ini.alloc_store(0x1001, _block(2), inline=False)))
        out.append((yield ini.load(0x1000)))
        out.append((yield ini.store(0x1001, _block(3), inline=False)))
        out.append((yield ini.load(0x1002)))  # NOT_VALID, on the CPU: revoked too
        return out

    results = sim.env.run(until=sim.env.process(work()))
    sim.env.run(until=sim.env.now + 50_000_000)
    assert [r.completion.status for r in results] == [0, 0, 0, 0, 3]
    assert results[2].data == _block(1)
    for r in results[1:]:  # every window revoked by the target's Send with Invalidate
        assert r.stag is not None and r.stag_revoked, r
    nic = {op: srv.served.get(op, {}).get("nic", 0) for op in ("LOAD", "STORE", "ALLOC_STORE")}
    assert nic["LOAD"] == 1 and nic["STORE"] == 1
    assert nic["ALLOC_STORE"] == (2 if profile == "ideal-be" else 0)
    assert ini.received == _completions(srv, ini)
    assert _mismatches(srv, ini) == []


@pytest.mark.parametrize("profile", ["ideal-be", "ideal"])
def test_sealed_read_source_stores_and_unsealed_loads_served_by_the_nic(profile: str) -> None:
    """Decision C10, with the standard Initiator (INVALIDATE on every non-inline request,
    C9): a KV-cache prefill's sealed non-inline ALLOC_STORE and STORE, and a LOAD with
    ALLOW_UNSEALED of an unsealed block, are served by the chains (ALLOC_STORE on
    ideal-be only: little-endian atomics, C2); a LOAD without it of the unsealed block
    (NOT_SEALED) and a STORE to a sealed one (SEALED) by the CPU. Completions and memory
    equal the software target's."""
    sim = Simulation(seed=0)
    srv = OffloadedTargetServer(sim, _config(), profile=profile, refill_batch=1)
    ini = Initiator(sim, "a", seed=0, profile=profile, initiator_id=Initiator.random_id(0, "a"))

    def work() -> Generator[simpy.Event, Any, list[Any]]:
        yield ini.connect(srv)
        out = [(yield ini.alloc_store(0x1000, _block(1), inline=False, seal=True))]
        out.append((yield ini.alloc_store(0x1001, _block(2), inline=False)))  # unsealed
        out.append((yield ini.load(0x1001, allow_unsealed=True)))  # NIC
        out.append((yield ini.load(0x1001)))  # NOT_SEALED: CPU
        out.append((yield ini.store(0x1001, _block(3), inline=False, seal=True)))  # NIC
        out.append((yield ini.load(0x1001)))  # sealed now: NIC
        out.append((yield ini.load(0x1000, allow_unsealed=True)))  # sealed: NIC
        out.append((yield ini.store(0x1000, _block(4), inline=False, seal=True)))  # SEALED
        return out

    results = sim.env.run(until=sim.env.process(work()))
    sim.env.run(until=sim.env.now + 50_000_000)
    assert [r.completion.status for r in results] == [0, 0, 0, 7, 0, 0, 0, 6]
    assert [results[i].data for i in (2, 5, 6)] == [_block(2), _block(3), _block(1)]
    nic = {op: srv.served.get(op, {}).get("nic", 0) for op in ("LOAD", "STORE", "ALLOC_STORE")}
    assert nic == {"LOAD": 3, "STORE": 1, "ALLOC_STORE": 2 if profile == "ideal-be" else 0}
    assert srv.served["LOAD"]["cpu"] == 1 and srv.served["STORE"]["cpu"] == 1
    sources = (_block(1), _block(2), _block(3))  # the RDMA Reads, in order
    assert ini.received == _completions(srv, ini, sources)
    assert _mismatches(srv, ini, sources) == []
    lay, mem = srv.layout, srv.nic.host.memory
    assert lay is not None
    for h in (0x1000, 0x1001):  # VALID|SEALED
        assert mem.read(lay.entry_addr(h), 2) == b"\x00\x03"
