"""Chains on the NIC model against the software target, byte for byte.

Every test runs requests through :class:`~kbtpsim.chains.harness.Harness` (initiator NIC,
target NIC with pre-posted chains, a CPU serving fallbacks) and a dict-backed reference
``Target`` fed the same requests, then compares completions, initiator buffers, the table
and the pool (``Harness.mismatches``)."""

from __future__ import annotations

import pytest

from kbtpsim.chains.harness import Harness
from kbtpsim.nic import PROFILES, Opcode, field_layout
from kbtpsim.wire import AllocStore, DataDescriptor, Free, Load, RequestFlag, Store

BS = 4096
DATA = bytes(range(256)) * (BS // 256)
INL = RequestFlag.INLINE
SEAL = RequestFlag.SEAL
INV = RequestFlag.INVALIDATE
FAST = ("ideal", True)
BE = ("ideal-be", False)  #: no ADDR_LE, big-endian WQEs and atomics: ALLOC_STORE too
#: plain cx5 (RedN's stack: an interleaved UMR key for the table, a list key for the pool):
#: no native conditionals, its conditions are CAS-on-WQE (C5); serves what ideal-be serves.
#: (The names CX5S* are kept from when this needed the hypothetical strided keys.)
CX5S_PROFILE = PROFILES["cx5"]
CX5S = ("cx5", False)
BIG_ENDIAN = (BE, CX5S)
COMBOS = [(p, le) for p in PROFILES for le in (False, True)]


class Req:
    """Request builders numbering Request IDs from 1. ``inv``: every request with a Data
    Descriptor naming initiator memory (LOAD, Read-source STORE / ALLOC_STORE) has
    INVALIDATE; a descriptor of a request with INVALIDATE names a fresh memory window
    (as the system Initiator's), so the initiator sees whether the completion revoked it."""

    def __init__(self, h: Harness, inv: bool = False) -> None:
        self.h = h
        self.rid = 0
        self.inv = inv

    def dd(self, at: int, length: int, flags: int) -> tuple[int, DataDescriptor]:
        """(flags, descriptor) of a non-inline request: INVALIDATE added with ``inv``."""
        flags |= INV if self.inv else 0
        stag = self.h.window(at, length) if flags & INV else self.h.stag
        return flags, DataDescriptor(stag, self.h.buf(at), length)

    def _id(self) -> int:
        self.rid += 1
        return self.rid

    def alloc(self, handle: int, data: bytes = DATA, flags: int = INL | SEAL,
              gen: int = 0) -> AllocStore:
        return AllocStore(request_id=self._id(), handle=handle, flags=flags, generation=gen,
                          data_descriptor=DataDescriptor(0, 0, len(data)), inline_data=data)

    def load(self, handle: int, at: int = 0, length: int = BS, flags: int = 0,
             gen: int = 0) -> Load:
        flags, dd = self.dd(at, length, flags)
        return Load(request_id=self._id(), handle=handle, flags=flags, generation=gen,
                    data_descriptor=dd)

    def store(self, handle: int, data: bytes = DATA, flags: int = INL, gen: int = 0) -> Store:
        return Store(request_id=self._id(), handle=handle, flags=flags | INL, generation=gen,
                     data_descriptor=DataDescriptor(0, 0, len(data)), inline_data=data)

    def store_read(self, handle: int, at: int, length: int = BS, flags: int = 0) -> Store:
        flags, dd = self.dd(at, length, flags)
        return Store(request_id=self._id(), handle=handle, flags=flags, data_descriptor=dd)

    def alloc_read(self, handle: int, at: int, length: int = BS, flags: int = 0,
                   rid: int | None = None) -> AllocStore:
        flags, dd = self.dd(at, length, flags)
        return AllocStore(request_id=self._id() if rid is None else rid, handle=handle,
                          flags=flags, data_descriptor=dd)

    def free(self, handle: int) -> Free:
        return Free(request_id=self._id(), handle=handle)


def run(profile: str, addr_le: bool, build, inv: bool = False,  # type: ignore[no-untyped-def]
        **kw):
    h = Harness(CX5S_PROFILE if profile == CX5S[0] else profile, addr_le, **kw)
    h.write_ibuf(1 << 20, DATA[::-1])
    r = Req(h, inv)
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


@pytest.mark.parametrize("inv", [False, True], ids=["inv-clear", "inv-set"])
@pytest.mark.parametrize(("profile", "addr_le"), COMBOS)
def test_mixed_sequence_every_profile_and_byte_order(profile: str, addr_le: bool,
                                                     inv: bool) -> None:
    h, res, msgs = run(profile, addr_le, mixed, inv)
    got = served(res, msgs)
    if (profile, addr_le) == FAST:
        assert got == [None, "load", None, None, "store_inline", "store_read",
                       "store_inline", "load", None, None]
    elif (profile, addr_le) in BIG_ENDIAN:
        assert got == ["alloc_inline", "load", None, "alloc_inline", "store_inline",
                       "store_read", "store_inline", "load", None, None]
        assert h.plan.software == {}
    else:
        assert got == [None] * len(msgs)  # software: the plan says why
        assert h.plan.offloaded == ()


@pytest.mark.parametrize("inv", [False, True], ids=["inv-clear", "inv-set"])
@pytest.mark.parametrize(("profile", "addr_le"), COMBOS)
def test_load_failures(profile: str, addr_le: bool, inv: bool) -> None:
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
            r.load(0x4003, flags=RequestFlag.ALLOW_UNSEALED),  # NIC, OK (C10)
            r.load(0x4001, flags=RequestFlag.ALLOW_UNSEALED),  # NIC
            r.load(0x4001, length=BS - 1),  # TOO_LARGE
            r.load(0x4001, length=BS + 8),  # OK, on the CPU
            r.load(0x4001, flags=INV),  # NIC, Send with Invalidate (C9)
            r.load(0x4001, flags=0x8000),  # MALFORMED: undefined flag bit
            r.load(0x4004, 4 * BS),  # Data Length 100 (CPU)
            r.load(0x4001, 8 * BS),  # NIC again
        ]

    _h, res, msgs = run(profile, addr_le, build, inv)
    statuses = [int.from_bytes(res.completions[m.request_id][22:24], "big") for m in msgs]
    assert statuses == [0, 0, 0, 1, 3, 2, 0, 7, 0, 0, 8, 0, 0, 9, 0, 0]
    nic = [i for i, s in enumerate(served(res, msgs)) if s is not None]
    if (profile, addr_le) == FAST:
        assert nic == [8, 9, 12, 15]
    elif (profile, addr_le) in BIG_ENDIAN:
        assert nic == [0, 1, 8, 9, 12, 15]


