"""The hooks for a NIC that serves FREE in chains (decision C20): ``note_chain_free``
(the chain did the whole free in memory), ``finish_free`` (the chain unbound the entry and
handed over), ``tail_via_nic`` (the target's own returns to the shared ring wait for a Tail
ticket taken through the NIC) and ``quiesced(block, now, ticket)``. Each is compared with
the software target freeing by itself (draft, "Block Free" 1-4; "Free-Block Ring", Free)."""

from __future__ import annotations

import pytest

from kbtpsim.nic.memory import SparseMemory
from kbtpsim.target import Target, TargetConfig
from kbtpsim.target.ring import FreeRing
from kbtpsim.wire import CONSUMED, Free, Status, encode

from .harness import BS, Client, completions, ini


def _pair(**kw):  # type: ignore[no-untyped-def]
    """A memory-backed target with ``tail_via_nic`` (the chains') and a dict-backed
    software reference, each with X (conn 1) and Y (conn 2) in session."""
    base = dict(blocks=4, block_size=BS, first_block=100, ring_slots=4, free_quiesce=True,
                initiators=(ini("X", 2, 0x100), ini("Y", 2, 0x200)))
    mem = Target(TargetConfig(tail_via_nic=True, **base, **kw), store=SparseMemory())
    ref = Target(TargetConfig(**base, **kw))
    out = []
    for t in (mem, ref):
        cs = {}
        for n, name in ((1, "X"), (2, "Y")):
            t.connect(n, 0)
            cs[name] = Client(t, name, n)
            cs[name].hello()
        out.append(cs)
    return mem, ref, out[0], out[1]


def _free(handle: int) -> bytes:
    return encode(Free(request_id=9, handle=handle), False)


def _chain_unbind(t: Target, handle: int) -> int:
    """What a FREE chain does first, in memory: the entry unbound, Generation + 1."""
    block = t.table.get(handle).block_offset
    t.table.unbind(handle)
    return block


def _chain_tail(t: Target) -> int:
    """The chain's masked FetchAdd on Tail: its ticket."""
    got, t.shared_ring.tail = t.shared_ring._advance(t.shared_ring.tail)
    return got.ticket


def test_ring_free_with_a_ticket_taken_elsewhere() -> None:
    ring = FreeRing("r", 4, range(0, 4 * BS, BS))
    for _ in range(4):
        t = ring.take_ticket()
        ring.consume(t.slot_offset)
    got, ring.tail = ring._advance(ring.tail)  # someone else's FetchAdd on Tail
    write, deferred = ring.free(2 * BS, got.ticket)
    assert not deferred and write.ticket == got.ticket == 4
    assert ring.slot(0).sequence == 4 and ring.slot(0).block_offset == 2 * BS
    assert ring.tail_ticket == 5  # no second FetchAdd
    with pytest.raises(ValueError, match="was not taken"):
        ring.free(3 * BS, 5)


def test_tail_via_nic_needs_free_quiesce() -> None:
    with pytest.raises(ValueError, match="tail_via_nic"):
        TargetConfig(blocks=4, block_size=BS, initiators=(ini("X", 2, 0x100),),
                     tail_via_nic=True)


def test_a_software_free_waits_for_a_tail_ticket_taken_through_the_nic() -> None:
    mem, ref, cm, cr = _pair()
    for cs in (cm, cr):
        completions(cs["X"].alloc_store(0x100, b"x"))
        assert completions(cs["X"].free(0x100)) == []  # parked (C13)
    (block,) = mem.quiescing
    assert ref.quiescing == [block]
    tail = mem.shared_ring.tail_ticket
    ticket = _chain_tail(mem)  # the CPU's FetchAdd through its NIC
    (a,) = completions(mem.quiesced(block, 5, ticket))
    (b,) = completions(ref.quiesced(block, 5))
    assert a == b and a.status is Status.OK
    assert mem.shared_ring.tail_ticket == ref.shared_ring.tail_ticket == tail + 1
    assert mem.shared_ring.slot(mem.shared_ring.slot_offset_of(ticket)) == \
        ref.shared_ring.slot(ref.shared_ring.slot_offset_of(ticket))
    assert mem.initiators["X"].usage == ref.initiators["X"].usage == 0
    mem.check_invariant()


