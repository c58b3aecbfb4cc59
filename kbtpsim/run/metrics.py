"""Probes: a latency recorder per operation and status, and a periodic sampler.

The models know nothing of these: the :class:`Recorder` is fed by the workload driver
(which issues the requests), the :class:`Sampler` reads the components' own counters
(ring and quota snapshots of each target, the busy time of NIC units, PCIe, links and
CPU cores) every ``sample_interval``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from kbtpsim.run.build import System

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}
#: quantiles of the stored latency CDFs (for plots)
CDF_QUANTILES = [q / 100 for q in range(0, 100)] + [0.995, 0.999, 0.9999, 1.0]


def summarise(latencies_ps: list[int]) -> dict[str, float]:
    """Min, mean, sample standard deviation, percentiles and max of latencies, in ns."""
    if not latencies_ps:
        return {}
    arr = np.asarray(latencies_ps, dtype=float) / 1000.0
    out = {"min": round(float(arr.min()), 3), "mean": round(float(arr.mean()), 3),
           "stdev": round(float(arr.std(ddof=1)), 3) if arr.size > 1 else 0.0}
    for name, q in PERCENTILES.items():
        out[name] = round(float(np.percentile(arr, q)), 3)
    out["max"] = round(float(arr.max()), 3)
    return out


def cdf(latencies_ps: list[int]) -> list[list[float]]:
    if not latencies_ps:
        return []
    arr = np.asarray(latencies_ps, dtype=float) / 1000.0
    return [[round(float(v), 3), q] for v, q in
            zip(np.quantile(arr, CDF_QUANTILES), CDF_QUANTILES, strict=True)]


@dataclass
class Recorder:
    """Completed operations, counted from ``start_ps`` (the end of the warm-up)."""

    env: simpy.Environment
    start_ps: int
    target_ops: int | None
    stop: simpy.Event
    on_progress: Callable[[int], None] | None = None
    latencies: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)
    per_initiator: dict[str, dict[str, int]] = field(default_factory=dict)
    measured: int = 0
    total: int = 0
    direct_fallbacks: dict[str, int] = field(default_factory=dict)  #: by initiator
    #: op -> (sum of round trips, operations counted): measured OK operations
    round_trips: dict[str, tuple[int, int]] = field(default_factory=dict)

    def record(self, initiator: str, op: str, status: str, posted: int, nbytes: int,
               fallback: bool = False, round_trips: int | None = None) -> None:
        now = int(self.env.now)
        self.total += 1
        if posted < self.start_ps or self.stop.triggered:
            return
        self.measured += 1
        self.latencies.setdefault((op, status), []).append(now - posted)
        if status == "OK":
            self.nbytes[op] = self.nbytes.get(op, 0) + nbytes
        mine = self.per_initiator.setdefault(initiator, {})
        mine[status] = mine.get(status, 0) + 1
        if fallback:
            self.direct_fallbacks[initiator] = self.direct_fallbacks.get(initiator, 0) + 1
        if round_trips is not None:
            s, n = self.round_trips.get(op, (0, 0))
            self.round_trips[op] = (s + round_trips, n + 1)
        if self.on_progress is not None:
            self.on_progress(self.measured)
        if self.target_ops is not None and self.measured >= self.target_ops:
            self.stop.succeed("operations")


def _units(nic: Any) -> dict[str, Any]:
    return {"doorbell": nic.doorbell_unit, "wqe_fetch": nic.fetch_unit,
            "decode": nic.decode_unit, "tx": nic.tx_unit, "rx": nic.rx_unit,
            "atomic": nic.atomic_unit, "completion": nic.cqe_unit,
            "pcie.rd": nic.pcie.rd, "pcie.wr": nic.pcie.wr}


class BusyProbe:
    """Utilisation of every NIC unit, PCIe direction, target port and CPU between two
    snapshots (busy time / (capacity x elapsed), capped at 1)."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.items: dict[str, tuple[Any, int]] = {}
        for name, nic in system.sim.nics.items():
            for uname, unit in _units(nic).items():
                self.items[f"nic.{name}.{uname}"] = (unit, unit.capacity)
        for name, server in system.servers.items():
            self.items[f"cpu.{name}"] = (server.cpu, server.cpu.cores)

    def add_ports(self) -> None:
        for pname, port in self.system.ports.items():
            self.items[f"port.{pname}.egress"] = (port.egress, 1)
            self.items[f"port.{pname}.ingress"] = (port.ingress, 1)

    def snapshot(self) -> dict[str, int]:
        out = {}
        for key, (obj, _cap) in self.items.items():
            out[key] = round(obj.busy_ns() * 1000) if key.startswith("cpu.") else obj.busy_ps
        return out

    def busy_of(self, keys: list[str]) -> list[int]:
        """Busy time (ps) of ``keys`` now, as :meth:`snapshot` gives it."""
        items = self.items
        out = []
        for key in keys:
            obj = items[key][0]
            out.append(round(obj.busy_ns() * 1000) if key.startswith("cpu.") else obj.busy_ps)
        return out

    def utilisation(self, before: dict[str, int], after: dict[str, int],
                    elapsed_ps: int) -> dict[str, float]:
        out = {}
        for key, (_obj, cap) in self.items.items():
            if elapsed_ps <= 0:
                out[key] = 0.0
                continue
            busy = after.get(key, 0) - before.get(key, 0)
            out[key] = round(min(1.0, busy / (cap * elapsed_ps)), 6)
        return out


