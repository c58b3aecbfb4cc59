"""Run one scenario: build the system, connect, drive the workloads, stop, collect.

Time 0 of the run (warm-up, stop time, time series) is the moment every session is
established. The run stops at ``stop.operations`` measured completions or at
``stop.time``, whichever comes first; requests still in flight are not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kbtpsim import __version__
from kbtpsim.baselines.measure import MemoryProbe, add_comparison, cpu_snapshot
from kbtpsim.run.build import System, build, connect_all
from kbtpsim.run.driver import Driver
from kbtpsim.run.fidelity import contention, contention_warning
from kbtpsim.run.metrics import BusyProbe, Recorder, Sampler, cdf, summarise
from kbtpsim.run.observe import Observer
from kbtpsim.run.oracle import Divergence, check_oracle
from kbtpsim.scenario.schema import BASELINE_MODES, Scenario, SchemaRuleError, chain_design
from kbtpsim.setup_heap import SetupHeap
from kbtpsim.units import PS_PER_US

ProgressFn = Callable[[float], None]


@dataclass
class RunOutcome:
    results: dict[str, Any]
    timeseries: list[tuple[int, str, float]]
    divergences: list[Divergence] = field(default_factory=list)
    system: System | None = None


def run_scenario(sc: Scenario, *, oracle: bool = False,
                 progress: ProgressFn | None = None,
                 observer: Observer | None = None) -> RunOutcome:
    """Simulate ``sc``; the results dictionary is deterministic (no wall time).
    ``observer`` (trace, packet capture) sees the run without changing it; the caller
    closes it."""
    with SetupHeap() as heap:  # the set-up's objects frozen for the run (setup_heap.py)
        return _run(sc, oracle, progress, observer, heap)


def _run(sc: Scenario, oracle: bool, progress: ProgressFn | None,
         observer: Observer | None, heap: SetupHeap) -> RunOutcome:
    for i, tgt in enumerate(sc.targets if oracle else []):
        if tgt.mode in BASELINE_MODES:
            path = "target" if i == 0 else f"additional_targets[{i - 1}]"
            raise SchemaRuleError(f"{path}.mode", f"--oracle checks KBTP targets; mode "
                                  f"{tgt.mode} is a baseline (not KBTP)")
    tracer = observer.tracer if observer is not None else None
    system = build(sc, oracle=oracle, trace=tracer if tracer is not None else False)
    if observer is not None:
        observer.start(system)
    env = system.env
    heap.pause()
    connected = connect_all(system)  # an offloaded target posts its chains here
    heap.built()
    env.run(until=connected)
    t0 = int(env.now)
    warm = t0 + sc.stop.warmup
    stop = env.event()
    ops_goal = sc.stop.operations
    time_goal = sc.stop.time

    def report_ops(n: int) -> None:
        if progress is not None and ops_goal:
            progress(n / ops_goal)

    def report_time(t: int) -> None:
        if progress is not None and time_goal:
            progress(t / time_goal)

    recorder = Recorder(env, warm, ops_goal, stop,
                        report_ops if progress is not None and ops_goal else None)
    if observer is not None:
        observer.watch(recorder)
    busy = BusyProbe(system)
    busy.add_ports()
    sampler = Sampler(system, busy, sc.metrics.sample_interval, report_time)
    driver = Driver(system, recorder)
    memory = MemoryProbe(system, warm)
    driver.memory = memory
    driver.start()
    env.process(sampler.process(t0))
    env.process(memory.process(t0, sc.metrics.sample_interval, sampler.rows))
    marks: dict[str, dict[str, int]] = {}
    cpu_at_warm: dict[str, dict[str, float]] = {}
    served_at_warm: dict[str, int] = {}

    def at_warm() -> Any:
        if warm > env.now:
            yield env.timeout(warm - env.now)
        marks["warm"] = busy.snapshot()
        cpu_at_warm.update(cpu_snapshot(system))
        served_at_warm.update(nic_served(system))

    env.process(at_warm())
    if time_goal is not None:
        def timer() -> Any:
            yield env.timeout(time_goal)
            if not stop.triggered:
                stop.succeed("time")
        env.process(timer())

    def watchdog() -> Any:
        last = -1
        while True:
            yield env.timeout(sc.stop.stall)
            if stop.triggered:
                return
            if recorder.total == last or len(driver.lost) == len(system.initiators):
                stop.succeed("stalled")
                return
            last = recorder.total

    env.process(watchdog())
    env.run(until=stop)
    end = int(env.now)
    sampled = len(sampler.rows)  # the time series ends with the run, not the drain
    marks.setdefault("warm", busy.snapshot())
    util = busy.utilisation(marks["warm"], busy.snapshot(), end - warm)
    results = collect(sc, system, recorder, driver, sampler, util, t0, warm, end,
                      str(stop.value))
    add_comparison(results, sc, system, recorder, memory, cpu_at_warm)
    add_nic_served_cost(results, system, cpu_at_warm, served_at_warm)
    if sc.run.fidelity == "fast":  # only then: full-fidelity results stay as they were
        bursts, busy_bursts = contention(system.sim.nics)
        results["run"]["fidelity"] = {"level": "fast", "bursts": bursts,
                                      "contended_bursts": busy_bursts,
                                      "warning": contention_warning(system.sim.nics)}
    divergences: list[Divergence] = []
    if oracle:
        quiesce(system, driver, sc.stop.stall)
        divergences = check_oracle(system)
        results["oracle"] = {"checked": True, "divergences": len(divergences),
                             "first": [d.as_dict() for d in divergences[:20]]}
    if progress is not None:
        progress(1.0)
    return RunOutcome(results, sampler.rows[:sampled], divergences, system)


#: after the last request of a drained run completes, how long the targets get to notice
#: what their NICs served (CQ polls) before the oracle compares states
SETTLE_PS = 200 * PS_PER_US


def quiesce(system: System, driver: Driver, limit: int) -> None:
    """After the results are taken: stop issuing, let the requests in flight complete
    and the targets' CPUs catch up with their NICs, so the oracle compares a quiescent
    state (at most ``limit`` ps of simulated time: a hoarding initiator's tickets may
    never come back)."""
    env = system.env
    driver.drain()
    deadline = int(env.now) + limit
    step = 10 * PS_PER_US
    while int(env.now) < deadline and any(ini.outstanding for ini in
                                          system.initiators.values()):
        env.run(until=int(env.now) + step)
    env.run(until=int(env.now) + SETTLE_PS)


def collect(sc: Scenario, system: System, rec: Recorder, driver: Driver, sampler: Sampler,
            util: dict[str, float], t0: int, warm: int, end: int,
            reason: str) -> dict[str, Any]:
    measured_ps = max(1, end - warm)
    seconds = measured_ps / 1e12
    operations: dict[str, Any] = {}
    statuses: dict[str, dict[str, Any]] = {}
    ops = sorted({op for op, _ in rec.latencies})
    total_bytes = 0
    for op in ops:
        lat_all: list[int] = []
        by_status: dict[str, Any] = {}
        for (o, status), lats in sorted(rec.latencies.items()):
            if o != op:
                continue
            lat_all += lats
            by_status[status] = {"count": len(lats), "latency_ns": summarise(lats)}
        ok = by_status.get("OK", {}).get("count", 0)
        nbytes = rec.nbytes.get(op, 0)
        total_bytes += nbytes
        ok_lat = rec.latencies.get((op, "OK"), [])
        operations[op] = {
            "count": len(lat_all), "ok": ok,
            "ops_per_s": round(len(lat_all) / seconds, 3),
            "gb_per_s": round(nbytes / seconds / 1e9, 6), "bytes": nbytes,
            "latency_ns": summarise(lat_all), "ok_latency_ns": summarise(ok_lat),
            "cdf_ns": cdf(ok_lat or lat_all),
        }
        statuses[op] = by_status
    targets: dict[str, Any] = {}
    for name, server in system.servers.items():
        stats = server.target.stats()
        rings = []
        for r in stats.rings:
            key = f"{name}.ring.{r.name}.in_use"
            rings.append({"name": r.name, "slots": r.slots, "blocks": r.blocks,
                          "in_use_end": r.blocks - r.available,
                          "in_use_mean": round(sampler.ring_sum.get(key, 0.0)
                                               / max(1, sampler.samples), 3),
                          "in_use_peak": sampler.ring_peak.get(key, 0),
                          "head_ticket": r.head_ticket, "tail_ticket": r.tail_ticket,
                          "deferred_frees": r.deferred_frees})
        cpu = server.cpu
        served = getattr(server, "served", None)  # OffloadedTargetServer: NIC vs CPU
        spec = next(t for t in sc.targets if t.name == name)
        targets[name] = {
            "mode": spec.mode,
            # the chain design that ran (decision C14: the default follows the profile)
            "chains": chain_design(spec) if spec.mode == "offload" else None,
            "cpu": {"cores": cpu.cores, "utilisation": util.get(f"cpu.{name}", 0.0),
                    "per_op": {k: {kk: round(vv, 3) for kk, vv in v.items()}
                               for k, v in cpu.report().items()}},
            "nic": {k[len(f"nic.{name}."):]: v for k, v in util.items()
                    if k.startswith(f"nic.{name}.")},
            "ports": {k[len("port."):]: v for k, v in util.items()
                      if k.startswith("port.") and k[len("port."):].startswith(f"{name}<->")},
            "fallbacks": {"offload_to_software": None if served is None else sum(
                              c["cpu"] for op, c in served.items()
                              if op in ("LOAD", "STORE", "ALLOC_STORE")),
                          "served": None if served is None else {
                              op: dict(c) for op, c in sorted(served.items())},
                          # why the CPU served them; how many it took before their
                          # chain ended (kbtpsim.chains.dispatch)
                          "reasons": None if served is None else {
                              op: dict(sorted(r.items())) for op, r in
                              sorted(server.fallback_reasons.items())},
                          "before_chain": getattr(server, "before_chain", None),
                          "direct_load_to_load": sum(
                              n for ini, n in rec.direct_fallbacks.items()
                              if system.expanded[ini].target == name)},
            "rings": rings,
            "quotas": [{"initiator": q.initiator, "quota": q.quota, "usage_end": q.usage,
                        "usage_peak": sampler.quota_peak.get(
                            f"{name}.quota.{q.initiator}.usage", 0),
                        "bound": q.bound, "tickets": q.tickets}
                       for q in stats.quotas],
            "completions": {f"{op}/{st}": n for (op, st), n in sorted(stats.ops.items())},
            "internal_errors": len(server.target.internal_errors),
        }
        background = cpu.background_report(warm, end, util.get(f"cpu.{name}", 0.0))
        if background is not None:  # target.cpu.background > 0 (kbtpsim.system.contention)
            targets[name]["cpu"]["background"] = background
    initiators: dict[str, Any] = {}
    for name, ini in system.initiators.items():
        counts = rec.per_initiator.get(name, {})
        gen = driver.workloads[name]
        initiators[name] = {
            "target": system.expanded[name].target,
            "path": system.paths.get(name, []),
            "ops": sum(counts.values()), "statuses": dict(sorted(counts.items())),
            "dropped": driver.dropped.get(name, 0),
            "substituted": dict(sorted(getattr(gen, "skipped", {}).items())),
            "connection": driver.lost.get(name, "up"),
            "max_outstanding": ini.max_outstanding,
            "nic": {k[len(f"nic.{name}."):]: v for k, v in util.items()
                    if k.startswith(f"nic.{name}.") and k.endswith(("tx", "rx", "pcie.rd",
                                                                     "pcie.wr"))},
        }
    kv = {t: {"sequences_published": r.published, "sequences_live": len(r.sequences)}
          for t, r in driver.registries.items() if r.published}
    return {
        "kbtpsim_version": __version__,
        "scenario": sc.model_dump(mode="json"),
        "seed": sc.seed,
        "run": {"stop_reason": reason, "start_ps": t0, "warmup_ps": warm - t0,
                "end_ps": end - t0, "measured_ps": measured_ps,
                "operations_measured": rec.measured, "operations_total": rec.total},
        "throughput": {"ops_per_s": round(rec.measured / seconds, 3),
                       "gb_per_s": round(total_bytes / seconds / 1e9, 6)},
        "operations": operations,
        "statuses": statuses,
        "targets": targets,
        "initiators": initiators,
        "kvcache": kv,
    }


#: the CPU accounts of requests the NIC served (kbtpsim.chains.server: CHAIN, REFILL)
NIC_PATH_ACCOUNTS = ("CHAIN", "REFILL")


def nic_served(system: Any) -> dict[str, int]:
    """Requests each offloaded target's NIC has served so far."""
    out = {}
    for name, server in system.servers.items():
        served = getattr(server, "served", None)
        if served is not None:
            out[name] = sum(c.get("nic", 0) for c in served.values())
    return out


def add_nic_served_cost(results: dict[str, Any], system: Any,
                        cpu_at_warm: dict[str, dict[str, float]],
                        served_at_warm: dict[str, int]) -> None:
    """``targets.<name>.cpu.per_nic_served`` for offloaded targets: target CPU ns per
    NIC-served request in steady state (after the warm-up: HELLO's set-up of every
    credit is not in it), per account (``CHAIN``, ``REFILL``) and in ``total``."""
    after_cpu = cpu_snapshot(system)
    after = nic_served(system)
    for name, n_end in after.items():
        n = n_end - served_at_warm.get(name, 0)
        before = cpu_at_warm.get(name, {})
        per = {acc: (round((after_cpu[name].get(acc, 0.0) - before.get(acc, 0.0)) / n, 3)
                     if n else None) for acc in NIC_PATH_ACCOUNTS}
        per["total"] = (round(sum(v for v in per.values() if v is not None), 3)
                        if n else None)
        per["requests"] = n
        results["targets"][name]["cpu"]["per_nic_served"] = per

