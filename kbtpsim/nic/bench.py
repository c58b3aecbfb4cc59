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
import statistics
from collections.abc import Callable, Generator
from typing import Any

import simpy

from kbtpsim.nic.cq import CompletionQueue
from kbtpsim.nic.nic import Nic
from kbtpsim.nic.profiles import PROFILES, get_profile
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

    def __init__(self, profile: str, n_qps: int = 1) -> None:
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
        self.bufa = self.a.host.alloc(BUF, 4096)
        self.bufb = self.b.host.alloc(BUF, 4096)
        self.mra = self.a.register_mr(self.bufa, BUF, ALL)
        self.mrb = self.b.register_mr(self.bufb, BUF, ALL)

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
    rig = _Rig(profile)
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
            out.append((env.now - t0) // 2)
        return out

    return statistics.median(rig.run(proc)) / 1000


def send_lat(profile: str, size: int, iters: int) -> float:
    rig = _Rig(profile)
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
            out.append((env.now - t0) // 2)
        return out

    return statistics.median(rig.run(proc)) / 1000


def _rdma_lat(profile: str, size: int, iters: int, atomic: bool) -> float:
    rig = _Rig(profile)
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
            out.append(env.now - t0)
        return out

    return statistics.median(rig.run(proc)) / 1000


def _stream(profile: str, make: Callable[[_Rig, int], WorkRequest], iters: int,
            n_qps: int = 1, batch: int = 1, depth: int = 128, cq_mod: int = 16
            ) -> tuple[int, int]:
    """Run ``iters`` WRs per QP with ``depth`` outstanding, one doorbell per ``batch`` WRs
    and one signaled WR in ``cq_mod`` (perftest's ``--cq-mod``); (total WRs, elapsed ps)."""
    rig = _Rig(profile, n_qps)
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

    def main() -> Generator[simpy.Event, Any, int]:
        t0 = env.now
        yield simpy.AllOf(env, [env.process(thread(k)) for k in range(n_qps)])
        return env.now - t0

    elapsed = rig.run(main)
    return iters * n_qps, elapsed


def _iters(size: int, quick: bool) -> int:
    budget = (4 << 20) if quick else (32 << 20)
    return max(8 if quick else 16, min(200 if quick else 1000, budget // size))


def run_nicbench(profile_name: str, quick: bool = False) -> list[Row]:
    """perftest-style rows for ``profile_name`` (see the module docstring)."""
    prof = get_profile(profile_name)
    name = prof.name
    sizes = QUICK_SIZES if quick else SIZES
    lat_iters = 5 if quick else 20
    rows: list[Row] = []

    def row(test: str, size: int, value: float, unit: str, **extra: Any) -> None:
        rows.append({"test": test, "size": size, "value": round(value, 4), "unit": unit,
                     **extra})

    for size in LAT_EXTRA + sizes:
        row("write_lat", size, write_lat(name, size, lat_iters), "ns")
    for size in LAT_EXTRA + sizes:
        row("send_lat", size, send_lat(name, size, lat_iters), "ns")
    for size in LAT_EXTRA + sizes:
        row("read_lat", size, _rdma_lat(name, size, lat_iters, atomic=False), "ns")
    row("atomic_lat", 8, _rdma_lat(name, 8, lat_iters, atomic=True), "ns")

    for test, opcode in (("write", Opcode.RDMA_WRITE), ("read", Opcode.RDMA_READ)):
        for size in sizes:
            def make(rig: _Rig, i: int, size: int = size, opcode: Opcode = opcode
                     ) -> WorkRequest:
                if opcode is Opcode.RDMA_WRITE:
                    return _write_wr(rig, size, True, S)
                return WorkRequest(opcode, (Sge(rig.bufa, size, rig.mra.lkey),), S,
                                   remote_addr=rig.bufb, rkey=rig.mrb.rkey)

            n, ps = _stream(name, make, _iters(size, quick))
            row(f"{test}_bw", size, n * size * 8 / (ps / 1000), "Gbps")
            row(f"{test}_rate", size, n / (ps / 1e6), "Mops")

    atomic_iters = 100 if quick else 500
    for test, spread in (("atomic_same", False), ("atomic_spread", True)):
        def make_atomic(rig: _Rig, i: int, spread: bool = spread) -> WorkRequest:
            off = (i % 4096) * 8 if spread else 0
            return WorkRequest(Opcode.FETCH_ADD, (Sge(rig.bufa, 8, rig.mra.lkey),), S,
                               remote_addr=rig.bufb + off, rkey=rig.mrb.rkey, swap_add=1)

        n, ps = _stream(name, make_atomic, atomic_iters)
        row(test, 8, n / (ps / 1e6), "Mops")

    def make_read8(rig: _Rig, i: int) -> WorkRequest:
        return WorkRequest(Opcode.RDMA_READ, (Sge(rig.bufa, 8, rig.mra.lkey),), S,
                           remote_addr=rig.bufb + (i % 512) * 64, rkey=rig.mrb.rkey)

    for qps in ((1, 4) if quick else (1, 8)):
        for batch in ((1, 16) if quick else (1, 4, 16, 64)):
            n, ps = _stream(name, make_read8, 256 if quick else 2048, n_qps=qps, batch=batch)
            row("read_rate_batch", 8, n / (ps / 1e6), "Mops", batch=batch, qps=qps)
    return rows


def format_table(rows: list[Row]) -> str:
    """A readable table of nicbench rows."""
    lines = [f"{'test':<18}{'size':>9}{'value':>12}  unit"]
    for r in rows:
        extra = "".join(f" {k}={r[k]}" for k in ("batch", "qps") if k in r)
        lines.append(f"{r['test']:<18}{r['size']:>9}{r['value']:>12.2f}  {r['unit']}{extra}")
    return "\n".join(lines)


def _nicbench_main(args: argparse.Namespace) -> int:
    if args.nic not in PROFILES:
        known = ", ".join(sorted(PROFILES))
        return fail(f"unknown NIC profile {args.nic!r} (known: {known})")
    rows = run_nicbench(args.nic, quick=args.quick)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"nicbench --nic {args.nic}{' --quick' if args.quick else ''}")
        print(format_table(rows))
    return 0


def add_nicbench_parser(subparsers: Any) -> None:
    """Register the ``nicbench`` subcommand (sets ``func``; ``args.func(args)`` runs it)."""
    p = subparsers.add_parser("nicbench", help="perftest-style microbenchmarks of a NIC profile",
                              description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--nic", default="cx5", metavar="PROFILE",
                   help=f"NIC profile (default cx5; known: {', '.join(sorted(PROFILES))})")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations")
    p.set_defaults(func=_nicbench_main)
