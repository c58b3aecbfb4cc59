"""Drive workload generators as simpy processes against :class:`Initiator` s.

Closed loop: ``window`` processes per initiator, each issuing a request and waiting for
it. Open loop: one process per initiator draws exponential inter-arrival times (Poisson
arrivals at ``rate``) and starts a process per request; arrivals the generator cannot
serve (nothing eligible) are counted as dropped. Every completion goes to the
:class:`~kbtpsim.run.metrics.Recorder` and back to the generator.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy

from kbtpsim.baselines.measure import MemoryProbe, round_trips
from kbtpsim.baselines.workload import attach, kv_request, prefill_workload
from kbtpsim.run.build import System
from kbtpsim.run.metrics import Recorder
from kbtpsim.system import ConnectionLost, Initiator, OpResult, RdmaError
from kbtpsim.wire import Free, Status, encode
from kbtpsim.workload import (
    FOREIGN_HANDLE,
    DecodeWorkload,
    Request,
    SequenceRegistry,
    SyntheticWorkload,
    Workload,
)

Gen = Generator[simpy.Event, Any, Any]
IDLE_PS = 1_000_000  #: a closed-loop worker with nothing to issue looks again after 1 us
_ZEROS = bytes(1 << 16)


def payload(length: int, seq: int) -> bytes:
    """``length`` octets starting with the request's sequence number."""
    head = seq.to_bytes(8, "big")[:length]
    rest = length - len(head)
    if rest <= len(_ZEROS):
        return head + _ZEROS[:rest]
    return head + bytes(rest)


def malformed_request(request_id: int, handle: int) -> bytes:
    """A FREE whose Flags field holds an undefined bit (the target answers MALFORMED)."""
    raw = bytearray(encode(Free(request_id=request_id, handle=handle)))
    raw[2:4] = (0x4000).to_bytes(2, "big")
    return bytes(raw)


def rng_for(seed: int, index: int) -> np.random.Generator:
    """The workload RNG of the ``index``-th initiator (expanded order)."""
    return np.random.default_rng([seed, index])