def test_note_chain_free_keeps_the_bookkeeping() -> None:
    mem, ref, cm, cr = _pair()
    for cs in (cm, cr):
        completions(cs["X"].alloc_store(0x100, b"x"))
    # the chain: unbind, Tail ticket, slot consumed -> Block Offset then Sequence
    block = _chain_unbind(mem, 0x100)
    ticket = _chain_tail(mem)
    index = mem.shared_ring.slot_offset_of(ticket) // 16
    assert mem.shared_ring._get(index)[1] == CONSUMED
    mem.shared_ring._put(index, ticket, block)
    assert mem.initiators["X"].usage == 1  # not told yet
    assert mem.note_chain_free(1, _free(0x100), ticket, 0) == []
    completions(cr["X"].free(0x100))
    completions(ref.quiesced(block, 0))
    assert mem.table.get(0x100) == ref.table.get(0x100)
    assert mem.initiators["X"].usage == ref.initiators["X"].usage == 0
    assert mem.counters.snapshot() == ref.counters.snapshot()
    assert mem.chain_frees == 1
    mem.check_invariant()
    with pytest.raises(ValueError, match="was not taken"):
        mem.note_chain_free(1, _free(0x100), ticket + 1, 0)


def test_finish_free_with_readers_parks_the_block() -> None:
    """Unbound by the chain, a LOAD still counted itself a reader: the block waits for
    quiesced(), the FREE completes then, later requests of the connection queue."""
    mem, ref, cm, cr = _pair()
    for cs in (cm, cr):
        completions(cs["X"].alloc_store(0x100, b"x"))
    block = _chain_unbind(mem, 0x100)
    assert mem.finish_free(1, _free(0x100), None, 0) == []
    assert mem.quiescing == [block] and mem.chain_free_handovers == 1
    assert completions(cm["X"].load(0x100)) == []  # behind the FREE
    completions(cr["X"].free(0x100))
    (a, la) = completions(mem.quiesced(block, 1, _chain_tail(mem)))
    (b,) = completions(ref.quiesced(block, 1))
    assert a.status is b.status is Status.OK and a.generation == b.generation
    assert la.status is Status.NOT_VALID
    assert mem.table.get(0x100) == ref.table.get(0x100)
    mem.check_invariant()


def test_finish_free_with_a_consumed_slot_writes_it() -> None:
    """The chain handed over after its Tail ticket (a connection failure, say) and the
    slot is consumed by now: the CPU writes it and the FREE completes at once."""
    mem, _ref, cm, _cr = _pair()
    completions(cm["X"].alloc_store(0x100, b"x"))
    completions(cm["Y"].alloc_store(0x200, b"y"))
    completions(cm["Y"].alloc_store(0x201, b"y"))
    assert cm["X"].alloc_store(0x101, b"z", hold=True) == []  # ticket 3, slot 3 unread
    block = _chain_unbind(mem, 0x100)
    ticket = _chain_tail(mem)  # ticket 4: slot 0, consumed by the first allocation
    assert mem.shared_ring.slot_offset_of(ticket) == 0
    (a,) = completions(mem.finish_free(1, _free(0x100), ticket, 0))
    assert a.status is Status.OK and mem.shared_ring.slot(0).block_offset == block
    mem.check_invariant()


def test_finish_free_waits_for_the_allocation_that_owns_the_slot() -> None:
    mem, _ref, cm, _cr = _pair()
    ring = mem.shared_ring
    first = ring.take_ticket()  # an allocation ticketed slot 0, has not read it
    for i in range(3):
        completions(cm["Y" if i < 2 else "X"].alloc_store((0x200 + i) if i < 2 else 0x100,
                                                          b"y"))
    block = _chain_unbind(mem, 0x100)
    ticket = _chain_tail(mem)
    assert ring.slot_offset_of(ticket) == first.slot_offset
    assert mem.finish_free(1, _free(0x100), ticket, 0) == []  # deferred
    assert ring.deferred_blocks() == [block]
    got = ring.ready(first)
    assert got is not None
    out: list = []
    mem._consume(ring, first.slot_offset, out)
    mem._pump(0, out)
    (a,) = completions(out)
    assert a.status is Status.OK
    assert ring.slot(0).sequence == ticket and ring.slot(0).block_offset == block


def test_finish_free_refuses_a_bound_entry() -> None:
    mem, _ref, cm, _cr = _pair()
    completions(cm["X"].alloc_store(0x100, b"x"))
    with pytest.raises(ValueError, match="still VALID"):
        mem.finish_free(1, _free(0x100), None, 0)


def test_tail_via_nic_parks_a_reclaimed_block() -> None:
    """An allocation whose connection ends while its block waits for RDMA Read data:
    the block returns to the shared ring through quiesced() as well."""
    mem, _ref, cm, _cr = _pair()
    from kbtpsim.wire import AllocStore, DataDescriptor
    out = cm["X"].send(AllocStore(request_id=3, handle=0x100,
                                  data_descriptor=DataDescriptor(5, 0, 64)))
    assert out and not completions(out)  # an RDMA Read of the data
    mem.disconnect(1, 1)
    assert len(mem.quiescing) == 1
    (block,) = mem.quiescing
    assert completions(mem.quiesced(block, 2, _chain_tail(mem))) == []
    assert mem.initiators["X"].usage == 0
    mem.check_invariant()
