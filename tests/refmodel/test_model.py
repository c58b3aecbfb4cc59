"""The reference model on its own, against the draft's own examples."""

from __future__ import annotations

from kbtpsim.refmodel import RefModel
from kbtpsim.refmodel import ring as R
from kbtpsim.target import TargetConfig
from kbtpsim.wire import (
    AllocStore,
    Completion,
    DataDescriptor,
    Feature,
    Free,
    Hello,
    Load,
    Status,
    decode,
    encode,
)
from tests.refmodel.pair import iid, ini

DRAFT_ALLOC = bytes.fromhex("01120001000000000000000700000000000040010000000000000000"
                            "0000000000000000000000084b56424c4f434b21")


def _model(blocks: int = 4, first: int = 0, bs: int = 32 * 1024, **kw: object) -> RefModel:
    cfg = TargetConfig(blocks=blocks, block_size=bs, first_block=first,
                       initiators=(ini("x", 1, 0x4000, 16),
                                   ini("y", blocks - 1, 0x5000, 16)),
                       max_inline=bs, **kw)  # type: ignore[arg-type]
    m = RefModel(cfg)
    for c, who in enumerate("xy"):
        m.connect(c, 0)
        m.handle(c, encode(Hello(requested_features=Feature(0), completion_credits=4,
                                 initiator_id=iid(who))), 0)
    return m


def _done(out: list) -> Completion:
    sends = [e for e in out if e[0] == "send"]
    return decode(sends[-1][3])  # type: ignore[return-value]


def test_the_drafts_counter_example() -> None:
    """draft, "Examples": N = 4, successive FetchAdds on Head from zero."""
    r = R.new_ring("r", 4, [0, 1, 2, 3], masked=True)
    got = [(R.fetch_add(r, "head"), r["head"]) for _ in range(5)]
    assert got == [((0, 0), 0x0000000100000010), ((1, 1), 0x0000000200000020),
                   ((2, 2), 0x0000000300000030), ((3, 3), 0x0000000400000000),
                   ((4, 0), 0x0000000500000010)]


def test_the_drafts_alloc_store_vector() -> None:
    """draft, "Examples": the ALLOC_STORE of "KVBLOCK!" to 0x4001, block 42 of 32 KiB."""
    m = _model(blocks=1, first=42)
    c = _done(m.handle(0, DRAFT_ALLOC, 0))
    assert (c.request_id, c.handle, c.status, c.data_length, c.block_offset) == \
        (7, 0x4001, Status.OK, 8, 0x150000)
    assert c.generation == 2  # D1/T12: the draft's 5 is illustrative
    assert m.block(0x150000)[:8] == b"KVBLOCK!"


def test_the_drafts_interleaving_example() -> None:
    """draft, "Examples": X's ticket 0 stalls before reading slot 0, Y takes 1..3 and
    frees block 101, whose free (ticket 4, slot 0) is deferred; then X gets 100 and the
    deferred free writes slot 0 = {4, 101}; ticket 4 gets 101."""
    bs = 32 * 1024
    m = _model(blocks=4, first=100, bs=bs)

    def alloc(c: int, h: int, hold: bool = False) -> list:
        msg = AllocStore(flags=1, request_id=h, handle=h,
                         data_descriptor=DataDescriptor(0, 0, 1), inline_data=b"z")
        return m.handle(c, encode(msg), 0, hold)

    assert alloc(0, 0x4000, hold=True) == []
    got = [_done(alloc(1, 0x5000 + i)).block_offset // bs for i in range(3)]
    assert got == [101, 102, 103]
    assert m.handle(1, encode(Free(request_id=9, handle=0x5000)), 0) == []  # deferred
    assert R.deferred_blocks(m.rings[0]) == [101 * bs]
    out = m.read_slot(0, 0)
    assert [_done([e]).request_id for e in out if e[0] == "send"] == [9, 0x4000]
    assert _done(out).block_offset == 100 * bs
    assert R.slot(m.rings[0], 0) == (4, 101 * bs)
    assert _done(alloc(1, 0x5003)).block_offset == 101 * bs
    m.check_invariant()


def test_failed_requests_have_no_other_effect() -> None:
    """draft, "Operations": a failed check completes with its status, nothing else."""
    m = _model()
    before = (dict(m.table), dict(m.pool), [dict(r) for r in m.rings])
    for msg, status in (
        (Load(request_id=1, handle=0x4000, data_descriptor=DataDescriptor(1, 0, 8)),
         Status.NOT_VALID),
        (Load(request_id=2, handle=0x9000, data_descriptor=DataDescriptor(1, 0, 8)),
         Status.INVALID_HANDLE),
        (Free(request_id=3, handle=0x5000), Status.INVALID_HANDLE),
        (Free(request_id=4, handle=0x4000, flags=0x40), Status.MALFORMED),
    ):
        assert _done(m.handle(0, encode(msg), 0)).status is status
    assert before == (dict(m.table), dict(m.pool), [dict(r) for r in m.rings])


def test_generation_skips_zero_like_target() -> None:
    """draft, "Block Unmapped Store" 4: incremented by one, skipping zero; all 2^16 values."""
    from kbtpsim.refmodel.model import next_generation
    from kbtpsim.target import next_generation as target_next

    assert next_generation(0xFFFF) == 1 and next_generation(1) == 2
    assert all(next_generation(g) == target_next(g) for g in range(1, 1 << 16))
