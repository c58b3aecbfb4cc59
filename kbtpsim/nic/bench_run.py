"""nicbench's tests and runs: perftest's tests (:data:`LAT_TESTS`, :data:`BW_TESTS`), the
(test, size, extra) steps of a run (:func:`plan`), each step measured on the rig of
:mod:`kbtpsim.nic.bench_rig` and summarised as a row in perftest's columns
(:func:`lat_row`, :func:`bw_row`), and :func:`run_nicbench`.

Latencies are medians over the iterations (perftest's "typical").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from kbtpsim.nic.bench_rig import (
    S,
    _Rig,
    _stream,
    _write_wr,
    rdma_lat_samples,
    send_lat_samples,
    write_lat_samples,
)
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.profiles import get_profile
from kbtpsim.nic.wqe import Opcode, Sge, WorkRequest

Row = dict[str, Any]
SIZES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
QUICK_SIZES = (64, 4096, 65536, 1048576)
LAT_EXTRA = (2, 8)  # the sizes of the published latency figures

#: perftest's tests as nicbench runs them: name -> what is measured.
LAT_TESTS = {
    "write_lat": "RDMA_Write latency (one-way: half a ping-pong round trip)",
    "send_lat": "Send latency (one-way: half a ping-pong round trip)",
    "read_lat": "RDMA_Read latency (post to completion)",
    "atomic_lat": "Atomic FETCH_ADD latency (post to completion)",
}
BW_TESTS = {
    "write_bw": "RDMA_Write bandwidth",
    "read_bw": "RDMA_Read bandwidth",
    "atomic_same": "Atomic FETCH_ADD rate, one address",
    "atomic_spread": "Atomic FETCH_ADD rate, 4096 addresses",
    "read_rate_batch": "8-octet RDMA_Read rate, batched doorbells, several QPs",
}
TESTS = (*LAT_TESTS, *BW_TESTS)
#: Tests whose message size is fixed (atomics: 8 octets).
FIXED_SIZE = {"atomic_lat": 8, "atomic_same": 8, "atomic_spread": 8, "read_rate_batch": 8}
#: ``-a``: every power of two from 2 octets to 8 MiB, as perftest's ``-a``.
ALL_SIZES = tuple(2 ** k for k in range(1, 24))
#: WRs per QP over which BW peak is measured (one full send queue).
PEAK_WINDOW = 128
MB = 1 << 20  #: perftest's MB/sec counts 2^20 octets


def _iters(size: int, quick: bool) -> int:
    budget = (4 << 20) if quick else (32 << 20)
    return max(8 if quick else 16, min(200 if quick else 1000, budget // size))


def _percentile(ordered: list[int], q: float) -> int:
    """Nearest rank: the smallest sample with at least ``q`` of the samples at or below."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def lat_row(test: str, size: int, samples: list[int]) -> Row:
    """A latency row in perftest's columns (microseconds)."""
    o = sorted(samples)
    us = 1e-6

    def r(v: float) -> float:
        return round(v * us, 5)

    return {"test": test, "bytes": size, "iterations": len(o), "t_min": r(o[0]),
            "t_max": r(o[-1]), "t_typical": r(statistics.median(o)),
            "t_avg": r(statistics.fmean(o)),
            "t_stdev": r(statistics.stdev(o)) if len(o) > 1 else 0.0,
            "p99": r(_percentile(o, 0.99)), "p99.9": r(_percentile(o, 0.999)),
            "unit": "usec"}


