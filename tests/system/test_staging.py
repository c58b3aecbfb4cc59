"""Staging: a ring of registered pieces that skips pieces still allocated."""

from __future__ import annotations

import random

import pytest

from kbtpsim.nic import Simulation
from kbtpsim.system import Staging, StagingFull
from kbtpsim.system.staging import ALIGN


def _staging(size: int) -> Staging:
    sim = Simulation(seed=0)
    return Staging(sim.add_nic("host", "cx5"), size)


def test_wraps_around_pieces_that_stay_allocated() -> None:
    """An initiator's completion receive buffers stay at the start of its region: the
    ring's first wrap-around used to fail with StagingFull however little was
    outstanding."""
    st = _staging(64 * ALIGN)
    pinned = [st.alloc(ALIGN) for _ in range(8)]  # the receive buffers
    assert pinned[0] == st.addr
    for _ in range(20):  # many wrap-arounds, at most two pieces outstanding
        a = st.alloc(10 * ALIGN)
        b = st.alloc(10 * ALIGN)
        assert st.addr + 8 * ALIGN <= min(a, b)
        assert abs(a - b) >= 10 * ALIGN
        st.free(a)
        st.free(b)
    assert st.outstanding == 8


def test_uses_the_first_gap_that_fits_then_reports_full() -> None:
    st = _staging(8 * ALIGN)
    p = [st.alloc(ALIGN) for _ in range(8)]
    with pytest.raises(StagingFull):
        st.alloc(1)
    st.free(p[2])
    st.free(p[5])
    st.free(p[6])
    assert st.alloc(2 * ALIGN) == p[5]  # the first gap of two pieces
    assert st.alloc(ALIGN) == p[2]
    with pytest.raises(StagingFull):
        st.alloc(ALIGN)
    with pytest.raises(StagingFull):
        st.alloc(9 * ALIGN)


def test_random_pieces_never_overlap() -> None:
    rng = random.Random(3)
    size = 256 * ALIGN
    st = _staging(size)
    live: dict[int, int] = {}
    for _ in range(3000):
        if live and (rng.random() < 0.5 or len(live) > 40):
            addr = rng.choice(sorted(live))
            st.free(addr)
            del live[addr]
            continue
        n = rng.randrange(1, 12 * ALIGN)
        try:
            addr = st.alloc(n)
        except StagingFull:
            assert sum(live.values()) + n > size // 4  # full only when much is in use
            continue
        assert st.addr <= addr and addr + n <= st.addr + size
        for other, m in live.items():
            assert addr + n <= other or other + m <= addr
        live[addr] = n
