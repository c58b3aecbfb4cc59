"""Sessions (draft, "Session Establishment"): HELLO/HELLO_ACK, GOODBYE, retention."""

from __future__ import annotations

import pytest

from kbtpsim.target import PS_PER_MS, InitiatorConfig, TargetConfig
from kbtpsim.wire import Feature, Hello, HelloAck, Status

from .harness import Client, completions, iid, ini, loaded_data, make

MS = PS_PER_MS


def test_hello_ack_describes_the_session() -> None:
    _, c = make(8, [ini("a", 3, 0x100, 32), ini("b", 5, 0x400)], max_inline=128,
                request_credits=16, ticket_timeout_ms=7)
    ack = c["a"].ack
    assert (ack.status, ack.allocation_quota, ack.handle_base, ack.handle_count) == (
        Status.OK, 3, 0x100, 32)
    assert (ack.block_size, ack.max_inline, ack.request_credits, ack.ticket_timeout_ms) == (
        32768, 128, 16, 7)
    assert ack.features == Feature(0)  # nothing offered to a: no direct modes, no records


def test_features_are_offered_per_initiator_and_addr_le_by_the_target() -> None:
    _, c = make(8, [ini("a", 2, 0x100, features=Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC),
                    ini("b", 2, 0x200)], addr_le=True)
    a, b = c["a"].ack, c["b"].ack
    assert a.features == Feature.DIRECT_LOAD | Feature.DIRECT_ALLOC | Feature.ADDR_LE
    assert b.features == Feature.ADDR_LE
    assert a.table.count == 0x210 - 0x100 and a.table_base_handle == 0x100
    assert a.pool.count == 8 and a.partition.count == 2 and a.head.count == 1
    assert a.ring.count == 2 and a.head.tagged_offset % 8 == 0


def test_features_not_requested_are_not_granted() -> None:
    _t, c = make(8, [ini("a", 2, 0x100, features=Feature.DIRECT_ALLOC)], connect=False)
    assert c["a"].hello(features=0).features == Feature(0)


def test_config_rejects_overlap_quota_and_untrusted_direct_load() -> None:
    with pytest.raises(ValueError, match="overlap"):
        TargetConfig(8, 64, (ini("a", 1, 0x100, 16), ini("b", 1, 0x10F)))
    with pytest.raises(ValueError, match="sum of quotas"):
        TargetConfig(8, 64, (ini("a", 5, 0x100), ini("b", 4, 0x200)))
    with pytest.raises(ValueError, match="DIRECT_LOAD"):
        TargetConfig(8, 64, (ini("a", 1, 0x100, features=Feature.DIRECT_LOAD),
                             ini("b", 1, 0x200, domain="x")))
    with pytest.raises(ValueError, match="ring_slots"):
        TargetConfig(8, 64, ring_slots=4)
    with pytest.raises(ValueError, match="D9"):
        TargetConfig(1, 64, ring_slots=1)  # a masked ring needs two slots
    assert TargetConfig(1, 64).shared_ring_slots == 2
    with pytest.raises(ValueError, match="initiator_id"):
        InitiatorConfig("a", b"short", 1, 0, 1)


def test_hello_rejections() -> None:
    target, c = make(8, [ini("a", 1, 0x100)])
    a = c["a"]
    target.connect(9, 0)
    intruder = Client(target, "a", 9)
    (e,) = target.handle_message(9, Hello(initiator_id=iid("a")), 0)
    assert e.message.status is Status.ALREADY_BOUND  # a's session is still active
    (e,) = target.handle_message(9, Hello(initiator_id=iid("nobody")), 0)
    assert e.message.status is Status.INVALID_HANDLE  # no range configured for this ID
    (e,) = target.handle_message(a.conn, Hello(initiator_id=iid("a")), 0)
    assert e.message.status is Status.MALFORMED  # second HELLO on a connection
    (e,) = target.handle(9, b"\x01\x01\x00", 0)
    assert isinstance(e.message, HelloAck) and e.message.status is Status.MALFORMED
    (e,) = intruder.load(0x100)
    assert e.message.status is Status.MALFORMED  # request before HELLO


def test_goodbye_release_frees_everything() -> None:
    target, c = make(4, [ini("a", 3, 0x100), ini("b", 1, 0x200)])
    a = c["a"]
    for h in range(3):
        a.alloc_store(0x100 + h, b"x")
    assert a.goodbye(release=True) == []
    assert all(not target.table.get(0x100 + h).valid for h in range(3))
    assert target.table.get(0x100).generation == 3  # bound (2), then freed (3)
    assert target.stats().quotas[0].usage == 0
    target.check_invariant()
    assert target.next_deadline() is None
    a.hello()  # a new session on the same connection
    assert a.load(0x100)[0].message.status is Status.NOT_VALID


