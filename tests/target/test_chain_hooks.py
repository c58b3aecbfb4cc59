"""The additive hooks for a NIC that runs ALLOC_STORE in chains (kbtpsim.chains):
``note_chain_alloc`` (a chain did the whole allocation in memory), ``finish_allocation``
(a chain took a ticket, its slot was not ready), ``poll_waiting``. Each is compared with
the software target doing the same request itself."""

from __future__ import annotations

from kbtpsim.nic.memory import SparseMemory
from kbtpsim.target import Target, TargetConfig
from kbtpsim.wire import CONSUMED, AllocStore, DataDescriptor, RequestFlag, Status, encode

from .harness import BS, Client, completions, ini

DATA = b"kv" * 2048  #: inline: at most Max Inline (4096)


def _pair(**kw):  # type: ignore[no-untyped-def]
    """A memory-backed target (the chain's) and a dict-backed reference, X and Y."""
    config = TargetConfig(blocks=4, block_size=BS, first_block=100, ring_slots=4,
                          initiators=(ini("X", 1, 0x100), ini("Y", 3, 0x200)), **kw)
    mem = Target(config, store=SparseMemory())
    ref = Target(config)
    out = []
    for t in (mem, ref):
        cs = {}
        for n, name in ((1, "X"), (2, "Y")):
            t.connect(n, 0)
            cs[name] = Client(t, name, n)
            cs[name].hello()
        out.append(cs)
    return mem, ref, out[0], out[1]


def _req(handle: int) -> AllocStore:
    return AllocStore(flags=RequestFlag.INLINE | RequestFlag.SEAL, request_id=7,
                      handle=handle, data_descriptor=DataDescriptor(0, 0, len(DATA)),
                      inline_data=DATA)


def _chain_alloc(t: Target, handle: int) -> int:
    """What an ALLOC_STORE chain does in memory: FetchAdd on Head, read and consume the
    slot, data into the block, entry bound. Returns the ticket."""
    ring = t.shared_ring
    ticket = ring.take_ticket()
    block = ring.ready(ticket)
    assert block is not None
    index = ticket.slot_offset // 16
    ring._put(index, ticket.ticket, CONSUMED)  # the chain's 16-octet consume Write
    t.pool.write(block, DATA)
    t.table.bind(handle, block, len(DATA), sealed=True)
    return ticket.ticket


def test_note_chain_alloc_keeps_the_bookkeeping() -> None:
    mem, ref, _cm, cr = _pair()
    ticket = _chain_alloc(mem, 0x100)
    assert mem.initiators["X"].usage == 0  # the target has not been told yet
    assert mem.note_chain_alloc(1, encode(_req(0x100), False), ticket, 0) == []
    (c,) = completions(cr["X"].send(_req(0x100)))
    assert c.status is Status.OK
    assert mem.initiators["X"].bound == ref.initiators["X"].bound == {0x100}
    assert mem.initiators["X"].usage == 1 and mem.chain_allocations == 1
    assert mem.table.get(0x100) == ref.table.get(0x100)
    assert mem.counters.snapshot() == ref.counters.snapshot()
    mem.check_invariant()


def test_note_chain_alloc_performs_the_deferred_free() -> None:
    """The draft's example with X's allocation in a chain: the free deferred on slot 0 is
    performed (and completes) when the CPU learns the chain consumed the slot."""
    mem, ref, cm, cr = _pair()
    ring = mem.shared_ring
    ticket = ring.take_ticket()  # X's chain: FetchAdd on Head, then it stalls
    assert cr["X"].send(_req(0x100), hold=True) == []
    for cs in (cm, cr):
        for i in range(3):
            (c,) = completions(cs["Y"].alloc_store(0x200 + i, b"y"))
            assert c.block_offset == (101 + i) * BS
        assert cs["Y"].free(0x200) == []  # deferred: slot 0 not consumed
    # X's chain reads slot 0 (block 100) and consumes it, binds 0x100
    block = ring.ready(ticket)
    assert block == 100 * BS
    ring._put(0, 0, CONSUMED)
    mem.pool.write(block, DATA)
    mem.table.bind(0x100, block, len(DATA), sealed=True)
    out = mem.note_chain_alloc(1, encode(_req(0x100), False), ticket.ticket, 0)
    ref_out = ref.read_slot(1, 0)
    assert [c.status for c in completions(out)] == [Status.OK]  # Y's FREE
    assert [(c.request_id, c.status) for c in completions(ref_out)][-1] == \
        (completions(out)[0].request_id, Status.OK)
    assert ring.slot(0).sequence == 4 and ring.slot(0).block_offset == 101 * BS
    assert mem.initiators["Y"].usage == ref.initiators["Y"].usage == 2
    (a,) = completions(cm["Y"].alloc_store(0x203, b"t4"))
    (b,) = completions(cr["Y"].alloc_store(0x203, b"t4"))
    assert a == b and a.block_offset == 101 * BS  # ticket 4 gets block 101
    mem.check_invariant()


def test_finish_allocation_of_a_taken_ticket() -> None:
    """The chain took a ticket and found the slot not ready: the CPU finishes that
    ticket (no second FetchAdd), waiting for the slot, as the software target would."""
    mem, ref, _cm, cr = _pair()
    ring = mem.shared_ring
    ticket = ring.take_ticket()
    seq, block = ring._get(0)
    ring._put(0, 9, block)  # Sequence not written yet (a free in flight)
    assert mem.finish_allocation(1, encode(_req(0x100), False), ticket.ticket, 0) == []
    assert mem.waiting_allocations == 1 and mem.slot_not_ready == 1
    assert mem.poll_waiting(0) == []
    ring._put(0, seq, block)  # the Sequence lands
    (c,) = completions(mem.poll_waiting(0))
    (d,) = completions(cr["X"].send(_req(0x100)))
    assert c == d and c.block_offset == 100 * BS
    assert ring.head_ticket == 1  # one ticket: the chain's
    assert mem.initiators["X"].usage == 1 and mem.initiators["X"].tickets == 0
    assert mem.waiting_allocations == 0
    assert mem.table.get(0x100) == ref.table.get(0x100)
    mem.check_invariant()
