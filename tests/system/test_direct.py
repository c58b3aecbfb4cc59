"""Direct modes through the NICs: one-sided RDMA on the target's real memory."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from kbtpsim.atomics import advance_counter
from kbtpsim.nic import PROFILES
from kbtpsim.system import Cluster, ConnectionLost, OpResult, RdmaError
from kbtpsim.target import PS_PER_MS, Binding, CounterMode, Target
from kbtpsim.target.bytestore import SparseBytes
from kbtpsim.wire import Feature, Hello, Status
from tests.system.helpers import BASE_A, config, connect_only, ini_id, run

DIRECT = Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC
H = BASE_A


def _cluster(block_size: int = 4096, **kw: Any) -> Cluster:
    return Cluster.build(config(features=DIRECT, block_size=block_size, **kw))


def test_hello_ack_carries_the_nics_real_stags() -> None:
    cluster = _cluster()
    connect_only(cluster)
    a = cluster.initiators["a"]
    ack, conn = a.ack, a.conn
    assert ack is not None and conn is not None
    pt = cluster.server.nic.pt
    for name in ("table", "pool", "partition", "ring", "head"):
        desc = getattr(ack, name)
        window = pt.get(desc.stag)
        assert window is not None and window.qpn == conn.qp.qpn, name  # bound to the QP
        assert window is conn.windows[name]
    assert ack.partition is not None and ack.ring is not None
    assert ack.partition.count == 16 and ack.ring.count == 16


def test_direct_load_reads_entry_block_entry() -> None:
    cluster = _cluster()

    def body(c: Cluster) -> Generator[Any, Any, tuple[OpResult, OpResult]]:
        a = c.initiators["a"]
        yield a.alloc_store(H, b"sealed data", seal=True)
        direct = yield a.direct_load(H)
        via_target = yield a.load(H)
        return direct, via_target

    direct, via_target = run(cluster, body)
    assert direct.ok and direct.direct and direct.attempts == 1
    assert direct.data == via_target.data == b"sealed data"
    assert direct.completion is not None and via_target.completion is not None
    assert direct.completion.generation == via_target.completion.generation
    # no target CPU was involved: only the ALLOC_STORE and the LOAD were processed
    cpu = cluster.server.cpu
    assert cpu.ops("LOAD") == 1 and cpu.ops("ALLOC_STORE") == 1


def test_direct_load_refuses_unsealed_and_unbound() -> None:
    cluster = _cluster()

    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        yield a.alloc_store(H, b"unsealed")
        out = [(yield a.direct_load(H, retries=2, fallback=False))]
        out.append((yield a.direct_load(H + 1, retries=2, fallback=False)))
        out.append((yield a.direct_load(H, retries=2)))  # falls back to LOAD
        return out

    unsealed, unbound, fallback = run(cluster, body)
    assert unsealed.status == Status.NOT_SEALED and unsealed.data is None
    assert unsealed.attempts == 2 and unsealed.direct
    assert unbound.status == Status.NOT_VALID
    assert fallback.status == Status.NOT_SEALED and not fallback.direct
    assert cluster.server.cpu.ops("LOAD") == 1


def test_direct_load_retries_around_a_concurrent_free() -> None:
    """The block read of a 1 MiB block takes ~150 us; meanwhile the owner frees the
    handle and stores new data: the second entry read sees a new Generation, so the
    reader retries and returns the new, stable data."""
    size = 1 << 20
    cluster = _cluster(block_size=size, blocks=8, quota=4)
    old, new = b"\x01" * size, b"\x02" * size

    def body(c: Cluster) -> Generator[Any, Any, tuple[OpResult, OpResult, OpResult]]:
        a = c.initiators["a"]
        yield a.alloc_store(H, old, seal=True, inline=False)
        reader = a.direct_load(H)
        yield c.sim.env.timeout(5_000_000)  # 5 us: the reader is inside the block read
        freed = yield a.free(H)
        stored = yield a.alloc_store(H, new, seal=True, inline=False)
        return (yield reader), freed, stored

    got, freed, stored = run(cluster, body)
    assert freed.ok and stored.ok
    assert got.attempts >= 2 and got.direct and got.ok
    assert got.completion is not None and stored.completion is not None
    assert got.completion.generation == stored.completion.generation
    assert got.data == new


def test_stags_of_another_connection_fail_as_hardware_does() -> None:
    cluster = Cluster.build(config(features=DIRECT, names=("a", "b")))

    def body(c: Cluster) -> Generator[Any, Any, None]:
        a, b = c.initiators["a"], c.initiators["b"]
        yield a.alloc_store(H, b"a's block", seal=True)
        assert a.ack is not None and a.ack.table is not None
        # b uses a's table STag: the window is bound to a's QP, so b's read is refused
        with pytest.raises(RdmaError) as info:
            yield b.read_remote(a.ack.table.stag, a.ack.table.tagged_offset, 16)
        assert info.value.status.name == "REM_ACCESS_ERR"
        with pytest.raises(ConnectionLost):
            yield b.load(H)
        res = yield a.direct_load(H)  # a is unaffected
        assert res.data == b"a's block"

    run(cluster, body)


def test_direct_alloc_then_bind() -> None:
    cluster = _cluster()

    def body(c: Cluster) -> Generator[Any, Any, tuple[OpResult, OpResult, OpResult]]:
        a = c.initiators["a"]
        first = yield a.direct_alloc(H, b"one-sided!")
        second = yield a.direct_alloc(H + 1, bytes(range(200)))
        loaded = yield a.load(H, allow_unsealed=True)
        return first, second, loaded

    first, second, loaded = run(cluster, body)
    assert first.ok and second.ok and first.direct
    assert (first.ticket, second.ticket) == (0, 1)
    assert first.completion is not None and second.completion is not None
    part = cluster.initiators["a"].ack.partition  # type: ignore[union-attr]
    assert part is not None
    # blocks come from the initiator's partition, in ring order
    assert first.completion.block_offset == part.tagged_offset
    assert second.completion.block_offset == part.tagged_offset + 4096
    assert loaded.data == b"one-sided!"
    target = cluster.server.target
    sess = target.initiators["a"]
    assert sess.bound == {H, H + 1} and sess.tickets == 0
    assert cluster.server.cpu.ops("BIND") == 2
    target.check_invariant()


def test_direct_alloc_interleaves_with_alloc_store_on_the_same_ring() -> None:
    cluster = _cluster()

    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        out = [(yield a.alloc_store(H, b"via target"))]
        out.append((yield a.direct_alloc(H + 1, b"direct")))
        out.append((yield a.alloc_store(H + 2, b"via target again")))
        out.append((yield a.free(H)))
        out.append((yield a.direct_alloc(H + 3, b"direct again")))
        return out

    results = run(cluster, body)
    assert all(r.ok for r in results)
    offsets = [r.completion.block_offset for r in results
               if r.op != "FREE" and r.completion is not None]
    assert len(set(offsets)) == 4
    assert results[-1].ticket == 3  # tickets 0 and 2 were the target's own
    cluster.server.target.check_invariant()


def test_ticket_timeout_abandons_and_revokes_the_partition() -> None:
    cluster = _cluster(ticket_timeout_ms=1)
    ms = 10**9

    def body(c: Cluster) -> Generator[Any, Any, dict[str, Any]]:
        a = c.initiators["a"]
        out: dict[str, Any] = {}
        taken = yield a.direct_alloc(H, b"never bound", bind=False)
        out["taken"] = taken
        yield c.sim.env.timeout(2 * ms)  # past the Ticket Timeout
        assert taken.completion is not None
        out["bind"] = yield a.bind(H, taken.ticket, 11, taken.completion.block_offset)
        out["alloc_store"] = yield a.alloc_store(H + 1, b"still works")  # target-executed
        ack = a.ack
        assert ack is not None and ack.partition is not None
        with pytest.raises(RdmaError) as info:  # a later one-sided write into the partition
            yield a.write_remote(ack.partition.stag, ack.partition.tagged_offset, b"late")
        out["write_status"] = info.value.status
        return out

    out = run(cluster, body)
    assert out["bind"].status == Status.TICKET_ABANDONED
    assert out["alloc_store"].ok
    assert out["write_status"].name == "REM_ACCESS_ERR"
    server = cluster.server
    conn = cluster.initiators["a"].conn
    assert conn is not None and not conn.windows  # partition, ring, head (and the rest) gone
    sess = server.target.initiators["a"]
    assert sess.direct is not None and sess.direct.abandoned == {0}
    assert server.cpu.ops("TIMER") >= 0 and server.cpu.busy_ns("TIMER") > 0
    # the abandoned block went back to the ring: nothing lost
    server.target.check_invariant()


def test_ticket_timeout_then_fetch_add_is_refused() -> None:
    cluster = _cluster(ticket_timeout_ms=1)

    def body(c: Cluster) -> Generator[Any, Any, None]:
        a = c.initiators["a"]
        yield a.direct_alloc(H, b"x", bind=False)
        yield c.sim.env.timeout(2 * 10**9)
        with pytest.raises(RdmaError) as info:
            yield a.direct_alloc(H + 1, b"y")
        assert info.value.what == "FetchAdd on Head"

    run(cluster, body)


def test_direct_alloc_with_unmasked_counters_on_infiniband() -> None:
    """cx3-40g-ib has no masked atomics: the InfiniBand variant (Ticket << 32, plain
    Fetch and Add, slot = 16 * (ticket mod N))."""
    cfg = config(features=DIRECT, counter_mode=CounterMode.UNMASKED,
                 binding=Binding.INFINIBAND, quota=4)
    cluster = Cluster.build(cfg, profile="cx3-40g-ib")

    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        out = []
        for i in range(6):  # wraps the 4-slot ring
            out.append((yield a.direct_alloc(H + i % 3, bytes([i]) * 8)))
            if i == 2:
                for j in range(3):
                    yield a.free(H + j)
        out.append((yield a.load(H, allow_unsealed=True)))
        return out

    results = run(cluster, body)
    assert all(r.ok for r in results)
    assert [r.ticket for r in results[:6]] == [0, 1, 2, 3, 4, 5]
    assert results[-1].data == bytes([3]) * 8
    cluster.server.target.check_invariant()


def test_rdmap_placement_still_delivers_data_before_the_completion() -> None:
    """iWARP-style placement: Write packets land in any order with jitter; the Send
    carrying the completion is delivered only after them (RFC 5040 rules 5, 10)."""
    prof = PROFILES["cx5"].replace(placement="rdmap", ooo_jitter_ns=3000)
    cluster = Cluster.build(config(block_size=65536), profile=prof)
    data = bytes(range(256)) * 256

    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        yield a.alloc_store(H, data, seal=True, inline=False)
        out = []
        for _ in range(5):
            out.append((yield a.load(H)))
        return out

    for res in run(cluster, body):
        assert res.data == data


def test_goodbye_revokes_the_sessions_direct_stags() -> None:
    cluster = _cluster()

    def body(c: Cluster) -> Generator[Any, Any, None]:
        a = c.initiators["a"]
        yield a.alloc_store(H, b"kept", seal=True)
        old = a.ack
        assert old is not None and old.table is not None
        yield a.goodbye()  # done when the Send is acknowledged ...
        yield c.sim.env.timeout(10_000_000)  # ... the target processes it a little later
        conn = a.conn
        assert conn is not None and not conn.windows
        assert c.server.nic.pt.get(old.table.stag) is None
        ack = yield a.hello()  # new session, new windows, bindings retained
        assert ack.table.stag != old.table.stag
        res = yield a.direct_load(H)
        assert res.data == b"kept"
        with pytest.raises(RdmaError):  # the old session's STag is dead
            yield a.read_remote(old.table.stag, old.table.tagged_offset, 16)

    run(cluster, body)


def test_addr_le_sessions_work_end_to_end() -> None:
    """ADDR_LE: handles and Block Offsets little-endian in requests, completions, table
    entries and ring slots; the initiator learns it from HELLO_ACK."""
    cluster = Cluster.build(config(features=DIRECT, addr_le=True))

    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        out = [(yield a.alloc_store(H, b"little", seal=True))]
        out.append((yield a.direct_load(H)))
        out.append((yield a.direct_alloc(H + 1, b"endian")))
        out.append((yield a.load(H + 1, allow_unsealed=True)))
        return out

    stored, direct, placed, loaded = run(cluster, body)
    a = cluster.initiators["a"]
    assert a.addr_le
    assert stored.ok and direct.ok and placed.ok and loaded.ok
    assert direct.data == b"little" and loaded.data == b"endian"
    assert direct.completion is not None and stored.completion is not None
    assert direct.completion.block_offset == stored.completion.block_offset


def test_target_ticket_taken_starts_the_ticket_timeout() -> None:
    """Target.ticket_taken: the bookkeeping of remote_fetch_add for a FetchAdd the NIC
    performed on the Head in memory (here: done by hand on the bytes)."""
    cfg = config(features=DIRECT, ticket_timeout_ms=1)
    target = Target(cfg, store=SparseBytes())
    target.connect(1, 0)
    target.handle_message(1, Hello(requested_features=DIRECT, initiator_id=ini_id("a")), 0)
    ring = target.layout.rings[1]
    store = target.store
    assert store is not None
    head = int.from_bytes(store.read(ring.head_addr, 8), "little")
    store.write(ring.head_addr, advance_counter(head, ring.n_slots).to_bytes(8, "little"))
    target.ticket_taken("a", 0, 5)
    sess = target.initiators["a"]
    assert sess.direct is not None and sess.direct.outstanding == {0: 5}
    assert sess.usage == 1 and target.next_deadline() == 5 + PS_PER_MS
    effects = target.advance(5 + PS_PER_MS)
    assert [type(e).__name__ for e in effects] == ["InvalidateStag"]
    assert sess.direct.abandoned == {0} and sess.usage == 0
    target.check_invariant()
    with pytest.raises(ValueError, match="no DIRECT_ALLOC"):
        Target(config()).ticket_taken("a", 0, 0)