@pytest.mark.parametrize("how", ["goodbye", "disconnect"])
def test_bindings_are_retained_and_restored(how: str) -> None:
    target, c = make(4, [ini("a", 2, 0x100), ini("b", 1, 0x200)], retention_ms=50)
    a = c["a"]
    a.alloc_store(0x100, b"keep me", flags=1 << 1)
    if how == "goodbye":
        assert a.goodbye() == []
        target.disconnect(a.conn, 0)
    else:
        target.disconnect(a.conn, 0)
    assert target.next_deadline() == 50 * MS
    assert target.advance(49 * MS) == []
    target.connect(7, 10 * MS)
    again = Client(target, "a", 7, now=49 * MS)
    ack = again.hello()
    assert (ack.handle_base, ack.handle_count) == (0x100, 16)
    assert loaded_data(again.load(0x100)) == b"keep me"
    assert target.next_deadline() is None  # no longer retained
    target.check_invariant()


def test_retention_expiry_frees_bindings() -> None:
    target, c = make(4, [ini("a", 2, 0x100), ini("b", 2, 0x200, domain="other")],
                     retention_ms=50)
    a, b = c["a"], c["b"]
    a.alloc_store(0x100, b"secret")
    a.alloc_store(0x101, b"secret2")
    block = target.table.get(0x100).block_offset
    target.disconnect(a.conn, 0)
    assert target.advance(target.next_deadline()) == []
    assert not target.table.get(0x100).valid and target.stats().quotas[0].usage == 0
    assert target.pool.read(block, 6) == bytes(6)  # cleared: b is of another trust domain
    target.check_invariant()
    target.connect(8, 0)
    again = Client(target, "a", 8)
    again.hello()
    assert again.load(0x100)[0].message.status is Status.NOT_VALID
    assert b.alloc_store(0x200, b"b")[0].message.status is Status.OK


def test_free_clears_only_across_trust_domains() -> None:
    target, c = make(4, [ini("a", 2, 0x100), ini("b", 2, 0x200)])
    a = c["a"]
    a.alloc_store(0x100, b"same domain")
    block = target.table.get(0x100).block_offset
    a.free(0x100)
    assert target.pool.read(block, 4) == b"same"
    target, c = make(4, [ini("a", 2, 0x100), ini("b", 2, 0x200, domain="x")])
    a = c["a"]
    a.alloc_store(0x100, b"other domain")
    block = target.table.get(0x100).block_offset
    (e,) = a.free(0x100)
    assert (e.message.status, e.message.generation, e.message.block_offset) == (
        Status.OK, 3, block)
    assert target.pool.read(block, 5) == bytes(5)


def test_loads_across_initiators_of_one_trust_domain() -> None:
    _, c = make(4, [ini("a", 2, 0x100), ini("b", 2, 0x200)])
    c["a"].alloc_store(0x100, b"shared", flags=2)
    assert loaded_data(c["b"].load(0x100, flags=0)) == b"shared"
    (m,) = completions(c["b"].load(0x100, flags=0))
    assert (m.generation, m.data_length) == (2, 6)


def test_store_seal_and_generation_flow() -> None:
    target, c = make(4, [ini("a", 2, 0x100)])
    a = c["a"]
    (m,) = completions(a.alloc_store(0x100, b"v1"))
    assert m.generation == 2
    (m,) = completions(a.store(0x100, b"version2", generation=2, flags=2))
    assert (m.status, m.data_length, m.generation) == (Status.OK, 8, 2)
    assert target.table.get(0x100).sealed
    (m,) = completions(a.free(0x100, generation=2))
    assert m.generation == 3
    (m,) = completions(a.alloc_store(0x100, b"again", generation=3))
    assert m.generation == 4
    stats = target.stats().as_dict()
    assert stats["ops"]["ALLOC_STORE"] == {"OK": 2}
    assert stats["quotas"][0]["usage"] == 1


def test_disconnect_with_pending_operations_returns_blocks() -> None:
    from kbtpsim.wire import AllocStore, DataDescriptor

    target, c = make(4, [ini("a", 2, 0x100), ini("b", 2, 0x200)])
    a, b = c["a"], c["b"]
    a.send(AllocStore(request_id=1, handle=0x100, data_descriptor=DataDescriptor(1, 0, 4)))
    assert target.held_blocks
    b.alloc_store(0x200, b"b", hold=True)
    target.check_invariant()
    target.disconnect(a.conn, 0)
    target.disconnect(b.conn, 0)
    assert not target.held_blocks
    target.check_invariant()
    stats = target.stats()
    assert [q.usage for q in stats.quotas] == [0, 0]
    assert stats.rings[0].available == 4
