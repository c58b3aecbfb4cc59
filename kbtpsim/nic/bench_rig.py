"""nicbench's measurements: two hosts joined by one link (:class:`_Rig`), WRITE and SEND
ping-pongs (one-way latency = half the round trip), READ and FETCH_ADD post to completion,
and streams of WRs with a bounded number outstanding (bandwidth and message rate).

CPU costs are the profile's ``cpu_post_ns`` per WR, ``cpu_doorbell_ns`` per doorbell and
``cpu_poll_ns`` to notice a completion or a changed byte. The tests built on these are in
:mod:`kbtpsim.nic.bench_run`.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Generator
from typing import Any

import simpy

from kbtpsim.nic.cq import CompletionQueue
from kbtpsim.nic.nic import Nic
from kbtpsim.nic.profile import NicProfile
from kbtpsim.nic.protection import Access
from kbtpsim.nic.qp import QueuePair
from kbtpsim.nic.sim import Simulation
from kbtpsim.nic.wqe import Opcode, Sge, WorkRequest, WqeFlags

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
