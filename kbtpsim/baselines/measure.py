"""Measurements common to KBTP targets and baselines (docs/baselines.md, "Measuring").

* **Round trips** of one operation (:func:`round_trips`): network round trips on its
  critical path. A baseline's result carries its own count; a KBTP operation's follows
  from what it did: LOAD, FREE, BIND, inline STORE / ALLOC_STORE 1; a non-inline store 2
  (the target RDMA-reads the data: a second round trip before the completion);
  DIRECT_LOAD 3 (entry, block, entry) + 1 per extra attempt, or attempts + 1 when it fell
  back to LOAD; DIRECT_ALLOC 5 (FetchAdd, slot read, slot confirm, write, BIND; extra
  slot polls while a slot is not ready are not seen and not counted).
* **Memory** (:class:`MemoryProbe`): *held* = octets of KV data stored and not freed, seen
  from the initiators (the same for every approach): a store's data counts from its
  completion to the posting of its FREE (back if that FREE fails). That is inside the
  time the target holds it (it stored the data before completing, and cannot release it
  before the FREE is sent), so held <= reserved at every sample and the utilisation
  cannot exceed 100 % (counting the FREE at its completion did: the target had already
  put the block back); *reserved* = target
  memory that no other allocation can use at that instant: KBTP blocks taken from a
  shared ring (bound, ticketed, or freed but not yet back) x Block Size, whole DIRECT_ALLOC
  partitions (``quota`` blocks reserved to one initiator), whole static regions, and the
  dynamic allocators' live ranges. Receive buffers (``buffer_bytes``: a two-sided
  target's, a block each; a KBTP target's, Max Inline each) are reported apart.
  Sampled every ``metrics.sample_interval``; the utilisation is sum(held) /
  sum(reserved) over the samples in the steady state, from the later of the warm-up's
  end and the target's first completed FREE (the pool has filled and eviction has begun:
  before that a static region is reserved but still filling).
* **Target CPU per operation** (:func:`cpu_per_op`): core time charged between the end of
  the warm-up and the end of the run, divided by the operations measured in that window;
  session accounts (HELLO, GOODBYE, DISCONNECT) are left out, everything else (TIMER,
  DIRECT, the offloaded target's CHAIN and REFILL, ...) is in the total.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from kbtpsim.baselines.server import BaselineServer, Memory
from kbtpsim.scenario.schema import BASELINE_MODES, Scenario
from kbtpsim.system import OpResult
from kbtpsim.workload import Request

#: CPU accounts of session management, not of operations
SESSION_ACCOUNTS = frozenset({"HELLO", "GOODBYE", "DISCONNECT"})
#: workload operations by kind
STORE_OPS = frozenset({"ALLOC_STORE", "STORE", "DIRECT_ALLOC"})
LOAD_OPS = frozenset({"LOAD", "DIRECT_LOAD"})
FREE_OPS = frozenset({"FREE"})
#: CPU accounts by kind (READ_DONE is charged to the store's own account)
STORE_ACCOUNTS = frozenset({"ALLOC_STORE", "STORE", "BIND", "DIRECT"})
LOAD_ACCOUNTS = frozenset({"LOAD"})
FREE_ACCOUNTS = frozenset({"FREE"})


def round_trips(req: Request, res: OpResult) -> int:
    """Network round trips of a finished operation (see the module docstring)."""
    own = getattr(res, "round_trips", None)
    if own is not None:
        return int(own)
    op = req.op
    if op in ("store", "alloc_store"):
        return 1 if req.inline else 2
    if op == "direct_load":
        if res.direct:
            return 3 + max(0, res.attempts - 1)
        return res.attempts + 1
    if op == "direct_alloc":
        return 5 if req.length else 4
    return 1


def kbtp_memory(server: Any) -> Memory:
    """Reserved and allocated memory of a KBTP target (software or offloaded)."""
    cfg = server.config
    bs = cfg.block_size
    reserved = allocated = 0
    for r in server.target.stats().rings:
        in_use = (r.blocks - r.available) * bs
        allocated += in_use
        reserved += in_use if r.name == "shared" else r.blocks * bs
    # request receive buffers (one per credit, and one for HELLO/GOODBYE): they hold
    # inline store data, so they grow with Max Inline
    buffers = sum(c.recv_size * (cfg.request_credits + 1)
                  for c in server.connections.values())
    return Memory(reserved, allocated, cfg.blocks * bs, buffers)


def memory_of(server: Any) -> Memory:
    if isinstance(server, BaselineServer):
        return server.memory()
    return kbtp_memory(server)


@dataclass
class _Acc:
    held: int = 0
    since_ps: int | None = None
    samples: int = 0
    held_sum: float = 0.0
    reserved_sum: float = 0.0
    allocated_sum: float = 0.0
    held_peak: int = 0
    reserved_peak: int = 0
    last: Memory | None = None
    handles: dict[int, int] = field(default_factory=dict)
    #: handle -> octets, of FREEs posted and not yet completed (no longer held)
    freeing: dict[int, int] = field(default_factory=dict)


class MemoryProbe:
    """KV data held per target (fed by the driver) and target memory (sampled)."""

    def __init__(self, system: Any, warm_ps: int) -> None:
        self.system = system
        self.warm_ps = warm_ps
        self.acc: dict[str, _Acc] = {name: _Acc() for name in system.servers}
        self.first_free: dict[str, int] = {}

    def issue(self, target: str, req: Request) -> None:
        """An operation of an initiator of ``target`` is about to be posted: a FREE's data
        stops counting now, before the target can release it."""
        if req.op == "free":
            acc = self.acc[target]
            n = acc.handles.pop(req.handle, None)
            if n is not None:
                acc.held -= n
                acc.freeing[req.handle] = n

    def update(self, target: str, req: Request, ok: bool) -> None:
        """An operation of an initiator of ``target`` finished (``req`` as issued)."""
        acc = self.acc[target]
        if req.op == "free":
            n = acc.freeing.pop(req.handle, None)
            if ok:
                self.first_free.setdefault(target, int(self.system.env.now))
            elif n is not None:  # not freed: still held, as before the FREE
                acc.held += n
                acc.handles[req.handle] = n
            return
        if not ok:
            return
        if req.op in ("store", "alloc_store", "direct_alloc"):
            acc.held += req.length - acc.handles.get(req.handle, 0)
            acc.handles[req.handle] = req.length

    def sample(self, now: int, t0: int, rows: list[tuple[int, str, float]]) -> None:
        for name, server in self.system.servers.items():
            acc = self.acc[name]
            mem = memory_of(server)
            acc.last = mem
            rows.append((now - t0, f"{name}.memory.held", acc.held))
            rows.append((now - t0, f"{name}.memory.reserved", mem.reserved))
            start = self.first_free.get(name)
            if start is None or now < max(self.warm_ps, start):
                continue
            if acc.since_ps is None:
                acc.since_ps = now - t0
            acc.samples += 1
            acc.held_sum += acc.held
            acc.reserved_sum += mem.reserved
            acc.allocated_sum += mem.allocated
            acc.held_peak = max(acc.held_peak, acc.held)
            acc.reserved_peak = max(acc.reserved_peak, mem.reserved)

    def process(self, t0: int, interval: int,
                rows: list[tuple[int, str, float]]) -> Generator[simpy.Event, Any, None]:
        env = self.system.env
        while True:
            yield env.timeout(interval)
            self.sample(int(env.now), t0, rows)

    def results(self, name: str) -> dict[str, Any]:
        """``targets.<name>.memory`` of results.json (means over the steady state)."""
        acc = self.acc[name]
        mem = acc.last or memory_of(self.system.servers[name])
        n = acc.samples
        return {
            "pool_bytes": mem.pool,
            "buffer_bytes": mem.buffers,
            "held_bytes_end": acc.held,
            "reserved_bytes_end": mem.reserved,
            "allocated_bytes_end": mem.allocated,
            "steady_from_ps": acc.since_ps,
            "samples": n,
            "held_bytes_mean": round(acc.held_sum / n, 1) if n else None,
            "reserved_bytes_mean": round(acc.reserved_sum / n, 1) if n else None,
            "allocated_bytes_mean": round(acc.allocated_sum / n, 1) if n else None,
            "utilisation": round(acc.held_sum / acc.reserved_sum, 6)
            if n and acc.reserved_sum else None,
            "held_bytes_peak": acc.held_peak if n else None,
            "reserved_bytes_peak": acc.reserved_peak if n else None,
        }


def cpu_snapshot(system: Any) -> dict[str, dict[str, float]]:
    """Busy ns per CPU account of every target."""
    return {name: {k: v["busy_ns"] for k, v in server.cpu.report().items()}
            for name, server in system.servers.items()}


def _per(busy: float, n: int) -> float | None:
    return round(busy / n, 3) if n else None


def cpu_per_op(before: dict[str, float], after: dict[str, float],
               counts: dict[str, int]) -> dict[str, float | None]:
    """Target CPU ns per measured operation: ``all``, ``store``, ``load``, ``free``."""
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    ops = {kind: sum(n for op, n in counts.items() if op in kinds)
           for kind, kinds in (("store", STORE_OPS), ("load", LOAD_OPS),
                               ("free", FREE_OPS))}
    busy = {kind: sum(v for k, v in delta.items() if k in accounts)
            for kind, accounts in (("store", STORE_ACCOUNTS), ("load", LOAD_ACCOUNTS),
                                   ("free", FREE_ACCOUNTS))}
    total = sum(v for k, v in delta.items() if k not in SESSION_ACCOUNTS)
    out = {"all": _per(total, sum(counts.values()))}
    out.update({kind: _per(busy[kind], ops[kind]) for kind in ("store", "load", "free")})
    return out


def approach(sc: Scenario) -> str:
    """A label of what the scenario's main target runs: a baseline mode, or
    ``kbtp_<mode>`` with ``+direct_load`` / ``+direct_alloc`` when a KV-cache workload
    uses them."""
    tgt = sc.target
    if tgt.mode in BASELINE_MODES:
        return tgt.mode
    label = f"kbtp_{tgt.mode}"
    wls = [i.workload for i in sc.initiators if (i.target or tgt.name) == tgt.name]
    if any(w.kind == "kvcache" and w.kvcache.load_with == "direct_load" for w in wls) or \
            any(w.mix.get("direct_load", 0) > 0 for w in wls if w.kind == "synthetic"):
        label += "+direct_load"
    if any(w.kind == "kvcache" and w.kvcache.store_with == "direct_alloc" for w in wls) or \
            any(w.mix.get("direct_alloc", 0) > 0 for w in wls if w.kind == "synthetic"):
        label += "+direct_alloc"
    return label


def comparison(sc: Scenario, operations: dict[str, Any], targets: dict[str, Any],
               round_trip_sums: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """The ``comparison`` block of results.json: the main target's figures by kind of
    operation (store, load, free), what the comparison table prints."""
    name = sc.target.name
    t = targets.get(name, {})

    def kind_of(kinds: frozenset[str]) -> dict[str, Any]:
        present = [op for op in sorted(operations) if op in kinds]
        lat: dict[str, Any] = {}
        if len(present) == 1:
            lat = operations[present[0]]["ok_latency_ns"] or {}
        rts = [round_trip_sums[op] for op in present if op in round_trip_sums]
        n = sum(c for _, c in rts)
        return {
            "operations": present,
            "count": sum(operations[op]["count"] for op in present),
            "ops_per_s": round(sum(operations[op]["ops_per_s"] for op in present), 3),
            "latency_p50_ns": lat.get("p50"), "latency_p99_ns": lat.get("p99"),
            "round_trips": round(sum(s for s, _ in rts) / n, 3) if n else None,
        }

    return {
        "approach": approach(sc),
        "target": name,
        "memory_utilisation": t.get("memory", {}).get("utilisation"),
        "cpu_ns_per_op": t.get("cpu", {}).get("per_measured_op"),
        "store": kind_of(STORE_OPS), "load": kind_of(LOAD_OPS), "free": kind_of(FREE_OPS),
    }


def add_comparison(results: dict[str, Any], sc: Scenario, system: Any, recorder: Any,
                   memory: MemoryProbe, cpu_at_warm: dict[str, dict[str, float]]) -> None:
    """Add the comparison measurements to a run's results (in place):
    ``operations.<OP>.round_trips``, ``targets.<name>.memory``,
    ``targets.<name>.cpu.per_measured_op`` and the top-level ``comparison`` block. Every
    key is present for every approach (null where it does not apply)."""
    counts: dict[str, int] = {}
    for (op, _status), lats in recorder.latencies.items():
        counts[op] = counts.get(op, 0) + len(lats)
    for op, v in results["operations"].items():
        s, n = recorder.round_trips.get(op, (0, 0))
        v["round_trips"] = round(s / n, 3) if n else None
    after = cpu_snapshot(system)
    for name, t in results["targets"].items():
        t["memory"] = memory.results(name)
        # divided by the operations of all initiators (one target: its own)
        t["cpu"]["per_measured_op"] = cpu_per_op(cpu_at_warm.get(name, {}), after[name],
                                                 counts)
    results["comparison"] = comparison(sc, results["operations"], results["targets"],
                                       recorder.round_trips)


__all__ = ["MemoryProbe", "add_comparison", "approach", "comparison", "cpu_per_op", "cpu_snapshot",
           "kbtp_memory", "memory_of", "round_trips"]
