"""nicbench: perftest-style microbenchmarks of a NIC profile, and the ``nicbench`` command.

``run_nicbench(profile_name, quick=False)`` builds two hosts joined by one link and returns
rows ``{"test", "size", "value", "unit"}``:

* ``write_lat``, ``send_lat``: ping-pong, one-way = half the round trip (perftest's
  ``ib_write_lat`` polls the last byte of the buffer; ``ib_send_lat`` polls the receive CQ);
* ``read_lat``, ``atomic_lat``: post to completion, not halved (perftest reports these whole);
* ``write_bw``, ``read_bw`` (Gb/s) and ``write_rate``, ``read_rate`` (Mops): one QP, 128 WRs
  outstanding, one WR in 16 signaled;
* ``atomic_same``, ``atomic_spread`` (Mops): FETCH_ADD on one address / on 4096 addresses;
* ``read_rate_batch`` (Mops, extra keys ``batch`` and ``qps``): 8-octet READs with one
  doorbell per ``batch`` WRs, from ``qps`` QPs (one CPU thread each).

Latencies are medians over the iterations (perftest's "typical"). CPU costs are the profile's
``cpu_post_ns`` per WR, ``cpu_doorbell_ns`` per doorbell and ``cpu_poll_ns`` to notice a
completion or a changed byte.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from kbtpsim.nic.cq import CompletionQueue
from kbtpsim.nic.nic import Nic
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.profiles import get_profile, profile_names
from kbtpsim.nic.protection import Access
from kbtpsim.nic.qp import QueuePair
from kbtpsim.nic.sim import Simulation
from kbtpsim.nic.wqe import Opcode, Sge, WorkRequest, WqeFlags
from kbtpsim.usage import fail

Row = dict[str, Any]
SIZES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
QUICK_SIZES = (64, 4096, 65536, 1048576)
LAT_EXTRA = (2, 8)  # the sizes of the published latency figures
BUF = 4 << 20
ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC
S = WqeFlags.SIGNALED


class _Rig:
    """Two NICs, ``n_qps`` connected QP pairs, one 4 MiB buffer per side."""

    def __init__(self, profile: str | NicProfile, n_qps: int = 1, buf: int = 0) -> None:
        self.sim = Simulation()
        self.env = self.sim.env
        self.a: Nic = self.sim.add_nic("a", profile)
        self.b: Nic = self.sim.add_nic("b", profile)
        prof = self.a.profile
        self.cpu_post = round(prof.cpu_post_ns * 1000)
        self.cpu_poll = round(prof.cpu_poll_ns * 1000)
        self.cpu_db = round(prof.cpu_doorbell_ns * 1000)
        self.cqa: list[CompletionQueue] = []
        self.cqb: list[CompletionQueue] = []
        self.qa: list[QueuePair] = []
        self.qb: list[QueuePair] = []
        for _ in range(n_qps):
            ca, cb = self.a.create_cq(1 << 16), self.b.create_cq(1 << 16)
            qa = self.a.create_qp(ca, ca, sq_depth=256, rq_depth=256)
            qb = self.b.create_qp(cb, cb, sq_depth=256, rq_depth=256)
            self.sim.connect(qa, qb)
            self.cqa.append(ca)
            self.cqb.append(cb)
            self.qa.append(qa)
            self.qb.append(qb)
        size = max(BUF, buf)
        self.bufa = self.a.host.alloc(size, 4096)
        self.bufb = self.b.host.alloc(size, 4096)
        self.mra = self.a.register_mr(self.bufa, size, ALL)
        self.mrb = self.b.register_mr(self.bufb, size, ALL)

    def run(self, proc: Callable[[], Generator[simpy.Event, Any, Any]]) -> Any:
        p = self.env.process(proc())
        self.env.run(until=p)
        return p.value


def _post(env: simpy.Environment, rig: _Rig, qp: QueuePair, wr: WorkRequest,
          doorbell: bool = True) -> Generator[simpy.Event, Any, None]:
    yield env.timeout(rig.cpu_post)
    qp.post_send(wr)
    if doorbell:
        yield env.timeout(rig.cpu_db)
        qp.ring_doorbell()


def _write_wr(rig: _Rig, size: int, to_b: bool, flags: WqeFlags = WqeFlags.NONE) -> WorkRequest:
    prof = rig.a.profile
    src, mr, dst, rmr = ((rig.bufa, rig.mra, rig.bufb, rig.mrb) if to_b
                         else (rig.bufb, rig.mrb, rig.bufa, rig.mra))
    if size <= prof.max_inline:
        return WorkRequest(Opcode.RDMA_WRITE, flags=flags, inline_data=bytes([1]) * size,
                           remote_addr=dst, rkey=rmr.rkey)
    return WorkRequest(Opcode.RDMA_WRITE, (Sge(src, size, mr.lkey),), flags, remote_addr=dst,
                       rkey=rmr.rkey)


def write_lat(profile: str, size: int, iters: int) -> float:
    """The typical (median) one-way latency in ns; see :func:`write_lat_samples`."""
    return statistics.median(write_lat_samples(profile, size, iters)) / 1000


def write_lat_samples(profile: str | NicProfile, size: int, iters: int) -> list[int]:
    """Per iteration, half the round trip of a WRITE ping-pong (ps)."""
    rig = _Rig(profile, buf=size)
    env = rig.env

    def proc() -> Generator[simpy.Event, Any, list[int]]:
        out = []
        for _ in range(iters):
            t0 = env.now
            for to_b in (True, False):
                nic, qp, buf = (rig.b, rig.qa[0], rig.bufb) if to_b else \
                    (rig.a, rig.qb[0], rig.bufa)
                seen = nic.watch(buf + size - 1)
                yield from _post(env, rig, qp, _write_wr(rig, size, to_b))
                yield seen
                yield env.timeout(rig.cpu_poll)
            out.append(int(env.now - t0) // 2)
        return out

    samples: list[int] = rig.run(proc)
    return samples


def send_lat(profile: str, size: int, iters: int) -> float:
    """The typical (median) one-way latency in ns; see :func:`send_lat_samples`."""
    return statistics.median(send_lat_samples(profile, size, iters)) / 1000


def send_lat_samples(profile: str | NicProfile, size: int, iters: int) -> list[int]:
    """Per iteration, half the round trip of a SEND ping-pong (ps)."""
    rig = _Rig(profile, buf=size)
    env = rig.env
    prof = rig.a.profile

    def wr(to_b: bool) -> WorkRequest:
        if size <= prof.max_inline:
            return WorkRequest(Opcode.SEND, inline_data=bytes(size))
        src, mr = (rig.bufa, rig.mra) if to_b else (rig.bufb, rig.mrb)
        return WorkRequest(Opcode.SEND, (Sge(src, size, mr.lkey),))

    def proc() -> Generator[simpy.Event, Any, list[int]]:
        rig.qa[0].post_recv([Sge(rig.bufa, size, rig.mra.lkey)])
        rig.qb[0].post_recv([Sge(rig.bufb, size, rig.mrb.lkey)])
        out = []
        for _ in range(iters):
            t0 = env.now
            for to_b in (True, False):
                src, dst, dcq = (rig.qa[0], rig.qb[0], rig.cqb[0]) if to_b else \
                    (rig.qb[0], rig.qa[0], rig.cqa[0])
                yield from _post(env, rig, src, wr(to_b))
                yield from dcq.wait(1)
                yield env.timeout(rig.cpu_poll)
                dbuf, dmr = (rig.bufb, rig.mrb) if to_b else (rig.bufa, rig.mra)
                dst.post_recv([Sge(dbuf, size, dmr.lkey)])
            out.append(int(env.now - t0) // 2)
        return out

    samples: list[int] = rig.run(proc)
    return samples


def _rdma_lat(profile: str, size: int, iters: int, atomic: bool) -> float:
    return statistics.median(rdma_lat_samples(profile, size, iters, atomic)) / 1000


def rdma_lat_samples(profile: str | NicProfile, size: int, iters: int, atomic: bool) -> list[int]:
    """Per iteration, post to completion of a READ (or a FETCH_ADD) (ps)."""
    rig = _Rig(profile, buf=size)
    env = rig.env

    def proc() -> Generator[simpy.Event, Any, list[int]]:
        out = []
        for _ in range(iters):
            t0 = env.now
            if atomic:
                wr = WorkRequest(Opcode.FETCH_ADD, (Sge(rig.bufa, 8, rig.mra.lkey),), S,
                                 remote_addr=rig.bufb, rkey=rig.mrb.rkey, swap_add=1)
            else:
                wr = WorkRequest(Opcode.RDMA_READ, (Sge(rig.bufa, size, rig.mra.lkey),), S,
                                 remote_addr=rig.bufb, rkey=rig.mrb.rkey)
            yield from _post(env, rig, rig.qa[0], wr)
            yield from rig.cqa[0].wait(1)
            yield env.timeout(rig.cpu_poll)
            out.append(int(env.now - t0))
        return out

    samples: list[int] = rig.run(proc)
    return samples


def _stream(profile: str | NicProfile, make: Callable[[_Rig, int], WorkRequest], iters: int,
            n_qps: int = 1, batch: int = 1, depth: int = 128, cq_mod: int = 16,
            times: list[tuple[int, int, int]] | None = None, buf: int = 0
            ) -> tuple[int, int]:
    """Run ``iters`` WRs per QP with ``depth`` outstanding, one doorbell per ``batch`` WRs
    and one signaled WR in ``cq_mod`` (perftest's ``--cq-mod``); (total WRs, elapsed ps).
    ``times`` collects ``(ps since the start, QP, WRs of that QP completed)`` per CQE (the
    time the CQE became visible)."""
    rig = _Rig(profile, n_qps, buf=buf)
    env = rig.env

    def thread(k: int) -> Generator[simpy.Event, Any, None]:
        qp, cq = rig.qa[k], rig.cqa[k]
        posted = done = 0
        while done < iters:
            while posted < iters and posted - done + batch <= max(depth, batch):
                n = min(batch, iters - posted)
                for j in range(n):
                    i = posted + j
                    signaled = (i + 1) % cq_mod == 0 or i + 1 == iters
                    wr = dataclasses.replace(
                        make(rig, i), wr_id=i + 1,
                        flags=WqeFlags.SIGNALED if signaled else WqeFlags.NONE)
                    yield from _post(env, rig, qp, wr, doorbell=False)
                yield env.timeout(rig.cpu_db)
                qp.ring_doorbell()
                posted += n
            got = yield from cq.wait(1)
            for cqe in got + cq.poll(256):
                done = max(done, cqe.wr_id)
                if times is not None:
                    times.append((int(cqe.time) - t0[0], k, done))

    t0 = [0]

    def main() -> Generator[simpy.Event, Any, int]:
        t0[0] = int(env.now)
        yield simpy.AllOf(env, [env.process(thread(k)) for k in range(n_qps)])
        return int(env.now) - t0[0]

    elapsed = rig.run(main)
    return iters * n_qps, elapsed


# ---------------------------------------------------------------------------- tests
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


# ---------------------------------------------------------------------------- output
#: (header, row key, width) of perftest's latency and bandwidth columns
_LAT_COLS = (("#bytes", "bytes", 8), ("#iterations", "iterations", 13),
             ("t_min[usec]", "t_min", 13), ("t_max[usec]", "t_max", 13),
             ("t_typical[usec]", "t_typical", 17), ("t_avg[usec]", "t_avg", 13),
             ("t_stdev[usec]", "t_stdev", 15), ("99% percentile[usec]", "p99", 22),
             ("99.9% percentile[usec]", "p99.9", 24))
_BW_COLS = (("#bytes", "bytes", 10), ("#iterations", "iterations", 13),
            ("BW peak[Gb/sec]", "bw_peak_gbps", 17), ("BW average[Gb/sec]", "bw_avg_gbps", 20),
            ("BW peak[MB/sec]", "bw_peak_mbps", 17), ("BW average[MB/sec]", "bw_avg_mbps", 20),
            ("MsgRate[Mpps]", "msg_rate_mpps", 15))
_BATCH_COLS = (("#qps", "qps", 6), ("#batch", "batch", 8))
_RULE = "-" * 110


def _cell(value: Any, key: str, width: int) -> str:
    if isinstance(value, float):
        text = f"{value:.6f}" if key == "msg_rate_mpps" else f"{value:.2f}"
    else:
        text = str(value)
    return f" {text:<{width - 1}}"


def format_table(rows: list[Row]) -> str:
    """The rows in perftest's layout: one block per test, with its column header."""
    lines: list[str] = []
    last = None
    cols: tuple[tuple[str, str, int], ...] = ()
    for r in rows:
        if r["test"] != last:
            last = r["test"]
            about = LAT_TESTS.get(last) or BW_TESTS.get(last, "")
            cols = _LAT_COLS if last in LAT_TESTS else (
                (*_BATCH_COLS, *_BW_COLS) if "qps" in r else _BW_COLS)
            lines += [_RULE, f" {last}: {about}", _RULE,
                      "".join(f" {h:<{w - 1}}" for h, _, w in cols).rstrip()]
        lines.append("".join(_cell(r[k], k, w) for _, k, w in cols).rstrip())
    if lines:
        lines.append(_RULE)
    return "\n".join(lines)


def _nicbench_main(args: argparse.Namespace) -> int:
    from kbtpsim.progress import Progress
    from kbtpsim.units import UnitError, parse_size

    try:
        get_profile(args.nic)
    except ValueError as exc:
        return fail(str(exc))
    if args.iters is not None and args.iters < 1:
        return fail(f"-n/--iters: must be at least 1, got {args.iters}")
    sizes: list[int] | None = None
    if args.size is not None:
        try:
            size = parse_size(args.size)
        except UnitError as exc:
            return fail(f"-s/--size: {exc}")
        if not 1 <= size <= ALL_SIZES[-1]:
            return fail(f"-s/--size: {args.size} is out of range (1 octet to 8MiB)")
        sizes = [size]
    elif args.all:
        sizes = list(ALL_SIZES)
    tests = args.test or None
    bar = Progress(f"nicbench --nic {args.nic}", enabled=False if args.json else None)
    try:
        rows = run_nicbench(args.nic, quick=args.quick, tests=tests, sizes=sizes,
                            iters=args.iters, progress=bar.update)
    finally:
        bar.close()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"nicbench --nic {args.nic} (simulated; perftest's columns)")
        print(format_table(rows))
    return 0


