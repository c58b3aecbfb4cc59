"""The free-block ring on its own (draft, "Free-Block Ring")."""

from __future__ import annotations

import pytest

from kbtpsim.atomics import ring_add_mask, unpack_counter
from kbtpsim.target import CounterMode, FreeRing, Ticket, next_generation
from kbtpsim.target.table import NEVER_BOUND, BlockTable
from kbtpsim.wire import CONSUMED, RingSlot, TableEntry


def test_initialisation_per_draft() -> None:
    ring = FreeRing("r", 8, range(0, 5 * 64, 64))  # F = 5, N = 8
    assert [ring.slot(16 * s) for s in range(5)] == [RingSlot(s, 64 * s) for s in range(5)]
    assert ring.slot(16 * 5) == RingSlot((5 - 8) & 0xFFFF_FFFF, CONSUMED)
    assert ring.slot(16 * 7) == RingSlot((7 - 8) & 0xFFFF_FFFF, CONSUMED)
    assert unpack_counter(ring.head) == (0, 0)
    assert unpack_counter(ring.tail) == (5, 16 * 5)
    assert ring.add_mask == ring_add_mask(8)


def test_head_follows_the_draft_vector() -> None:
    """N = 4: (0,0)->0x100000010, ... (3,48)->0x400000000, (4,0)->0x500000010."""
    ring = FreeRing("r", 4, range(0, 4))
    seen = []
    for _ in range(5):
        got = ring.take_ticket()
        seen.append((got.ticket, got.slot_offset, ring.head))
    assert seen == [
        (0, 0, 0x0000000100000010), (1, 16, 0x0000000200000020),
        (2, 32, 0x0000000300000030), (3, 48, 0x0000000400000000),
        (4, 0, 0x0000000500000010),
    ]


def test_unmasked_counters() -> None:
    ring = FreeRing("r", 4, range(4), CounterMode.UNMASKED)
    assert ring.tail == 4 << 32
    offsets = [ring.take_ticket().slot_offset for _ in range(6)]
    assert offsets == [0, 16, 32, 48, 0, 16]
    assert ring.head == 6 << 32


def test_free_defers_and_never_overwrites() -> None:
    ring = FreeRing("r", 2, range(2))
    t0 = ring.take_ticket()  # not read yet
    t1 = ring.take_ticket()
    assert ring.ready(t1) == 1
    assert ring.consume(t1.slot_offset) == []
    write, deferred = ring.free(1)  # Tail 2 -> slot 0, unconsumed
    assert deferred and write.ticket == 2 and ring.slot(0) == RingSlot(0, 0)
    writes = ring.consume(t0.slot_offset)
    assert [(w.ticket, w.block_offset) for w in writes] == [(2, 1)]
    assert ring.ready(Ticket(2, 0)) == 1
    with pytest.raises(ValueError):
        ring.consume(16)  # already consumed


def test_wrong_ticket_is_not_ready() -> None:
    ring = FreeRing("r", 4, range(2))
    assert ring.ready(Ticket(4, 0)) is None  # slot 0 holds Sequence 0
    assert ring.ready(Ticket(2, 32)) is None  # slot 2 is empty (Sequence -2, all ones)


def test_generation_skips_zero_and_never_bound_is_one() -> None:
    assert TableEntry(generation=1) == NEVER_BOUND
    assert next_generation(1) == 2
    assert next_generation(0xFFFF) == 1
    table = BlockTable(0, 4)
    e = table.bind(1, 64, 3, sealed=True)
    assert (e.valid, e.sealed, e.generation) == (True, True, 2)
    e = table.unbind(1)
    assert (e.valid, e.sealed, e.generation, e.block_offset) == (False, False, 3, 64)