class Driver:
    """Generators and processes for every initiator of ``system``."""

    def __init__(self, system: System, recorder: Recorder) -> None:
        self.system = system
        self.recorder = recorder
        self.env = system.env
        self.workloads: dict[str, Workload] = {}
        self.dropped: dict[str, int] = {}
        self.lost: dict[str, str] = {}
        self.registries: dict[str, SequenceRegistry] = {}
        #: KV data held per target, for memory utilisation (set by the runner)
        self.memory: MemoryProbe | None = None
        sc = system.scenario
        for index, (name, e) in enumerate(system.expanded.items()):
            wl = e.spec.workload
            tgt = next(t for t in sc.targets if t.name == e.target)
            cfg = system.configs[e.target].initiator(
                system.initiators[name].initiator_id)
            assert cfg is not None
            threshold = tgt.max_inline if wl.inline_threshold is None else wl.inline_threshold
            rng = rng_for(sc.seed, index)
            registry = self.registries.setdefault(e.target, SequenceRegistry())
            gen: Workload
            if wl.kind == "kvcache" and wl.kvcache.role == "prefill":
                gen = prefill_workload(tgt, wl, rng, registry, name=name,
                                       handle_base=cfg.handle_base, handles=cfg.handle_count,
                                       quota=cfg.quota, inline_threshold=threshold)
                attach(system.initiators[name], gen)
            elif wl.kind == "kvcache":
                gen = DecodeWorkload(wl, rng, registry)
            else:
                gen = SyntheticWorkload(wl, rng, handle_base=cfg.handle_base,
                                        handles=cfg.handle_count, quota=cfg.quota,
                                        inline_threshold=threshold,
                                        block_size=tgt.block_size)
            self.workloads[name] = gen

    def drain(self) -> None:
        """Issue nothing more (requests in flight go on): the run has ended."""
        self.draining = True

    def start(self) -> None:
        self.draining = False
        for name, gen in self.workloads.items():
            wl = self.system.expanded[name].spec.workload
            if wl.loop == "closed":
                for _ in range(wl.window):
                    self.env.process(self._closed(name, gen))
            else:
                self.env.process(self._open(name, gen, wl.rate))

    # ------------------------------------------------------------------ loops
    def _closed(self, name: str, gen: Workload) -> Gen:
        while name not in self.lost and not self.draining:
            req = gen.next()
            if req is None:
                yield self.env.timeout(IDLE_PS)
                continue
            yield from self._one(name, gen, req)

    def _open(self, name: str, gen: Workload, rate: float) -> Gen:
        rng = rng_for(self.system.scenario.seed, 1 << 20 | list(self.workloads).index(name))
        mean_ps = 1e12 / rate
        while name not in self.lost:
            yield self.env.timeout(max(1, round(float(rng.exponential(mean_ps)))))
            if self.draining:
                return
            req = gen.next()
            if req is None:
                self.dropped[name] = self.dropped.get(name, 0) + 1
                continue
            self.env.process(self._one(name, gen, req))

    def _one(self, name: str, gen: Workload, asked: Request) -> Gen:
        ini = self.system.initiators[name]
        wl = self.system.expanded[name].spec.workload
        req = kv_request(wl, asked)  # as issued (kvcache.load_with / store_with)
        posted = int(self.env.now)
        op = req.op.upper()
        nbytes = 0
        fallback = False
        rts: int | None = None
        if self.memory is not None:
            self.memory.issue(self.system.expanded[name].target, req)
        try:
            res: OpResult = yield self._issue(ini, req, wl.direct_load_fallback, wl.record,
                                              wl.invalidate)
            status = res.status.name if isinstance(res.status, Status) else str(res.status)
            if req.op in ("load", "direct_load", "invalid_load") and res.completion is not None:
                nbytes = res.completion.data_length
            elif req.op in ("store", "alloc_store", "direct_alloc"):
                nbytes = req.length
            fallback = req.op == "direct_load" and not res.direct
            rts = round_trips(req, res) if status == "OK" else None
        except RdmaError as exc:
            status = f"RDMA_{exc.status.name}"
        except ConnectionLost:
            status = "CONNECTION_LOST"
            self.lost.setdefault(name, status)
        except RuntimeError as exc:  # a DIRECT_ALLOC slot never became ready
            status = "DIRECT_FAILED"
            self.lost.setdefault(name, str(exc))
        if ini.broken is not None:
            self.lost.setdefault(name, ini.broken)
        gen.done(asked, status == "OK")
        if self.memory is not None:
            self.memory.update(self.system.expanded[name].target, req, status == "OK")
        self.recorder.record(name, op, status, posted, nbytes, fallback, rts)

    def _issue(self, ini: Initiator, req: Request, fallback: bool,
               record: bool, invalidate: bool = True) -> simpy.Process:
        h = req.handle
        op = req.op
        if op == "load":
            return ini.load(h, allow_unsealed=True, record=record, invalidate=invalidate)
        if op == "store":
            return ini.store(h, payload(req.length, req.seq), inline=req.inline, seal=req.seal,
                             record=record, invalidate=invalidate)
        if op == "alloc_store":
            return ini.alloc_store(h, payload(req.length, req.seq), inline=req.inline,
                                   seal=req.seal, record=record, invalidate=invalidate)
        if op == "free":
            return ini.free(h, record=record)
        if op == "direct_load":
            return ini.direct_load(h, fallback=fallback)
        if op == "direct_alloc":
            return ini.direct_alloc(h, payload(req.length, req.seq))
        if op == "invalid_load":
            return ini.load(FOREIGN_HANDLE)
        if op == "malformed":
            rid = (1 << 62) + req.seq
            return ini.send_raw(malformed_request(rid, h))
        if op == "hoard":
            ack = ini.ack
            assert ack is not None
            return ini.direct_alloc(ack.handle_base, b"", bind=False)
        raise ValueError(f"unknown request op {op!r}")  # pragma: no cover
