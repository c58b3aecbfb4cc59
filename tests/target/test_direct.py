"""Direct modes (draft, "Direct Modes"): DIRECT_LOAD and DIRECT_ALLOC with BIND."""

from __future__ import annotations

import pytest

from kbtpsim.target import POOL_STAG, PS_PER_MS, InvalidateStag, RemoteAccessError
from kbtpsim.wire import CONSUMED, Feature, RingSlot, Status, TableEntry

from .harness import completions, ini, loaded_data, make

DA = Feature.DIRECT_ALLOC
DL = Feature.DIRECT_LOAD


def direct_alloc(target, client, data: bytes) -> tuple[int, int]:
    """The initiator's side: FetchAdd on Head, read the slot, write the block."""
    ack = client.ack
    old = target.remote_fetch_add(client.conn, ack.head.stag, ack.head.tagged_offset, client.now)
    ticket = old >> 32
    slot = RingSlot.decode(target.remote_read(client.conn, ack.ring.stag, 16 * ticket % (
        16 * ack.ring.count), 16))
    assert slot.sequence == ticket and not slot.consumed
    target.remote_write(client.conn, ack.partition.stag, slot.block_offset, data)
    return ticket, slot.block_offset


def setup(**kw):
    return make(8, [ini("d", 3, 0x100, features=DA | DL), ini("s", 2, 0x200)], **kw)


def test_partition_is_carved_from_the_pool_end() -> None:
    target, c = setup()
    ack = c["d"].ack
    assert len(target.shared_ring.blocks) == 5
    assert ack.partition.tagged_offset == 5 * 32768 and ack.partition.count == 3
    assert ack.ring.count == 4  # N = next power of two >= quota


def test_direct_alloc_then_bind_then_direct_load() -> None:
    target, c = setup()
    d = c["d"]
    ticket, block = direct_alloc(target, d, b"direct!")
    target.check_invariant()
    assert target.stats().quotas[0].usage == 1  # the ticket counts
    (m,) = completions(d.bind(0x100, ticket, 7, block))
    assert (m.status, m.block_offset, m.data_length, m.generation) == (Status.OK, block, 7, 2)
    assert target.initiators["d"].direct.ring.slot(16 * ticket).block_offset == CONSUMED
    target.check_invariant()
    assert loaded_data(d.load(0x100)) == b"direct!"
    assert target.next_deadline() is None
    # DIRECT_LOAD: read the entry, the block, the entry again.
    ack = d.ack
    entry = TableEntry.decode(target.remote_read(d.conn, ack.table.stag, 0, 16))
    assert entry.valid and entry.block_offset == block and not entry.sealed
    assert target.remote_read(d.conn, POOL_STAG, block, 7) == b"direct!"
    with pytest.raises(RemoteAccessError):
        target.remote_read(c["s"].conn, POOL_STAG, block, 7)  # s has no DIRECT_LOAD
    with pytest.raises(RemoteAccessError):
        target.remote_write(d.conn, ack.partition.stag, 0, b"x")  # outside the partition


def test_bind_checks_quota() -> None:
    target, c = setup()
    d = c["d"]
    t0, b0 = direct_alloc(target, d, b"0")
    for _ in range(3):  # overdraw: 4 tickets for a quota of 3
        target.remote_fetch_add(d.conn, d.ack.head.stag, 0, 0)
    before = target.state()
    (m,) = completions(d.bind(0x100, t0, 1, b0))
    assert m.status is Status.NO_SPACE
    assert target.state() == before


def test_ticket_timeout_invalidates_partition_and_reclaims() -> None:
    target, c = setup(ticket_timeout_ms=5)
    d = c["d"]
    t0, b0 = direct_alloc(target, d, b"late")
    d.now = 4 * PS_PER_MS
    t1, b1 = direct_alloc(target, d, b"ok")
    assert target.next_deadline() == 5 * PS_PER_MS
    out = target.advance(5 * PS_PER_MS)
    assert out == [InvalidateStag(d.conn, d.ack.partition.stag, "ticket timeout")]
    ring = target.initiators["d"].direct.ring
    # the block is back in the ring with a new ticket (Tail 3 -> slot 3), slot 0 consumed
    assert ring.slot(0).consumed and ring.slot(48) == RingSlot(3, b0)
    assert target.stats().quotas[0].usage == 1  # t1 is still outstanding
    target.check_invariant()
    (m,) = completions(d.bind(0x100, t0, 4, b0))
    assert m.status is Status.TICKET_ABANDONED
    # DIRECT_ALLOC is off for the rest of the session ...
    with pytest.raises(RemoteAccessError):
        target.remote_fetch_add(d.conn, d.ack.head.stag, 0, 0)
    with pytest.raises(RemoteAccessError):
        target.remote_write(d.conn, d.ack.partition.stag, b1, b"x")
    # ... but t1, not expired, can still be bound until its own timeout
    (m,) = completions(d.bind(0x101, t1, 2, b1))
    assert m.status is Status.OK
    assert loaded_data(d.load(0x101)) == b"ok"
    # target-executed allocations go on from the initiator's own ring
    (m,) = completions(d.alloc_store(0x102, b"sw"))
    assert m.status is Status.OK and m.block_offset in ring.blocks
    target.check_invariant()


def test_disconnect_abandons_outstanding_tickets() -> None:
    target, c = setup()
    d = c["d"]
    t0, b0 = direct_alloc(target, d, b"x")
    target.disconnect(d.conn, 0)
    assert target.stats().quotas[0].usage == 0
    target.check_invariant()
    target.connect(5, 0)
    from .harness import Client

    again = Client(target, "d", 5)
    again.hello()
    assert again.ack.partition.stag != d.ack.partition.stag
    (m,) = completions(again.bind(0x100, t0, 1, b0))
    assert m.status is Status.TICKET_ABANDONED
    t1, b1 = direct_alloc(target, again, b"new session")
    assert (m := completions(again.bind(0x100, t1, 11, b1))[0]).status is Status.OK
    target.check_invariant()


def test_direct_alloc_with_unmasked_counters() -> None:
    target, c = setup(counter_mode="unmasked")
    d = c["d"]
    tickets = []
    for h in range(3):
        t, b = direct_alloc(target, d, b"u%d" % h)
        tickets.append(t)
        assert completions(d.bind(0x100 + h, t, 2, b))[0].status is Status.OK
    assert tickets == [0, 1, 2]
    assert target.initiators["d"].direct.ring.head == 3 << 32
    target.check_invariant()


def test_direct_load_detects_a_free_between_its_reads() -> None:
    """DIRECT_LOAD: entry, block, entry again; valid only if both entries show the same
    Generation with VALID and SEALED (draft, "Direct Modes")."""
    target, c = setup()
    d, s = c["d"], c["s"]
    s.alloc_store(0x200, b"sealed data", flags=2)
    table = d.ack.table
    offset = 16 * (0x200 - d.ack.table_base_handle)

    def direct_load(between=None) -> bytes | None:
        first = TableEntry.decode(target.remote_read(d.conn, table.stag, offset, 16))
        data = target.remote_read(d.conn, POOL_STAG, first.block_offset, first.data_length)
        if between:
            between()
        again = TableEntry.decode(target.remote_read(d.conn, table.stag, offset, 16))
        ok = first.valid and first.sealed and again.generation == first.generation
        return data if ok and again.valid else None

    assert direct_load() == b"sealed data"
    assert direct_load(lambda: s.free(0x200)) is None
    with pytest.raises(RemoteAccessError):
        target.remote_read(d.conn, table.stag, 16 * table.count, 16)  # beyond the table
