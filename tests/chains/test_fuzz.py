"""Random request mixes (valid, failing and malformed: trailing or missing octets) on the
offloading profiles, compared with the software target (``Harness.mismatches``)."""

from __future__ import annotations

import random

import pytest

from kbtpsim.chains.harness import Harness
from kbtpsim.wire import AllocStore, DataDescriptor, Free, Load, Message, RequestFlag, Store
from kbtpsim.wire import encode as wire_encode

from .test_run import CX5S, CX5S_PROFILE

BS = 4096


def _mix(h: Harness, rnd: random.Random, n: int, p_inv: float = 0.0, p_seal: float = 0.0
         ) -> list[Message | bytes]:
    """``p_inv``: probability of INVALIDATE on a request with a Data Descriptor (inline
    ones too: there it does nothing, T10); a non-inline descriptor with it names a fresh
    memory window, so the initiator sees whether the completion revoked it. ``p_seal``:
    probability of SEAL on a store and of ALLOW_UNSEALED on a LOAD besides the flags
    drawn (decision C10: Read-source stores that seal, loads of unsealed blocks)."""
    msgs: list[Message | bytes] = []

    def dd(at: int, length: int, inv: int) -> DataDescriptor:
        return DataDescriptor(h.window(at, length) if inv else h.stag, h.buf(at), length)

    for rid in range(1, n + 1):
        hd = 0x4000 + rnd.randrange(8)
        kind = rnd.randrange(6)
        gen = rnd.choice([0] * 8 + [1, 2, 3])
        ln = rnd.choice([BS] * 6 + [100, BS - 8])
        data = bytes([rid]) * ln
        fl = rnd.choice([0] * 5 + [RequestFlag.SEAL, RequestFlag.ALLOW_UNSEALED])
        if p_inv and rnd.random() < p_inv:  # (p_inv 0: the same mixes as before)
            fl |= RequestFlag.INVALIDATE
        if p_seal and rnd.random() < p_seal:  # (p_seal 0: the same mixes as before)
            fl |= RequestFlag.SEAL | RequestFlag.ALLOW_UNSEALED
        inv = fl & RequestFlag.INVALIDATE
        inl = RequestFlag.INLINE
        m: Message
        if kind == 0:
            m = AllocStore(request_id=rid, handle=hd, flags=inl | (fl & 0xA),
                           generation=gen, data_descriptor=DataDescriptor(0, 0, ln),
                           inline_data=data)
        elif kind == 1:
            m = AllocStore(request_id=rid, handle=hd, flags=fl & 0xA, generation=gen,
                           data_descriptor=dd(1 << 20, ln, inv))
        elif kind == 2:
            m = Store(request_id=rid, handle=hd, flags=inl | (fl & 0xA), generation=gen,
                      data_descriptor=DataDescriptor(0, 0, ln), inline_data=data)
        elif kind == 3:
            m = Load(request_id=rid, handle=hd, flags=fl & 0x18, generation=gen,
                     data_descriptor=dd(BS * rnd.randrange(4), rnd.choice([BS, BS, BS + 8]),
                                        inv))
        elif kind == 4:
            m = Free(request_id=rid, handle=hd, generation=gen)
        else:
            m = Store(request_id=rid, handle=hd, flags=fl & 0xA, generation=gen,
                      data_descriptor=dd(1 << 20, ln, inv))
        if rnd.random() < 0.1:  # malformed: octets added or missing
            raw = wire_encode(m, h.addr_le)
            cut = rnd.randrange(1, 9)
            msgs.append(raw + bytes(cut) if rnd.random() < 0.5 else raw[:-cut])
        else:
            msgs.append(m)
    return msgs


@pytest.mark.parametrize("p_inv", [0.0, 0.5], ids=["inv-clear", "inv-mixed"])
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("profile", "addr_le"), [
    ("ideal-be", False), ("ideal", True),
    pytest.param(*CX5S, marks=pytest.mark.slow)])  # seed 0 in the default suite: below