def bw_row(test: str, size: int, n: int, elapsed: int, times: list[tuple[int, int, int]],
           n_qps: int, **extra: Any) -> Row:
    """A bandwidth row in perftest's columns: BW peak (the highest rate over any
    :data:`PEAK_WINDOW` WRs per QP completed), BW average (all WRs over the whole test,
    from the first post), in Gb/s and MB/s, and the message rate (Mpps)."""
    per_qp = [0] * n_qps
    cum: list[tuple[int, int]] = [(0, 0)]
    for t, k, done in sorted(times):
        per_qp[k] = done
        cum.append((t, sum(per_qp)))
    window = min(PEAK_WINDOW * n_qps, max(1, n // 2))
    peak = 0.0
    j = 0
    for i in range(1, len(cum)):  # peak between completions (not from the first post)
        while j < len(cum) and cum[j][1] - cum[i][1] < window:
            j += 1
        if j < len(cum) and cum[j][0] > cum[i][0]:
            peak = max(peak, (cum[j][1] - cum[i][1]) / (cum[j][0] - cum[i][0]))
    avg = n / elapsed  # WRs per ps
    peak = max(peak, avg)
    return {"test": test, "bytes": size, "iterations": n, **extra,
            "bw_peak_gbps": round(peak * size * 8 * 1e3, 4),
            "bw_avg_gbps": round(avg * size * 8 * 1e3, 4),
            "bw_peak_mbps": round(peak * size * 1e12 / MB, 3),
            "bw_avg_mbps": round(avg * size * 1e12 / MB, 3),
            "msg_rate_mpps": round(avg * 1e6, 6)}


Step = tuple[str, int, dict[str, int]]


def plan(tests: Sequence[str] | None = None, sizes: Sequence[int] | None = None,
         quick: bool = False) -> list[Step]:
    """The (test, size, extra) steps of a run: ``sizes`` for every test (each fixed-size
    test at its own size), or by default the sizes of :data:`QUICK_SIZES`/:data:`SIZES`
    (plus 2 and 8 octets for latency tests); ``read_rate_batch`` has one step per
    ``{"qps", "batch"}``."""
    out: list[Step] = []
    for test in tests or TESTS:
        if test == "read_rate_batch":
            out += [(test, 8, {"qps": q, "batch": b}) for q in ((1, 4) if quick else (1, 8))
                    for b in ((1, 16) if quick else (1, 4, 16, 64))]
            continue
        if test in FIXED_SIZE:
            out.append((test, FIXED_SIZE[test], {}))
            continue
        default = (QUICK_SIZES if quick else SIZES)
        todo = sizes or ((*LAT_EXTRA, *default) if test in LAT_TESTS else default)
        out += [(test, s, {}) for s in todo]
    return out


def run_step(prof: NicProfile, test: str, size: int, quick: bool = False,
             iters: int | None = None, extra: dict[str, int] | None = None) -> list[Row]:
    """The row of one step (see :func:`plan`)."""
    lat_iters = iters or (5 if quick else 20)
    if test == "write_lat":
        return [lat_row(test, size, write_lat_samples(prof, size, lat_iters))]
    if test == "send_lat":
        return [lat_row(test, size, send_lat_samples(prof, size, lat_iters))]
    if test in ("read_lat", "atomic_lat"):
        return [lat_row(test, size, rdma_lat_samples(prof, size, lat_iters,
                                                     atomic=test == "atomic_lat"))]
    times: list[tuple[int, int, int]] = []
    if test in ("write_bw", "read_bw"):
        opcode = Opcode.RDMA_WRITE if test == "write_bw" else Opcode.RDMA_READ

        def make(rig: _Rig, i: int) -> WorkRequest:
            if opcode is Opcode.RDMA_WRITE:
                return _write_wr(rig, size, True, S)
            return WorkRequest(opcode, (Sge(rig.bufa, size, rig.mra.lkey),), S,
                               remote_addr=rig.bufb, rkey=rig.mrb.rkey)

        n, ps = _stream(prof, make, iters or _iters(size, quick), times=times, buf=size)
        return [bw_row(test, size, n, ps, times, 1)]
    if test in ("atomic_same", "atomic_spread"):
        spread = test == "atomic_spread"

        def make_atomic(rig: _Rig, i: int) -> WorkRequest:
            off = (i % 4096) * 8 if spread else 0
            return WorkRequest(Opcode.FETCH_ADD, (Sge(rig.bufa, 8, rig.mra.lkey),), S,
                               remote_addr=rig.bufb + off, rkey=rig.mrb.rkey, swap_add=1)

        n, ps = _stream(prof, make_atomic, iters or (100 if quick else 500), times=times)
        return [bw_row(test, 8, n, ps, times, 1)]
    if test == "read_rate_batch":
        def make_read8(rig: _Rig, i: int) -> WorkRequest:
            return WorkRequest(Opcode.RDMA_READ, (Sge(rig.bufa, 8, rig.mra.lkey),), S,
                               remote_addr=rig.bufb + (i % 512) * 64, rkey=rig.mrb.rkey)

        qps, batch = (extra or {}).get("qps", 1), (extra or {}).get("batch", 1)
        n, ps = _stream(prof, make_read8, iters or (256 if quick else 2048), n_qps=qps,
                        batch=batch, times=times)
        return [bw_row(test, 8, n, ps, times, qps, qps=qps, batch=batch)]
    raise ValueError(f"unknown nicbench test {test!r} (known: {', '.join(TESTS)})")


def run_nicbench(profile_name: str, quick: bool = False, tests: Sequence[str] | None = None,
                 sizes: Sequence[int] | None = None, iters: int | None = None,
                 progress: Callable[[float], None] | None = None) -> list[Row]:
    """perftest-style rows for ``profile_name`` (see the module docstring and
    :func:`plan`); ``progress(fraction)`` after each step."""
    prof = get_profile(profile_name)
    steps = plan(tests, sizes, quick)
    rows: list[Row] = []
    for i, (test, size, extra) in enumerate(steps):
        rows += run_step(prof, test, size, quick, iters, extra)
        if progress is not None:
            progress((i + 1) / len(steps))
    return rows

