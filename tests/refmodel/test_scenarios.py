"""Hand-written lockstep scenarios for the rules the random machine reaches rarely: each
runs Target and the model through :class:`~tests.refmodel.pair.Pair`, which compares
every effect and the whole state after every call."""

from __future__ import annotations

from kbtpsim.target import TargetConfig
from kbtpsim.wire import AllocStore, Bind, DataDescriptor, Feature, Free, Goodbye, Hello, encode
from tests.refmodel.pair import Pair, iid, ini

MS = 10**9
CFG = TargetConfig(blocks=4, block_size=32, first_block=100, max_inline=32,
                   initiators=(ini("x", 1, 0x40), ini("y", 2, 0x50),
                               ini("d", 1, 0x60, features=2)),
                   ticket_timeout_ms=1, retention_ms=2)


def hello(p: Pair, c: int, who: str, f: int = 15) -> None:
    p.call("connect", c, 0)
    p.call("handle", c, encode(Hello(requested_features=Feature(f), completion_credits=4,
                                     initiator_id=iid(who))), 0)


def alloc(h: int, data: bytes = b"z", flags: int = 1) -> bytes:
    if flags & 1:
        return encode(AllocStore(flags=flags, request_id=h, handle=h, inline_data=data,
                                 data_descriptor=DataDescriptor(0, 0, len(data))))
    return encode(AllocStore(flags=flags, request_id=h, handle=h,
                             data_descriptor=DataDescriptor(9, 0, len(data))))


def _free(h: int) -> bytes:
    return encode(Free(request_id=h, handle=h))


def _bind(h: int, ticket: int, bo: int) -> bytes:
    return encode(Bind(request_id=h, handle=h, ticket=ticket, data_length=8, block_offset=bo))


def test_deferred_free_of_a_disconnected_initiator_finishes_silently() -> None:
    """draft, "Free-Block Ring" (deferred write) and T6 (no completion once it is gone)."""
    p = Pair(CFG)
    hello(p, 0, "x")
    hello(p, 1, "y")
    p.call("handle", 0, alloc(0x40), 0, hold_after_ticket=True)
    p.call("handle", 1, alloc(0x50), 0)
    p.call("handle", 1, alloc(0x51), 0)
    p.call("handle", 1, _free(0x50), 0)  # Tail ticket 3 -> slot 3 (F = 3, N = 4)
    p.call("handle", 1, _free(0x51), 0)  # Tail ticket 4 -> slot 0, not consumed: deferred
    assert p.model.rings[0].deferred_blocks()
    p.call("disconnect", 1, 0)
    assert p.call("read_slot", 0, 0)  # x's completion only
    assert not p.model.rings[0].deferred_blocks()
    p.call("advance", 3 * MS)


def test_alloc_waiting_for_its_data_returns_its_block_on_disconnect() -> None:
    p = Pair(CFG)
    hello(p, 0, "x")
    p.call("handle", 0, alloc(0x40, b"abc", flags=0), 0)
    assert p.model.held_blocks
    p.call("disconnect", 0, 0)
    assert not p.model.held_blocks
    p.call("advance", 3 * MS)


def test_held_allocation_is_reclaimed_on_disconnect() -> None:
    p = Pair(CFG)
    hello(p, 0, "x")
    p.call("handle", 0, alloc(0x40), 0, hold_after_ticket=True)
    p.call("disconnect", 0, 0)
    assert p.model.initiators["x"].usage == 0


def test_direct_tickets_timeout_and_abandoned_bind() -> None:
    """draft, "Allocation Quotas": the Partition STag is invalidated, the slot reclaimed
    and a later BIND of the ticket answered TICKET_ABANDONED; the quota is exceeded."""
    p = Pair(CFG)
    hello(p, 2, "d")
    d = p.model.initiators["d"].direct
    for _ in range(2):
        p.call("remote_fetch_add", 2, d.d["head_stag"], 0, 0)
    assert p.model.initiators["d"].overdrawn
    p.call("handle", 2, _bind(0x60, 0, d.ring.slot(0).block_offset), 0)  # NO_SPACE
    out = p.call("advance", MS)
    assert type(out[0]).__name__ == "InvalidateStag"
    p.call("handle", 2, _bind(0x61, 1, d.ring.slot(16).block_offset), 0)
    p.call("handle", 2, _free(0x60), 0)
    p.call("handle", 2, encode(Goodbye()), 0)


def test_retention_restores_then_expires() -> None:
    """draft, "Session Establishment": bindings kept for a retention time."""
    p = Pair(CFG)
    hello(p, 0, "x")
    p.call("handle", 0, alloc(0x40), 0)
    p.call("disconnect", 0, MS)
    hello(p, 1, "x")
    p.call("disconnect", 1, MS)
    p.call("advance", 5 * MS)
    assert not p.model.initiators["x"].bound
    hello(p, 2, "x")


def test_ticket_noticed_after_the_session_ended() -> None:
    p = Pair(CFG)
    hello(p, 2, "d")
    p.call("handle", 2, encode(Goodbye()), 0)
    p.target.initiators["d"].direct.ring.take_ticket()
    p.model.initiators["d"].direct.ring.take_ticket()
    p.call("ticket_taken", "d", 0, 0)
    p.call("advance", 2 * MS)
    assert p.model.initiators["d"].direct.abandoned == {0}


def test_partition_allocations_and_unknown_ticket() -> None:
    """T8: an initiator with a partition allocates from its own ring, ALLOC_STORE too."""
    p = Pair(CFG)
    hello(p, 2, "d")
    p.call("handle", 2, alloc(0x60), 0)
    p.call("handle", 2, alloc(0x61), 0)  # NO_SPACE: quota 1
    p.call("handle", 2, _free(0x60), 0)
    p.call("handle", 2, _bind(0x62, 5, 0), 0)  # MALFORMED: no such ticket
    p.call("handle", 2, encode(Goodbye(flags=1)), 0)


def test_requests_queued_behind_a_read_and_release() -> None:
    p = Pair(CFG)
    hello(p, 0, "x")
    hello(p, 1, "y")
    p.call("handle", 0, alloc(0x40), 0)
    p.call("handle", 1, alloc(0x50, flags=0), 0)  # waits for its data
    p.call("handle", 1, alloc(0x51), 0)  # queued behind it
    p.call("handle", 1, encode(Goodbye(flags=1)), 0)
    p.complete_read(1, b"q", 0)
    assert not p.model.initiators["y"].bound


def test_session_end_with_tickets_whose_slots_are_not_ready() -> None:
    p = Pair(CFG)
    hello(p, 2, "d")
    for _ in range(3):
        p.call("remote_fetch_add", 2, p.model.initiators["d"].direct.d["head_stag"], 0, 0)
    p.call("disconnect", 2, 0)
    p.call("advance", 2 * MS)
