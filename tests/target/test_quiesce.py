"""free_quiesce (decision C13): a FREE unbinds at once and returns its block to the ring
only when the caller says nothing reads it any more (draft, "Block Free" 2-4)."""

from __future__ import annotations

import pytest

from kbtpsim.wire import Status
from tests.target.harness import BS, OK, completions, ini, make


def _setup(**kw):
    return make(blocks=4, initiators=[ini("a", 2, 0x4000), ini("b", 2, 0x5000)],
                free_quiesce=True, **kw)


def test_free_waits_for_quiesced_then_returns_and_completes() -> None:
    target, c = _setup()
    (done,) = completions(c["a"].alloc_store(0x4000, b"x" * 64))
    block = done.block_offset
    tail = target.shared_ring.tail_ticket
    assert completions(c["a"].free(0x4000)) == []  # unbound, not completed yet
    assert not target.table.get(0x4000).valid  # "Block Free" 2: the entry first
    assert target.shared_ring.tail_ticket == tail  # 3 waits: no Tail ticket taken
    assert target.quiescing == [block]
    assert target.initiators["a"].usage == 1  # usage until the FREE completes (T4)
    target.check_invariant()
    # the connection's next request queues behind the FREE ("Operations": in order)
    assert completions(c["a"].load(0x4000)) == []
    out = target.quiesced(block, 5)
    got = completions(out)
    assert [m.status for m in got] == [OK, Status.NOT_VALID]  # the FREE, then the LOAD
    assert got[0].generation == target.table.get(0x4000).generation
    assert target.shared_ring.tail_ticket == tail + 1
    assert target.quiescing == [] and target.initiators["a"].usage == 0
    target.check_invariant()


def test_other_connections_are_not_held_back() -> None:
    _, c = _setup()
    completions(c["a"].alloc_store(0x4000, b"x" * 64))
    completions(c["a"].free(0x4000))
    (done,) = completions(c["b"].alloc_store(0x5000, b"y" * 64))
    assert done.status is OK


def test_release_parks_every_block_and_a_lost_connection_drops_the_completion() -> None:
    target, c = _setup()
    blocks = [completions(c["a"].alloc_store(0x4000 + i, b"x"))[0].block_offset
              for i in range(2)]
    c["a"].goodbye(release=True)
    assert sorted(target.quiescing) == sorted(blocks)
    target.check_invariant()
    for b in blocks:
        assert completions(target.quiesced(b, 1)) == []
    assert target.shared_ring.available == 4  # every block is back
    target.check_invariant()
    # a FREE whose connection goes away before quiescence returns its block silently
    (done,) = completions(c["b"].alloc_store(0x5000, b"y"))
    completions(c["b"].free(0x5000))
    target.disconnect(c["b"].conn, 2)
    assert completions(target.quiesced(done.block_offset, 3)) == []
    target.check_invariant()


def test_quiesced_of_a_block_that_does_not_wait_is_refused() -> None:
    target, _ = _setup()
    with pytest.raises(ValueError, match="does not wait for quiescence"):
        target.quiesced(3 * BS, 0)


def test_the_returned_block_is_cleared_only_at_quiesced() -> None:
    """Clearing for another trust domain (draft, "Block Free") happens when the block
    goes back, never while a reader may still be reading it."""
    target, c = make(blocks=4, initiators=[ini("a", 2, 0x4000, domain="p"),
                                           ini("b", 2, 0x5000, domain="q")],
                     free_quiesce=True)
    (done,) = completions(c["a"].alloc_store(0x4000, b"s" * 64))
    completions(c["a"].free(0x4000))
    assert target.pool.read(done.block_offset, 64) == b"s" * 64
    target.quiesced(done.block_offset, 1)
    assert target.pool.read(done.block_offset, 64) == bytes(64)
