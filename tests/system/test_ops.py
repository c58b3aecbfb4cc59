"""Each operation end to end: initiator NIC -> link -> target NIC -> CPU -> back."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from kbtpsim.system import Cluster, OpResult
from kbtpsim.target import Binding
from kbtpsim.wire import Feature, Status
from tests.system.helpers import BASE_A, config, run

H = BASE_A


@pytest.fixture
def cluster() -> Cluster:
    return Cluster.build(config())


def test_alloc_store_inline_then_load(cluster: Cluster) -> None:
    def body(c: Cluster) -> Generator[Any, Any, tuple[OpResult, OpResult]]:
        a = c.initiators["a"]
        stored = yield a.alloc_store(H, b"KVBLOCK!", seal=True)
        loaded = yield a.load(H)
        return stored, loaded

    stored, loaded = run(cluster, body)
    assert stored.ok and stored.completion is not None
    assert stored.completion.generation == 2 and stored.completion.data_length == 8
    assert stored.stag is None  # inline: no buffer exposed
    assert loaded.ok and loaded.data == b"KVBLOCK!"
    assert loaded.completion is not None and loaded.completion.block_offset == \
        stored.completion.block_offset
    # the data really is in the target's pool, where the completion says
    assert cluster.server.target.pool.read(stored.completion.block_offset, 8) == b"KVBLOCK!"


@pytest.mark.parametrize("size", [100, 4096])
def test_non_inline_stores_are_rdma_read(cluster: Cluster, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)

    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        r1 = yield a.alloc_store(H, data[::-1], inline=False)
        r2 = yield a.store(H, data, inline=False, seal=True)
        r3 = yield a.load(H)
        return [r1, r2, r3]

    r1, r2, r3 = run(cluster, body)
    assert r1.ok and r2.ok and r3.ok
    assert r3.data == data
    # both stores exposed their source through a window that the completion revoked
    assert r1.stag is not None and r1.stag_revoked
    assert r2.stag is not None and r2.stag_revoked
    assert r1.stag != r2.stag
    srv = cluster.server
    assert srv.cpu.ops("STORE") == 1 and srv.cpu.ops("ALLOC_STORE") == 1


def test_inline_store_and_store_to_sealed(cluster: Cluster) -> None:
    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        out = [(yield a.alloc_store(H, b"one"))]
        out.append((yield a.load(H)))  # unsealed: NOT_SEALED
        out.append((yield a.load(H, allow_unsealed=True)))
        out.append((yield a.store(H, b"two", seal=True)))
        out.append((yield a.store(H, b"three")))  # sealed now
        out.append((yield a.load(H)))
        return out

    alloc, unsealed, allowed, seal, sealed, load = run(cluster, body)
    assert alloc.ok and seal.ok
    assert unsealed.status == Status.NOT_SEALED and unsealed.data is None
    assert allowed.ok and allowed.data == b"one"
    assert sealed.status == Status.SEALED
    assert load.data == b"two"


def test_free_and_errors_arrive_as_completions(cluster: Cluster) -> None:
    def body(c: Cluster) -> Generator[Any, Any, dict[str, OpResult]]:
        a = c.initiators["a"]
        out = {"alloc": (yield a.alloc_store(H, b"x", seal=True))}
        assert out["alloc"].completion is not None
        gen = out["alloc"].completion.generation
        out["stale"] = yield a.load(H, generation=gen + 1)
        out["bound"] = yield a.alloc_store(H, b"y")
        out["free"] = yield a.free(H, generation=gen)
        out["not_valid"] = yield a.load(H)
        out["free_again"] = yield a.free(H)
        out["invalid"] = yield a.load(0xDEAD_0000)
        out["foreign"] = yield a.alloc_store(0x9000, b"z")
        out["too_large"] = yield a.alloc_store(H + 1, bytes(8192), inline=False)
        return out

    r = run(cluster, body)
    st = {k: v.status for k, v in r.items()}
    assert st == {
        "alloc": Status.OK, "stale": Status.STALE_GENERATION, "bound": Status.ALREADY_BOUND,
        "free": Status.OK, "not_valid": Status.NOT_VALID, "free_again": Status.NOT_VALID,
        "invalid": Status.INVALID_HANDLE, "foreign": Status.INVALID_HANDLE,
        "too_large": Status.TOO_LARGE,
    }
    assert r["free"].completion is not None and r["free"].completion.generation == 3
    assert r["stale"].completion is not None and r["stale"].completion.generation == 2
    # a failed request with INVALIDATE still revokes its buffer's STag
    assert r["not_valid"].stag_revoked and r["too_large"].stag_revoked


def test_invalidate_revokes_the_window_and_only_on_request(cluster: Cluster) -> None:
    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        yield a.alloc_store(H, b"abc", seal=True)
        with_inv = yield a.load(H)
        without = yield a.load(H, invalidate=False)
        return [with_inv, without]

    with_inv, without = run(cluster, body)
    assert with_inv.stag_revoked is True
    assert without.stag_revoked is False  # the target sent a plain Send
    assert with_inv.data == without.data == b"abc"
    nic = cluster.initiators["a"].nic
    # either way the window is gone after the request
    assert nic.pt.get(with_inv.stag) is None and nic.pt.get(without.stag) is None


def test_malformed_bytes_get_a_malformed_completion(cluster: Cluster) -> None:
    def body(c: Cluster) -> Generator[Any, Any, OpResult]:
        a = c.initiators["a"]
        raw = bytes([1, 0x10, 0, 1]) + (99).to_bytes(8, "big") + bytes(12)  # LOAD + INLINE
        res: OpResult = yield a.send_raw(raw)
        return res

    res = run(cluster, body)
    assert res.status == Status.MALFORMED and res.completion is not None
    assert res.completion.request_id == 99


def test_results_record_latency(cluster: Cluster) -> None:
    def body(c: Cluster) -> Generator[Any, Any, None]:
        a = c.initiators["a"]
        yield a.alloc_store(H, b"x" * 64, seal=True)
        yield a.load(H)

    run(cluster, body)
    res = cluster.initiators["a"].results
    assert [r.op for r in res] == ["ALLOC_STORE", "LOAD"]
    assert all(1_000_000 < r.latency_ps < 20_000_000 for r in res)  # 1..20 us


def test_completion_records_on_infiniband() -> None:
    """RECORD: the target writes a 24-octet record with RDMA Write with Immediate into a
    slot the initiator exposed; MALFORMED still comes as a COMPLETION message."""
    cfg = config(binding=Binding.INFINIBAND, features=Feature.RECORD_COMPLETION)
    cluster = Cluster.build(cfg)

    def body(c: Cluster) -> Generator[Any, Any, list[OpResult]]:
        a = c.initiators["a"]
        out = [(yield a.alloc_store(H, b"recorded", seal=True, record=True))]
        out.append((yield a.load(H, record=True)))
        out.append((yield a.load(H + 1, record=True)))  # NOT_VALID, as a record
        out.append((yield a.free(H, record=True)))
        return out

    stored, loaded, missing, freed = run(cluster, body)
    a = cluster.initiators["a"]
    assert a.ack is not None and a.ack.features & Feature.RECORD_COMPLETION
    assert stored.ok and loaded.ok and freed.ok
    assert loaded.data == b"recorded"
    assert missing.status == Status.NOT_VALID
    assert freed.completion is not None and freed.completion.generation == 3
    # only the HELLO_ACK came as a message: every completion was a record
    assert len(a.received) == 1
