"""The comparison table's Markdown tables (:mod:`kbtpsim.baselines.table`): the draft's
qualitative table (:data:`DRAFT`), the measured one per approach and per run, the
operations each run used, and the number formats they share.
"""

from __future__ import annotations

from typing import Any

from kbtpsim.baselines.table_runs import Approach, Row, load_level

#: The draft's table (its section "Comparison of Approaches").
DRAFT = [
    ("One-sided, static", "low", "no", "low"),
    ("One-sided, dynamic", "medium", "yes (allocation)", "medium"),
    ("Two-sided", "high", "yes", "high"),
    ("Target-executed block operations (this document)", "high (fine-grained blocks)",
     "not required per operation", "one round trip per operation"),
]


def _num(v: Any, fmt: str = "{:.0f}", none: str = "n/a") -> str:
    return none if v is None else fmt.format(v)


def _us(v: Any) -> str:
    return "n/a" if v is None else f"{v / 1000:.1f}"


def _pct(v: Any) -> str:
    return "n/a" if v is None else f"{v * 100:.1f}%"


def measured_table(rows: list[Row]) -> str:
    head = ("| run | outstanding | ops | memory utilisation | target CPU ns/op (all) | "
            "CPU ns/store | "
            "CPU ns/load | round trips store / load / free | store p50 / p99 (us) | "
            "load p50 / p99 (us) | throughput: store+load kops/s | GB/s |")
    lines = [head, "|" + "---|" * 12]
    for r in rows:
        rts = " / ".join(_num(r.get(k, "round_trips"), "{:.2f}") for k in
                         ("store", "load", "free"))
        tp = r.results.get("throughput", {})
        lines.append(
            f"| {r.name} | {load_level(r)} | "
            f"{r.results.get('run', {}).get('operations_measured')} | "
            f"{_pct(r.get('memory_utilisation'))} | "
            f"{_num(r.get('cpu_ns_per_op', 'all'))} | "
            f"{_num(r.get('cpu_ns_per_op', 'store'))} | "
            f"{_num(r.get('cpu_ns_per_op', 'load'))} | {rts} | "
            f"{_us(r.get('store', 'latency_p50_ns'))} / {_us(r.get('store', 'latency_p99_ns'))}"
            f" | {_us(r.get('load', 'latency_p50_ns'))} / "
            f"{_us(r.get('load', 'latency_p99_ns'))} | "
            f"{_num(_tput(r), '{:.1f}')} | "
            f"{_num(tp.get('gb_per_s'), '{:.2f}')} |")
    return "\n".join(lines)


def operations_line(r: Row) -> str:
    ops = " + ".join("/".join(r.get(k, "operations") or []) or "-"
                     for k in ("store", "load", "free"))
    return f"{r.name}: {ops}"


def draft_table() -> str:
    lines = ["| approach | memory utilisation | target CPU per operation | operation cost |",
             "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in DRAFT]
    return "\n".join(lines)


def _tput(r: Row) -> float | None:
    a, b = r.get("store", "ops_per_s"), r.get("load", "ops_per_s")
    if a is None and b is None:
        return None
    return ((a or 0) + (b or 0)) / 1e3


def approach_table(apps: list[Approach]) -> str:
    head = ("| approach | memory utilisation | target CPU ns/op: all (store / load / free) | "
            "round trips: store / load / free | store latency p50 / p99 (us) | "
            "load latency p50 / p99 (us) | throughput: store+load kops/s, GB/s |")
    lines = [head, "|" + "---|" * 7]
    for a in apps:
        h, lt = a.heavy, a.light
        cpu = (f"{_num(h.get('cpu_ns_per_op', 'all'))} ({_num(h.get('cpu_ns_per_op', 'store'))}"
               f" / {_num(h.get('cpu_ns_per_op', 'load'))} / "
               f"{_num(h.get('cpu_ns_per_op', 'free'))})")
        rts = " / ".join(_num(h.get(k, "round_trips"), "{:.2f}") for k in
                         ("store", "load", "free"))
        lines.append(
            f"| {a.name} | {_pct(h.get('memory_utilisation'))} | {cpu} | {rts} | "
            f"{_us(lt.get('store', 'latency_p50_ns'))} / {_us(lt.get('store', 'latency_p99_ns'))}"
            f" | {_us(lt.get('load', 'latency_p50_ns'))} / "
            f"{_us(lt.get('load', 'latency_p99_ns'))} | "
            f"{_num(_tput(h), '{:.1f}')}, "
            f"{_num(h.results.get('throughput', {}).get('gb_per_s'), '{:.2f}')} |")
    return "\n".join(lines)
