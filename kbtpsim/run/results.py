"""Result files of a run, and the summary table.

``DIR/results.json``: deterministic (same scenario and seed, same bytes);
``DIR/timeseries.csv``: ``time_ns,series,value`` rows of the periodic sampler;
``DIR/run.json``: what is not deterministic (wall time, host, command line).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

RESULTS = "results.json"
TIMESERIES = "timeseries.csv"
RUN_INFO = "run.json"
#: an offloaded run whose NIC serves less than this share of the requests that have
#: chains (LOAD, STORE, ALLOC_STORE) says so in its summary
OFFLOAD_WARN_SHARE = 0.5


def dumps(results: dict[str, Any]) -> str:
    return json.dumps(results, indent=1, sort_keys=True, allow_nan=False) + "\n"


def write_results(out_dir: str | Path, results: dict[str, Any],
                  timeseries: list[tuple[int, str, float]], run_info: dict[str, Any]) -> None:
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / RESULTS).write_text(dumps(results), encoding="utf-8")
    with (d / TIMESERIES).open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["time_ns", "series", "value"])
        for t, series, value in timeseries:
            w.writerow([f"{t / 1000:.3f}", series, value])
    (d / RUN_INFO).write_text(json.dumps(run_info, indent=1, sort_keys=True) + "\n",
                              encoding="utf-8")


def read_results(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / RESULTS
    data: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
    return data


def _fmt_ns(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1e6:
        return f"{value / 1e6:.2f}ms"
    if value >= 1e3:
        return f"{value / 1e3:.2f}us"
    return f"{value:.0f}ns"


def _pct(share: float) -> str:
    """A share as a percentage, with the digits a small one needs ("0.14%", not "0%")."""
    if share == 0 or share >= 0.1:
        return f"{share * 100:.0f}%"
    return f"{share * 100:.2f}%" if share < 0.01 else f"{share * 100:.1f}%"


def summary_table(results: dict[str, Any]) -> str:
    """A plain-text table: per operation count, OK, rate, latency min/mean/stdev and
    p50/p90/p99/p99.9."""
    run = results["run"]
    lines = [f"scenario {results['scenario']['name']!r} seed {results['seed']}: "
             f"{run['operations_measured']} operations measured over "
             f"{run['measured_ps'] / 1e6:.1f} us simulated (stop: {run['stop_reason']})"]
    stats = ("min", "mean", "stdev", "p50", "p90", "p99", "p99.9")
    head = f"{'operation':<14}{'count':>8}{'ok':>8}{'kops/s':>10}{'GB/s':>8}" \
           + "".join(f"{q:>10}" for q in stats)
    lines += [head, "-" * len(head)]
    for op, v in sorted(results["operations"].items()):
        lat = v["latency_ns"]
        lines.append(f"{op:<14}{v['count']:>8}{v['ok']:>8}{v['ops_per_s'] / 1e3:>10.1f}"
                     f"{v['gb_per_s']:>8.2f}"
                     + "".join(f"{_fmt_ns(lat.get(q)):>10}" for q in stats))
    tp = results["throughput"]
    lines.append(f"{'total':<14}{run['operations_measured']:>8}{'':>8}"
                 f"{tp['ops_per_s'] / 1e3:>10.1f}{tp['gb_per_s']:>8.2f}")
    for name, t in results["targets"].items():
        cpu = t["cpu"]
        who = "target" if name == "target" else f"target {name}"
        per = ", ".join(f"{k} {v['per_op_ns']:.0f}ns" for k, v in cpu["per_op"].items()
                        if k in ("LOAD", "STORE", "ALLOC_STORE", "FREE", "BIND"))
        rings = ", ".join(f"{r['name']} peak {r['in_use_peak']}/{r['blocks']}"
                          for r in t["rings"])
        bg = cpu.get("background")  # target.cpu.background > 0
        lines.append(f"{who}: CPU {_pct(cpu['utilisation'])} of "
                     f"{cpu['cores']} core(s) after the warm-up"
                     + (f" ({per})" if per else "")
                     + (f", background work {_pct(bg['share'])}" if bg else "")
                     + (f"; rings: {rings}" if rings else ""))
        mem = t.get("memory")
        if mem:
            util = mem.get("utilisation")
            lines.append(f"{who}: KV data held {mem['held_bytes_end'] / 2**20:.1f} MiB"
                         f" / reserved {mem['reserved_bytes_end'] / 2**20:.1f} MiB at the end; "
                         "utilisation " + (
                             "n/a (no FREE completed before the last sample)" if util is None
                             else f"{util * 100:.1f}% (steady state)"))
        nic = t["nic"]
        ports = ", ".join(f"{k} {v * 100:.0f}%" for k, v in sorted(t["ports"].items()))
        lines.append(f"{who}: PCIe host->NIC {nic.get('pcie.rd', 0) * 100:.0f}%, "
                     f"NIC->host {nic.get('pcie.wr', 0) * 100:.0f}%; port {ports}")
        served = (t.get("fallbacks") or {}).get("served")
        if served is not None:  # offload mode: who served what (whole run)
            by_op = ", ".join(f"{op} {c['nic']}/{c['nic'] + c['cpu']}"
                              for op, c in served.items()
                              if op in ("LOAD", "STORE", "ALLOC_STORE", "FREE"))
            refill = cpu["per_op"].get("REFILL", {})
            steady = cpu.get("per_nic_served") or {}
            lines.append(f"{who}: NIC served {by_op or 'nothing'} (whole run, warm-up "
                         f"included); CPU re-posting "
                         f"{refill.get('per_op_ns', 0) / 1000:.2f}us per chain "
                         f"({refill.get('ops', 0):.0f} chains)"
                         + (f"; CPU per NIC-served request after the warm-up "
                            f"{steady['total']:.0f}ns" if steady.get("total") is not None
                            else ""))
            fast = [c for op, c in served.items() if op in ("LOAD", "STORE", "ALLOC_STORE")]
            total = sum(c["nic"] + c["cpu"] for c in fast)
            nic_n = sum(c["nic"] for c in fast)
            if total and nic_n < OFFLOAD_WARN_SHARE * total:
                lines.append(f"{who}: warning: the NIC served only {nic_n} of {total} LOAD, "
                             "STORE and ALLOC_STORE requests (the chains serve whole blocks "
                             "only; `kbtpsim chains explain OP --nic PROFILE` says what a "
                             "profile offloads)")
    bad = {st: n for v in results["statuses"].values() for st, n in
           ((s, d["count"]) for s, d in v.items()) if st != "OK"}
    if bad:
        lines.append("non-OK statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(
            bad.items())))
    if "oracle" in results:
        lines.append(f"oracle: {results['oracle']['divergences']} divergence(s)")
    return "\n".join(lines)
