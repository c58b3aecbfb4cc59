"""Chains on the NIC model against the software target, byte for byte.

Every test runs requests through :class:`~kbtpsim.chains.harness.Harness` (initiator NIC,
target NIC with pre-posted chains, a CPU serving fallbacks) and a dict-backed reference
``Target`` fed the same requests, then compares completions, initiator buffers, the table
and the pool (``Harness.mismatches``)."""

from __future__ import annotations

import pytest

from kbtpsim.chains.harness import Harness
from kbtpsim.nic import PROFILES
from kbtpsim.wire import AllocStore, DataDescriptor, Free, Load, RequestFlag, Store

BS = 4096
DATA = bytes(range(256)) * (BS // 256)
INL = RequestFlag.INLINE
SEAL = RequestFlag.SEAL
COMBOS = [(p, le) for p in PROFILES for le in (False, True)]
FAST = ("ideal", True)
BE = ("ideal-be", False)  #: no ADDR_LE, big-endian WQEs and atomics: ALLOC_STORE too


class Req:
    """Request builders numbering Request IDs from 1."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.rid = 0

    def _id(self) -> int:
        self.rid += 1
        return self.rid

    def alloc(self, handle: int, data: bytes = DATA, flags: int = INL | SEAL,
              gen: int = 0) -> AllocStore:
        return AllocStore(request_id=self._id(), handle=handle, flags=flags, generation=gen,
                          data_descriptor=DataDescriptor(0, 0, len(data)), inline_data=data)

    def load(self, handle: int, at: int = 0, length: int = BS, flags: int = 0,
             gen: int = 0) -> Load:
        return Load(request_id=self._id(), handle=handle, flags=flags, generation=gen,
                    data_descriptor=DataDescriptor(self.h.stag, self.h.buf(at), length))

    def store(self, handle: int, data: bytes = DATA, flags: int = INL, gen: int = 0) -> Store:
        return Store(request_id=self._id(), handle=handle, flags=flags | INL, generation=gen,
                     data_descriptor=DataDescriptor(0, 0, len(data)), inline_data=data)

    def store_read(self, handle: int, at: int, length: int = BS, flags: int = 0) -> Store:
        return Store(request_id=self._id(), handle=handle, flags=flags,
                     data_descriptor=DataDescriptor(self.h.stag, self.h.buf(at), length))

    def free(self, handle: int) -> Free:
        return Free(request_id=self._id(), handle=handle)


def run(profile: str, addr_le: bool, build, **kw):  # type: ignore[no-untyped-def]
    h = Harness(profile, addr_le, **kw)
    h.write_ibuf(1 << 20, DATA[::-1])
    r = Req(h)
    msgs = build(r)
    res = h.run(msgs)
    assert h.mismatches() == []
    assert set(res.completions) == {m.request_id for m in msgs} | {0}
    return h, res, msgs


def served(res, msgs) -> list[str | None]:  # type: ignore[no-untyped-def]
    return [res.served[m.request_id] for m in msgs]


def mixed(r: Req) -> list:  # type: ignore[type-arg]
    return [
        r.alloc(0x4001), r.load(0x4001, 0), r.load(0x4002, 8192), r.alloc(0x4002, DATA[::-1],
                                                                           INL),
        r.store(0x4002), r.store_read(0x4002, 1 << 20), r.store(0x4002, DATA, INL | SEAL),
        r.load(0x4002, 16384), r.free(0x4002), r.load(0x4002, 16384),
    ]


@pytest.mark.parametrize(("profile", "addr_le"), COMBOS)
def test_mixed_sequence_every_profile_and_byte_order(profile: str, addr_le: bool) -> None:
    h, res, msgs = run(profile, addr_le, mixed)
    got = served(res, msgs)
    if (profile, addr_le) == FAST:
        assert got == [None, "load", None, None, "store_inline", "store_read",
                       "store_inline", "load", None, None]
    elif (profile, addr_le) == BE:
        assert got == ["alloc_inline", "load", None, "alloc_inline", "store_inline",
                       "store_read", "store_inline", "load", None, None]
        assert h.plan.software == {}
    else:
        assert got == [None] * len(msgs)  # software: the plan says why
        assert h.plan.offloaded == ()


@pytest.mark.parametrize(("profile", "addr_le"), COMBOS)
def test_load_failures(profile: str, addr_le: bool) -> None:
    def build(r: Req) -> list:  # type: ignore[type-arg]
        return [
            r.alloc(0x4001),  # sealed, full block
            r.alloc(0x4003, DATA, INL),  # unsealed
            r.alloc(0x4004, DATA[:100], INL | SEAL),  # short block
            r.load(0x9000),  # INVALID_HANDLE (outside the table)
            r.load(0x400F),  # NOT_VALID (never bound)
            r.load(0x4001, gen=7),  # STALE_GENERATION (CPU)
            r.load(0x4001, gen=2),  # right Generation, non-zero (CPU)
            r.load(0x4003),  # NOT_SEALED
            r.load(0x4003, flags=RequestFlag.ALLOW_UNSEALED),  # CPU, OK
            r.load(0x4001, flags=RequestFlag.ALLOW_UNSEALED),  # NIC
            r.load(0x4001, length=BS - 1),  # TOO_LARGE
            r.load(0x4001, length=BS + 8),  # OK, on the CPU
            r.load(0x4001, flags=RequestFlag.INVALIDATE),  # CPU, Send with Invalidate
            r.load(0x4001, flags=0x8000),  # MALFORMED: undefined flag bit
            r.load(0x4004, 4 * BS),  # Data Length 100 (CPU)
            r.load(0x4001, 8 * BS),  # NIC again
        ]

    _h, res, msgs = run(profile, addr_le, build)
    statuses = [int.from_bytes(res.completions[m.request_id][22:24], "big") for m in msgs]
    assert statuses == [0, 0, 0, 1, 3, 2, 0, 7, 0, 0, 8, 0, 0, 9, 0, 0]
    nic = [i for i, s in enumerate(served(res, msgs)) if s is not None]
    if (profile, addr_le) == FAST:
        assert nic == [9, 15]
    elif (profile, addr_le) == BE:
        assert nic == [0, 1, 9, 15]


@pytest.mark.parametrize(("profile", "addr_le"), COMBOS)
def test_store_failures(profile: str, addr_le: bool) -> None:
    def build(r: Req) -> list:  # type: ignore[type-arg]
        return [
            r.alloc(0x4001),  # sealed
            r.alloc(0x4002, DATA, INL),
            r.store(0x4001),  # SEALED
            r.store(0x4005),  # NOT_VALID
            r.store(0x4010),  # INVALID_HANDLE (outside the own range and the table)
            r.store(0x4002, gen=9),  # STALE_GENERATION
            r.store(0x4002, DATA + b"x"),  # TOO_LARGE (> Block Size)
            r.store(0x4002, DATA[:10]),  # OK on the CPU (short)
            r.store(0x4002, DATA[::-1]),  # NIC
            r.store_read(0x4002, 1 << 20, BS, SEAL),  # CPU: SEAL with a Read source
            r.store_read(0x4002, 1 << 20),  # SEALED now
            r.load(0x4002, 0),  # NIC
        ]

    _h, res, msgs = run(profile, addr_le, build)
    statuses = [int.from_bytes(res.completions[m.request_id][22:24], "big") for m in msgs]
    assert statuses == [0, 0, 6, 3, 1, 2, 8, 0, 0, 0, 6, 0]
    if (profile, addr_le) == FAST:
        assert [i for i, s in enumerate(served(res, msgs)) if s] == [8, 11]
    elif (profile, addr_le) == BE:
        assert [i for i, s in enumerate(served(res, msgs)) if s] == [0, 1, 8, 11]


@pytest.mark.parametrize(("profile", "addr_le"), COMBOS)
def test_alloc_store(profile: str, addr_le: bool) -> None:
    def build(r: Req) -> list:  # type: ignore[type-arg]
        read_src = AllocStore(request_id=90, handle=0x4003, flags=SEAL,
                              data_descriptor=DataDescriptor(r.h.stag, r.h.buf(1 << 20), BS))
        return [r.alloc(0x4000), r.alloc(0x4001, DATA[:7], INL), read_src,
                r.alloc(0x4000),  # ALREADY_BOUND
                r.alloc(0x4010),  # INVALID_HANDLE
                r.alloc(0x4004, DATA + b"!"),  # TOO_LARGE
                r.alloc(0x4005, gen=3),  # STALE_GENERATION (never bound: Generation 1)
                r.free(0x4001), r.alloc(0x4001), r.alloc(0x4008),  # NO_SPACE (quota 3)
                r.load(0x4003, 0)]

    h, res, msgs = run(profile, addr_le, build, quota=3)
    statuses = [int.from_bytes(res.completions[m.request_id][22:24], "big") for m in msgs]
    assert statuses == [0, 0, 0, 4, 1, 8, 2, 0, 0, 5, 0]
    nic = [s for s, m in zip(served(res, msgs), msgs, strict=True)
           if isinstance(m, AllocStore)]
    if (profile, addr_le) == BE:
        # short data, SEAL with a Read source, the failures: CPU; the last one: NO_SPACE
        # on the CPU (quota 3 used up: no credit armed)
        assert nic == ["alloc_inline"] + [None] * 6 + ["alloc_inline", None]
    else:
        assert nic == [None] * 9
        assert set(h.plan.software) >= {"alloc_inline", "alloc_read"}


def test_fast_path_costs_the_cpu_nothing_but_refills() -> None:
    def build(r: Req) -> list:  # type: ignore[type-arg]
        return [r.alloc(0x4001)] + [r.load(0x4001, 4096 * (i % 4)) for i in range(12)] + [
            r.store(0x4002, DATA, INL) for _ in range(0)]

    _h, res, msgs = run(*FAST, build, credits=3)
    fast = [m for m in msgs if res.served[m.request_id]]
    assert len(fast) == 12
    assert res.cpu_requests == 2  # HELLO and the ALLOC_STORE
    assert res.refills >= 13  # every credit re-posted, in batches
    assert res.refill_ps > 0


def test_credits_wrap_many_times() -> None:
    def build(r: Req) -> list:  # type: ignore[type-arg]
        out = [r.alloc(0x4001, DATA, INL)]
        for i in range(8):
            out += [r.store(0x4001, bytes([i]) * BS), r.load(0x4001, 0)]
        return out

    _h, res, msgs = run(*FAST, build, credits=2)
    assert sum(1 for m in msgs if res.served[m.request_id] == "store_inline") == 8
    # a LOAD of an unsealed block goes to the CPU (NOT_SEALED) on every round
    assert all(res.served[m.request_id] is None for m in msgs if isinstance(m, Load))


def test_harness_detects_a_wrong_chain() -> None:
    """Sanity check of the comparison: a corrupted chain constant shows up."""
    h = Harness("ideal", True)
    h.tnic.host.memory.write(h.server.consts["k_zero"], b"\x00\x07")  # Status 7 in the Send
    r = Req(h)
    h.run([r.alloc(0x4001), r.load(0x4001)])
    assert any("completion" in m for m in h.mismatches())


def test_one_mebibyte_blocks() -> None:
    big = 1 << 20
    h = Harness("ideal", True, block_size=big, blocks=2, quota=2)
    r = Req(h)
    data = bytes(range(251)) * (big // 251) + bytes(big % 251)
    msgs = [AllocStore(request_id=1, handle=0x4001, flags=INL | SEAL,
                       data_descriptor=DataDescriptor(0, 0, big), inline_data=data),
            Load(request_id=2, handle=0x4001,
                 data_descriptor=DataDescriptor(h.stag, h.buf(0), big))]
    r.rid = 2
    res = h.run(msgs)
    assert h.mismatches() == []
    assert res.served[2] == "load"


def test_big_endian_chains_run_on_a_profile_with_the_capabilities() -> None:
    """cx5 plus strided keys and native conditionals (= ideal-be): the big-endian form of
    the chains (no ADDR_LE; handle octets 1..7 into the Read's address) runs, ALLOC_STORE
    included."""
    prof = PROFILES["cx5"].replace(name="cx5+", strided_keys=True, native_conditional=True)
    h, res, msgs = run(prof, False, mixed)  # type: ignore[arg-type]
    assert served(res, msgs) == ["alloc_inline", "load", None, "alloc_inline",
                                 "store_inline", "store_read", "store_inline", "load", None,
                                 None]
    assert h.plan.offloaded == ("load", "store_inline", "store_read", "alloc_inline",
                                "alloc_read")


def test_refills_in_batches() -> None:
    def build(r: Req) -> list:  # type: ignore[type-arg]
        return [r.alloc(0x4001)] + [r.load(0x4001, 0) for _ in range(9)]

    h, res, msgs = run(*FAST, build, credits=4, refill_batch=2)
    assert h.server.doorbells <= 1 + (res.refills + 1) // 2
    assert res.refills % 2 == 0
    assert all(res.served[m.request_id] == "load" for m in msgs[1:])


def test_long_run_does_not_overrun_any_cq() -> None:
    def build(r: Req) -> list:  # type: ignore[type-arg]
        return [r.alloc(0x4001)] + [r.load(0x4001, 0) for _ in range(300)]

    h, _res, _msgs = run(*FAST, build, credits=2)
    for cq in (h.server.gate_cq, h.server.chain_cq, h.server.recv_cq):
        assert len(cq) < 8