@pytest.mark.parametrize("inv", [False, True], ids=["inv-clear", "inv-set"])
@pytest.mark.parametrize(("profile", "addr_le"), COMBOS)
def test_store_failures(profile: str, addr_le: bool, inv: bool) -> None:
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
            r.store_read(0x4002, 1 << 20, BS, SEAL),  # NIC: SEAL with a Read source (C10)
            r.store_read(0x4002, 1 << 20),  # SEALED now
            r.load(0x4002, 0),  # NIC
            r.alloc_read(0x4006, 1 << 20),  # NIC on ideal-be (alloc_read)
            r.alloc_read(0x4006, 1 << 20),  # ALREADY_BOUND (CPU)
        ]

    _h, res, msgs = run(profile, addr_le, build, inv)
    statuses = [int.from_bytes(res.completions[m.request_id][22:24], "big") for m in msgs]
    assert statuses == [0, 0, 6, 3, 1, 2, 8, 0, 0, 0, 6, 0, 0, 4]
    if (profile, addr_le) == FAST:
        assert [i for i, s in enumerate(served(res, msgs)) if s] == [8, 9, 11]
    elif (profile, addr_le) in BIG_ENDIAN:
        assert [i for i, s in enumerate(served(res, msgs)) if s] == [0, 1, 8, 9, 11, 12]


