"""Random request mixes (valid, failing and malformed: trailing or missing octets) on the
offloading profiles, compared with the software target (``Harness.mismatches``)."""

from __future__ import annotations

import random

import pytest

from kbtpsim.chains.harness import Harness
from kbtpsim.wire import AllocStore, DataDescriptor, Free, Load, Message, RequestFlag, Store
from kbtpsim.wire import encode as wire_encode

BS = 4096


def _mix(h: Harness, rnd: random.Random, n: int) -> list[Message | bytes]:
    msgs: list[Message | bytes] = []
    for rid in range(1, n + 1):
        hd = 0x4000 + rnd.randrange(8)
        kind = rnd.randrange(6)
        gen = rnd.choice([0] * 8 + [1, 2, 3])
        ln = rnd.choice([BS] * 6 + [100, BS - 8])
        data = bytes([rid]) * ln
        fl = rnd.choice([0] * 5 + [RequestFlag.SEAL, RequestFlag.ALLOW_UNSEALED])
        inl = RequestFlag.INLINE
        m: Message
        if kind == 0:
            m = AllocStore(request_id=rid, handle=hd, flags=inl | (fl & 2), generation=gen,
                           data_descriptor=DataDescriptor(0, 0, ln), inline_data=data)
        elif kind == 1:
            m = AllocStore(request_id=rid, handle=hd, flags=fl & 2, generation=gen,
                           data_descriptor=DataDescriptor(h.stag, h.buf(1 << 20), ln))
        elif kind == 2:
            m = Store(request_id=rid, handle=hd, flags=inl | (fl & 2), generation=gen,
                      data_descriptor=DataDescriptor(0, 0, ln), inline_data=data)
        elif kind == 3:
            m = Load(request_id=rid, handle=hd, flags=fl & 0x10, generation=gen,
                     data_descriptor=DataDescriptor(h.stag, h.buf(BS * rnd.randrange(4)),
                                                    rnd.choice([BS, BS, BS + 8])))
        elif kind == 4:
            m = Free(request_id=rid, handle=hd, generation=gen)
        else:
            m = Store(request_id=rid, handle=hd, flags=fl & 2, generation=gen,
                      data_descriptor=DataDescriptor(h.stag, h.buf(1 << 20), ln))
        if rnd.random() < 0.1:  # malformed: octets added or missing
            raw = wire_encode(m, h.addr_le)
            cut = rnd.randrange(1, 9)
            msgs.append(raw + bytes(cut) if rnd.random() < 0.5 else raw[:-cut])
        else:
            msgs.append(m)
    return msgs


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("profile", "addr_le"), [("ideal-be", False), ("ideal", True)])
def test_random_mix_agrees_with_the_software_target(profile: str, addr_le: bool,
                                                    seed: int) -> None:
    rnd = random.Random(seed)
    h = Harness(profile, addr_le, quota=6, blocks=8, credits=3)
    h.write_ibuf(1 << 20, bytes(rnd.randrange(256) for _ in range(BS)))
    res = h.run(_mix(h, rnd, 40))
    assert h.mismatches() == []
    assert len(res.completions) == 41