def test_random_mix_agrees_with_the_software_target(profile: str, addr_le: bool,
                                                    seed: int, p_inv: float) -> None:
    """``inv-mixed``: INVALIDATE set on about half the requests, so a credit whose
    completion WQE was patched to Send with Invalidate is re-posted for one without.
    ``cx5``: conditions as CAS-on-WQE (decision C5)."""
    rnd = random.Random(seed)
    h = Harness(CX5S_PROFILE if profile == CX5S[0] else profile, addr_le, quota=6, blocks=8,
                credits=3)
    h.write_ibuf(1 << 20, bytes(rnd.randrange(256) for _ in range(BS)))
    res = h.run(_mix(h, rnd, 40, p_inv))
    assert h.mismatches() == []
    assert len(res.completions) == 41


@pytest.mark.parametrize("p_inv", [0.0, 0.5], ids=["inv-clear", "inv-mixed"])
def test_random_mix_on_cas_lowered_chains(p_inv: float) -> None:
    """The first seed on ``cx5`` (all seeds: ``-m slow``)."""
    test_random_mix_agrees_with_the_software_target(*CX5S, 0, p_inv)


def _seal_mix(h: Harness, rnd: random.Random, n: int) -> list[Message | bytes]:
    """Mostly valid full-block requests on four handles, so most reach the chains: SEAL,
    ALLOW_UNSEALED and INVALIDATE each with probability 1/2 (decision C10), some short
    blocks, Generations and malformed octet counts."""
    msgs: list[Message | bytes] = []
    inl = RequestFlag.INLINE
    for rid in range(1, n + 1):
        hd = 0x4000 + rnd.randrange(4)
        kind = rnd.choice([0, 1, 1, 2, 3, 3, 3, 4, 5, 5])
        gen = rnd.choice([0] * 6 + [1, 2])
        ln = rnd.choice([BS] * 5 + [100])
        seal = RequestFlag.SEAL if rnd.random() < 0.5 else 0
        inv = RequestFlag.INVALIDATE if rnd.random() < 0.5 else 0
        au = RequestFlag.ALLOW_UNSEALED if rnd.random() < 0.5 else 0
        dd = DataDescriptor(h.window(1 << 20, ln) if inv else h.stag, h.buf(1 << 20), ln)
        m: Message
        if kind == 0:
            m = AllocStore(request_id=rid, handle=hd, flags=inl | seal, generation=gen,
                           data_descriptor=DataDescriptor(0, 0, ln), inline_data=bytes([rid]) * ln)
        elif kind == 1:
            m = AllocStore(request_id=rid, handle=hd, flags=seal | inv, generation=gen,
                           data_descriptor=dd)
        elif kind == 2:
            m = Store(request_id=rid, handle=hd, flags=inl | seal, generation=gen,
                      data_descriptor=DataDescriptor(0, 0, ln), inline_data=bytes([rid]) * ln)
        elif kind == 3:
            at = BS * rnd.randrange(4)
            m = Load(request_id=rid, handle=hd, flags=au | inv, generation=gen,
                     data_descriptor=DataDescriptor(h.window(at, BS) if inv else h.stag,
                                                    h.buf(at), BS))
        elif kind == 4:
            m = Free(request_id=rid, handle=hd, generation=gen)
        else:
            m = Store(request_id=rid, handle=hd, flags=seal | inv, generation=gen,
                      data_descriptor=dd)
        if rnd.random() < 0.05:  # malformed: octets added
            msgs.append(wire_encode(m, h.addr_le) + bytes(rnd.randrange(1, 9)))
        else:
            msgs.append(m)
    return msgs


@pytest.mark.parametrize(("profile", "addr_le"), [("ideal-be", False), ("ideal", True), CX5S])
def test_random_mix_with_seal_and_allow_unsealed(profile: str, addr_le: bool) -> None:
    """Decision C10: SEAL on about half the stores (Read-source ones served by the chains)
    and ALLOW_UNSEALED on about half the loads (unsealed full blocks served by the
    chains), INVALIDATE on about half the non-inline requests; seed 0 per profile."""
    rnd = random.Random(0)
    h = Harness(CX5S_PROFILE if profile == CX5S[0] else profile, addr_le, quota=6, blocks=8,
                credits=3)
    h.write_ibuf(1 << 20, bytes(rnd.randrange(256) for _ in range(BS)))
    res = h.run(_seal_mix(h, rnd, 40))
    assert h.mismatches() == []
    assert len(res.completions) == 41
    fast = {v for v in res.served.values() if v is not None}
    assert {"load", "store_read"} <= fast  # the mix reaches the new fast paths