@pytest.mark.parametrize("inv", [False, True], ids=["inv-clear", "inv-set"])
@pytest.mark.parametrize(("profile", "addr_le"), COMBOS)
def test_alloc_store(profile: str, addr_le: bool, inv: bool) -> None:
    def build(r: Req) -> list:  # type: ignore[type-arg]
        read_src = r.alloc_read(0x4003, 1 << 20, BS, SEAL, rid=90)
        return [r.alloc(0x4000), r.alloc(0x4001, DATA[:7], INL), read_src,
                r.alloc(0x4000),  # ALREADY_BOUND
                r.alloc(0x4010),  # INVALID_HANDLE
                r.alloc(0x4004, DATA + b"!"),  # TOO_LARGE
                r.alloc(0x4005, gen=3),  # STALE_GENERATION (never bound: Generation 1)
                r.free(0x4001), r.alloc(0x4001), r.alloc(0x4008),  # NO_SPACE (quota 3)
                r.load(0x4003, 0)]

    h, res, msgs = run(profile, addr_le, build, inv, quota=3)
    statuses = [int.from_bytes(res.completions[m.request_id][22:24], "big") for m in msgs]
    assert statuses == [0, 0, 0, 4, 1, 8, 2, 0, 0, 5, 0]
    nic = [s for s, m in zip(served(res, msgs), msgs, strict=True)
           if isinstance(m, AllocStore)]
    if (profile, addr_le) in BIG_ENDIAN:
        # short data and the failures: CPU; SEAL with a Read source: NIC (C10); the last
        # one: NO_SPACE on the CPU (quota 3 used up: no credit armed)
        assert nic == ["alloc_inline", None, "alloc_read"] + [None] * 4 + ["alloc_inline",
                                                                             None]
    else:
        assert nic == [None] * 9
        assert set(h.plan.software) >= {"alloc_inline", "alloc_read"}


#: (SEAL on Read-source stores, ALLOW_UNSEALED on loads, INVALIDATE): on ideal and
#: ideal-be every case; on cx5 + strided keys (CAS-on-WQE, slower) each flag set once and
#: left clear once
_FLAGS = {"seal": (True, False, False), "au-inv": (False, True, True),
          "seal-au-inv": (True, True, True), "neither-inv": (False, False, True)}
_SEAL_CASES = [pytest.param(*p, *f, id=f"{p[0]}-{k}") for p in (FAST, BE)
               for k, f in _FLAGS.items()] + [
    pytest.param(*CX5S, *_FLAGS[k], id=f"{CX5S[0]}-{k}") for k in ("seal", "au-inv")]


@pytest.mark.parametrize(("profile", "addr_le", "seal", "au", "inv"), _SEAL_CASES)
def test_seal_with_a_read_source_and_unsealed_loads(profile: str, addr_le: bool, seal: bool,
                                                    au: bool, inv: bool) -> None:
    """Decision C10: ``seal`` adds SEAL to every Read-source STORE / ALLOC_STORE (the entry
    becomes VALID|SEALED), ``au`` ALLOW_UNSEALED to every LOAD (an unsealed, VALID entry
    is loaded), ``inv`` INVALIDATE to both (C9). Full blocks go to the chains whatever
    the flags; short blocks and failures (NOT_SEALED, SEALED, NOT_VALID, ALREADY_BOUND,
    stale Generation) to the CPU; everything compared with the software target
    (``Harness.mismatches``)."""
    fs, fa = (SEAL if seal else 0), (RequestFlag.ALLOW_UNSEALED if au else 0)

    def build(r: Req) -> list:  # type: ignore[type-arg]
        src = 1 << 20
        return [
            r.alloc(0x4001, DATA, INL),  # 0 unsealed (inline, no SEAL)
            r.load(0x4001, 0, flags=fa),  # 1 unsealed: ALLOW_UNSEALED -> NIC, else 7
            r.store_read(0x4001, src, flags=fs),  # 2 NIC; seals with SEAL
            r.load(0x4001, BS, flags=fa),  # 3 sealed or ALLOW_UNSEALED: NIC, else 7
            r.store_read(0x4001, src, flags=fs),  # 4 SEALED (6) after a SEAL, else NIC
            r.alloc_read(0x4002, src, flags=fs),  # 5 big-endian: NIC; sealed with SEAL
            r.load(0x4002, 2 * BS, flags=fa),  # 6 as 3
            r.store_read(0x4002, src, flags=fs),  # 7 as 4
            r.alloc(0x4003, DATA[:100], INL),  # 8 short, unsealed: CPU
            r.load(0x4003, 0, flags=fa),  # 9 Data Length 100: CPU (OK or 7)
            r.load(0x4005, 0, flags=fa),  # 10 NOT_VALID (CPU)
            r.load(0x4001, 0, flags=fa, gen=5),  # 11 STALE_GENERATION (CPU)
            r.store_read(0x4003, src, 100, fs),  # 12 short: CPU (seals with SEAL)
            r.load(0x4003, 0, flags=fa),  # 13 CPU: OK if sealed or ALLOW_UNSEALED, else 7
            r.alloc_read(0x4001, src, flags=fs),  # 14 ALREADY_BOUND (CPU)
            r.store_read(0x4006, src, flags=fs),  # 15 NOT_VALID (CPU)
            r.free(0x4002),  # 16 CPU
            r.load(0x4002, 0, flags=fa),  # 17 NOT_VALID (CPU)
            r.alloc_read(0x4002, src, flags=fs),  # 18 big-endian: NIC (next Generation)
            r.load(0x4002, 3 * BS, flags=fa),  # 19 as 3
        ]

    _h, res, msgs = run(profile, addr_le, build, inv)
    ok_load = seal or au  # 3, 6, 19: the entry is sealed, or the LOAD allows unsealed
    statuses = [int.from_bytes(res.completions[m.request_id][22:24], "big") for m in msgs]
    assert statuses == [0, 0 if au else 7, 0, 0 if ok_load else 7, 6 if seal else 0, 0,
                        0 if ok_load else 7, 6 if seal else 0, 0, 0 if au else 7, 3, 2, 0,
                        0 if ok_load else 7, 4, 3, 0, 3, 0, 0 if ok_load else 7]
    big = (profile, addr_le) in BIG_ENDIAN
    load, sr = ("load" if ok_load else None), (None if seal else "store_read")
    assert served(res, msgs) == [
        "alloc_inline" if big else None, "load" if au else None, "store_read", load, sr,
        "alloc_read" if big else None, load, sr] + [None] * 10 + [
        "alloc_read" if big else None, load]