class Sampler:
    """Every ``interval`` ps: ring occupancy and quota use of each target, outstanding
    requests of each initiator, and utilisation over the interval. Rows are
    ``(time_ps, series, value)``."""

    def __init__(self, system: System, busy: BusyProbe, interval: int,
                 tick: Callable[[int], None] | None = None) -> None:
        self.system = system
        self.busy = busy
        self.interval = interval
        self.tick = tick
        self.rows: list[tuple[int, str, float]] = []
        self.ring_peak: dict[str, int] = {}
        self.ring_sum: dict[str, float] = {}
        self.quota_peak: dict[str, int] = {}
        self.samples = 0
        self.target_nics = tuple(f"nic.{name}." for name in system.servers)

    def sample_state(self, now: int, t0: int) -> None:
        rows = self.rows
        t = now - t0
        for tname, server in self.system.servers.items():
            stats = server.target.stats()
            for r in stats.rings:
                in_use = r.blocks - r.available
                key = f"{tname}.ring.{r.name}.in_use"
                rows.append((t, key, in_use))
                self.ring_peak[key] = max(self.ring_peak.get(key, 0), in_use)
                self.ring_sum[key] = self.ring_sum.get(key, 0.0) + in_use
            for q in stats.quotas:
                key = f"{tname}.quota.{q.initiator}.usage"
                rows.append((t, key, q.usage))
                self.quota_peak[key] = max(self.quota_peak.get(key, 0), q.usage)
        for name, ini in self.system.initiators.items():
            rows.append((t, f"{name}.outstanding", ini.outstanding))
        self.samples += 1

    def sampled_keys(self) -> list[str]:
        """The utilisation series of the time series (CPUs, ports, the targets' NIC
        transmit, receive and PCIe), in :attr:`BusyProbe.items` order."""
        return [key for key in self.busy.items
                if key.startswith(("cpu.", "port.")) or (
                    key.startswith(self.target_nics)
                    and key.endswith(("pcie.rd", "pcie.wr", ".tx", ".rx")))]

    def process(self, t0: int) -> Generator[simpy.Event, Any, None]:
        env = self.system.env
        keys = self.sampled_keys()
        series = [f"util.{key}" for key in keys]
        caps = [self.busy.items[key][1] for key in keys]
        interval = self.interval
        before = self.busy.busy_of(keys)
        while True:
            yield env.timeout(interval)
            now = int(env.now)
            self.sample_state(now, t0)
            after = self.busy.busy_of(keys)
            t = now - t0
            rows = self.rows
            for name, cap, b0, b1 in zip(series, caps, before, after, strict=True):
                # as BusyProbe.utilisation computes it
                rows.append((t, name, round(min(1.0, (b1 - b0) / (cap * interval)), 6)
                             if interval > 0 else 0.0))
            before = after
            if self.tick is not None:
                self.tick(now - t0)
