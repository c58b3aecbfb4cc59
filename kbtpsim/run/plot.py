"""``kbtpsim plot DIR... -o FIG.png``: figures from run and sweep directories.

Panels (those the inputs allow): latency CDFs per operation of each run directory;
throughput against the first swept parameter of each sweep directory; ring occupancy
over time of each run directory (from ``timeseries.csv``). matplotlib with the Agg
backend (no display needed).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from kbtpsim.run.results import RESULTS, TIMESERIES, read_results
from kbtpsim.scenario.schema import ops_rate
from kbtpsim.units import parse_size, parse_time


class PlotError(ValueError):
    """An input directory holds neither a run nor a sweep."""


def _numeric(values: list[Any]) -> list[float] | None:
    out = []
    for v in values:
        if isinstance(v, bool):
            return None
        if isinstance(v, int | float):
            out.append(float(v))
            continue
        for parse in (parse_size, parse_time, ops_rate):
            try:
                out.append(float(parse(v)))
                break
            except ValueError:
                continue
        else:
            return None
    return out


def _ring_series(path: Path) -> dict[str, tuple[list[float], list[float]]]:
    series: dict[str, tuple[list[float], list[float]]] = {}
    f = path / TIMESERIES
    if not f.exists():
        return series
    with f.open(encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if ".ring." in row["series"]:
                t, v = series.setdefault(row["series"], ([], []))
                t.append(float(row["time_ns"]) / 1000)
                v.append(float(row["value"]))
    return series


def plot(dirs: list[str | Path], out: str | Path) -> list[str]:
    """Write the figure; returns the panel titles drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    runs: list[tuple[str, Path, dict[str, Any]]] = []
    sweeps: list[tuple[str, dict[str, Any]]] = []
    for d in dirs:
        p = Path(d)
        if (p / RESULTS).exists():
            runs.append((p.name, p, read_results(p)))
        elif (p / "sweep.json").exists():
            sweeps.append((p.name, json.loads((p / "sweep.json").read_text("utf-8"))))
        else:
            raise PlotError(f"{p}: neither results.json nor sweep.json found")
    panels = []
    if runs:
        panels += ["latency CDF", "ring occupancy"]
    panels += [f"throughput ({label})" for label, _sw in sweeps]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    ax_of = dict(zip(panels, axes[0], strict=True))
    if runs:
        _plot_cdfs(ax_of["latency CDF"], runs, LogLocator, NullFormatter, ScalarFormatter)
        _plot_rings(ax_of["ring occupancy"], runs)
    for label, sw in sweeps:
        _plot_sweep(ax_of[f"throughput ({label})"], label, sw)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return panels


def _plot_cdfs(ax: Any, runs: list[tuple[str, Path, dict[str, Any]]], locator: Any,
               null: Any, scalar: Any) -> None:
    for label, _p, res in runs:
        for op, v in sorted(res["operations"].items()):
            pts = v.get("cdf_ns") or []
            if pts:
                ax.plot([x / 1000 for x, _ in pts], [q for _, q in pts],
                        label=f"{label} {op}" if len(runs) > 1 else op)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(locator(subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(scalar())
    ax.xaxis.set_minor_formatter(null())
    ax.set_xlabel("latency (us)")
    ax.set_ylabel("fraction of operations")
    ax.set_title("latency CDF (OK completions)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)


def _plot_rings(ax: Any, runs: list[tuple[str, Path, dict[str, Any]]]) -> None:
    for label, p, _res in runs:
        for name, (t, v) in sorted(_ring_series(p).items()):
            short = name.replace(".in_use", "")
            ax.plot(t, v, label=f"{label} {short}" if len(runs) > 1 else short)
    ax.set_xlabel("simulated time (us)")
    ax.set_ylabel("blocks in use")
    ax.set_title("ring occupancy")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)


def _plot_sweep(ax: Any, label: str, sw: dict[str, Any]) -> None:
    """Throughput against the first swept parameter, one line per combination of the
    others."""
    params = sw.get("parameters") or []
    rows = [r for r in sw["rows"] if "error" not in r]
    ax.set_title(f"throughput: {label}")
    ax.set_ylabel("throughput (kops/s)")
    ax.grid(True, alpha=0.3)
    if not params or not rows:
        return
    x_name, others = params[0], params[1:]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(o) for o in others), []).append(r)
    for gkey, grows in groups.items():
        xs_raw = [r[x_name] for r in grows]
        xs = _numeric(xs_raw)
        ys = [r["ops_per_s"] / 1e3 for r in grows]
        name = ", ".join(f"{o}={v}" for o, v in zip(others, gkey, strict=True)) or label
        if xs is not None:
            order = sorted(range(len(xs)), key=xs.__getitem__)
            ax.plot([xs[i] for i in order], [ys[i] for i in order], "o-", label=name)
            if min(xs) > 0 and max(xs) / min(xs) >= 16:
                ax.set_xscale("log", base=2)
        else:
            ax.plot([str(x) for x in xs_raw], ys, "o-", label=name)
    ax.set_xlabel(x_name)
    ax.legend(fontsize=7)