def test_harness_detects_a_wrong_seal() -> None:
    """Sanity check of the comparison: if the conditional Write of VALID|SEALED writes
    VALID only, the entry differs from the reference's, and the LOAD that follows (no
    ALLOW_UNSEALED) goes to the CPU, which answers NOT_SEALED where the reference sends
    the block."""
    h = Harness("ideal", True)
    for cr in h.server.live.values():  # the credits posted so far: not yet fetched
        qp, idx = cr.index["c_seal_store_read"]
        at = field_layout(h.server._shapes["c_seal_store_read"])["inline"][0]
        h.tnic.host.memory.write(qp.wqe_addr(idx) + at, b"\x00\x01")
    h.write_ibuf(1 << 20, DATA[::-1])
    r = Req(h)
    msgs = [r.alloc(0x4001, DATA, INL), r.store_read(0x4001, 1 << 20, flags=SEAL),
            r.load(0x4001)]
    res = h.run(msgs)
    assert served(res, msgs) == [None, "store_read", None]
    got = h.mismatches()
    assert any(m.startswith("entry 0x4001: 0001") for m in got)
    assert any(m.startswith(f"request {msgs[2].request_id}: completion") for m in got)


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


def test_harness_detects_a_missing_invalidation() -> None:
    """Sanity check of the invalidation comparison: if the conditional opcode patch writes
    SEND instead of SEND_WITH_INVALIDATE, the initiator's CQE reports no invalidated STag
    and the window stays valid, and both show up."""
    h = Harness("ideal", True)
    for cr in h.server.live.values():  # the credits posted so far: not yet fetched
        qp, idx = cr.index["c_inv_load"]
        at = field_layout(h.server._shapes["c_inv_load"])["inline"][0]
        h.tnic.host.memory.write(qp.wqe_addr(idx) + at, bytes([Opcode.SEND]))
    r = Req(h, inv=True)
    load = r.load(0x4001)
    res = h.run([r.alloc(0x4001), load])
    assert res.served[load.request_id] == "load"
    got = h.mismatches()
    stag = load.data_descriptor.stag
    assert f"request {load.request_id}: invalidate None != {stag}" in got
    assert any(m.startswith(f"window {stag:#x}: still valid") for m in got)


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