DESCRIPTION = """perftest-style microbenchmarks of a NIC profile, on two simulated hosts joined
by one link. Latency tests print #bytes, #iterations, t_min, t_max, t_typical (median),
t_avg, t_stdev and the 99% and 99.9% percentiles (microseconds); bandwidth tests print
#bytes, #iterations, BW peak and BW average (Gb/s and MB/s, MB = 2^20 octets) and MsgRate
(Mpps). Without --test, every test runs; without -s or -a, a default set of sizes."""


def add_nicbench_parser(subparsers: Any) -> None:
    """Register the ``nicbench`` subcommand (sets ``func``; ``args.func(args)`` runs it)."""
    p = subparsers.add_parser("nicbench", help="perftest-style microbenchmarks of a NIC profile",
                              description=DESCRIPTION)
    p.add_argument("--nic", default="cx5", metavar="PROFILE",
                   help=f"NIC profile (default cx5; known: {', '.join(profile_names())})")
    p.add_argument("--test", action="append", choices=TESTS, metavar="TEST",
                   help=f"run this test only (repeatable; {', '.join(TESTS)})")
    sz = p.add_mutually_exclusive_group()
    sz.add_argument("-s", "--size", metavar="SIZE",
                    help="message size, e.g. 4096 or 64KiB (atomic tests are 8 octets)")
    sz.add_argument("-a", "--all", action="store_true",
                    help="every size from 2 octets to 8MiB (powers of two)")
    p.add_argument("-n", "--iters", type=int, metavar="N",
                   help="iterations per size (default: 20 for latency tests, 16 to 1000 "
                   "WRs, by size, for bandwidth tests; fewer with --quick)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    p.set_defaults(func=_nicbench_main)
