"""The draft's worked example (end of kbtp-draft.txt, "Examples"), step by step.

"A shared ring of four free blocks 100 to 103 (N = F = 4) serves target-executed
allocations. The target takes ticket 0 for an ALLOC_STORE of initiator X, and that work
request chain is delayed before reading slot 0. Meanwhile ALLOC_STORE requests of
initiator Y take tickets 1, 2, and 3 (blocks 101, 102, 103), and Y frees block 101; the
free obtains ticket 4, whose slot is slot 0, which has not been consumed yet, so the free
is deferred. X's allocation then reads slot 0, obtains block 100, and consumes the slot;
the deferred free now writes slot 0 with Sequence 4 and block 101, which the next
allocation (ticket 4) obtains. No block is lost or handed out twice."

Blocks are numbered from ``first_block=100``; block b has Block Offset b * Block Size.
"""

from __future__ import annotations

import pytest

from kbtpsim.target import CounterMode
from kbtpsim.wire import CONSUMED, RingSlot, Status

from .harness import BS, completions, ini, make


def blk(n: int) -> int:
    return n * BS


@pytest.mark.parametrize("mode", [CounterMode.MASKED, CounterMode.UNMASKED])
def test_draft_interleaving_example(mode: CounterMode) -> None:
    target, c = make(4, [ini("X", 1, 0x100), ini("Y", 3, 0x200)], first_block=100,
                     ring_slots=4, counter_mode=mode)
    x, y = c["X"], c["Y"]
    ring = target.shared_ring
    assert [ring.slot(16 * s) for s in range(4)] == [RingSlot(s, blk(100 + s)) for s in range(4)]
    assert (ring.head_ticket, ring.tail_ticket) == (0, 4)

    # X's ALLOC_STORE takes ticket 0 and stalls before reading slot 0.
    assert x.alloc_store(0x100, b"X", hold=True) == []
    assert ring.head_ticket == 1
    target.check_invariant()

    # Y's three ALLOC_STOREs take tickets 1..3: blocks 101, 102, 103.
    got = [completions(y.alloc_store(0x200 + i, b"Y%d" % i))[0] for i in range(3)]
    assert [m.block_offset for m in got] == [blk(101), blk(102), blk(103)]
    assert all(m.status is Status.OK for m in got)
    assert [ring.slot(16 * s).consumed for s in range(4)] == [False, True, True, True]
    target.check_invariant()

    # Y frees block 101: Tail ticket 4 -> slot 0, not consumed yet -> deferred.
    assert y.free(0x200) == []
    assert ring.tail_ticket == 5
    assert ring.slot(0) == RingSlot(0, blk(100))  # never overwritten
    assert ring.deferred_blocks() == [blk(101)]
    assert target.stats().quotas[1].usage == 3  # the FREE has not completed
    target.check_invariant()

    # X reads slot 0, gets block 100, consumes it; the deferred free writes {4, 101}
    # and Y's FREE completes.
    out = target.read_slot(x.conn, 0)
    done = completions(out)
    assert [(m.handle, m.block_offset) for m in done] == [(0x100, blk(100)), (0x200, blk(101))]
    assert all(m.status is Status.OK for m in done)
    assert out[0].connection_id == x.conn and out[1].connection_id == y.conn
    assert ring.slot(0) == RingSlot(4, blk(101))
    assert ring.deferred_blocks() == []
    target.check_invariant()

    # The next allocation (ticket 4) obtains block 101.
    (m,) = completions(y.alloc_store(0x203, b"next"))
    assert (m.status, m.block_offset) == (Status.OK, blk(101))
    assert ring.head_ticket == 5
    assert ring.slot(0).block_offset == CONSUMED
    target.check_invariant()


def test_requests_queue_behind_a_deferred_free() -> None:
    """A connection's requests are processed in order: Y's next ALLOC_STORE waits for its
    deferred FREE, then gets ticket 4 = block 101."""
    target, c = make(4, [ini("X", 1, 0x100), ini("Y", 3, 0x200)], first_block=100)
    x, y = c["X"], c["Y"]
    x.alloc_store(0x100, b"X", hold=True)
    for i in range(3):
        y.alloc_store(0x200 + i, b"y")
    assert y.free(0x201) == []  # block 102, deferred on slot 0
    assert y.alloc_store(0x203, b"queued") == []  # queued behind the FREE
    out = target.read_slot(x.conn, 0)
    assert [(m.handle, m.block_offset) for m in completions(out)] == [
        (0x100, blk(100)), (0x201, blk(102)), (0x203, blk(102))]
    target.check_invariant()


def test_allocation_waits_for_a_deferred_slot_write() -> None:
    """Another initiator's allocation of ticket 4 waits (re-reads) until the deferred free
    writes slot 0, and never takes a block twice."""
    target, c = make(4, [ini("X", 1, 0x100), ini("Y", 2, 0x200), ini("Z", 1, 0x300)],
                     first_block=100)
    x, y, z = c["X"], c["Y"], c["Z"]
    x.alloc_store(0x100, b"X", hold=True)  # ticket 0
    y.alloc_store(0x200, b"a")  # 101
    y.alloc_store(0x201, b"b")  # 102
    z.alloc_store(0x300, b"c")  # 103
    assert y.free(0x200) == []  # deferred on slot 0
    (m,) = completions(z.free(0x300))  # Tail 5 -> slot 1, consumed: written at once
    assert m.status is Status.OK
    assert z.alloc_store(0x301, b"d") == []  # ticket 4: slot 0 still holds Sequence 0
    target.check_invariant()
    out = target.read_slot(x.conn, 0)
    assert [(m.handle, m.block_offset) for m in completions(out)] == [
        (0x100, blk(100)), (0x200, blk(101)), (0x301, blk(101))]
    target.check_invariant()


def test_held_allocation_that_reads_too_early_waits() -> None:
    target, c = make(2, [ini("X", 1, 0x100), ini("Y", 1, 0x200)], first_block=7, ring_slots=2)
    x, y = c["X"], c["Y"]
    y.alloc_store(0x200, b"y", hold=True)  # ticket 0, held
    x.alloc_store(0x100, b"x")  # ticket 1: block 8
    assert x.free(0x100) == []  # Tail 2 -> slot 0 (unconsumed): deferred
    assert x.alloc_store(0x101, b"x2") == []  # queued behind the FREE
    out = target.read_slot(y.conn, 0)
    assert [(m.handle, m.block_offset) for m in completions(out)] == [
        (0x200, blk(7)), (0x100, blk(8)), (0x101, blk(8))]
    target.check_invariant()
