"""Helpers for the evaluation notebooks (``notebooks/*.ipynb``, ``docs/results.md``).

A notebook runs one study: a sweep file of ``scenarios/`` (:func:`run_study`, resumable,
with reduced sizes when :func:`quick_mode` is on), turns its points into flat rows
(:func:`load_sweep_dir`, :func:`flatten`), and draws them in the common style
(:func:`figure`, :func:`save_figure`)::

    from kbtpsim import analysis

    study = analysis.Study("block-size")          # paths of results and figure
    rows = analysis.run_study("scenarios/sweep-block-size.yaml", study.results,
                              parameters={"target.block_size": ["4KiB", "64KiB"]})
    xs, ys = analysis.series(rows, "target.block_size", "LOAD.p50_us")

``KBTPSIM_NOTEBOOK_QUICK=1`` selects the reduced sizes (the notebook tests set it; the
figures under ``docs/results/`` come from full-size runs). ``KBTPSIM_NOTEBOOK_RESULTS``
moves the results directories (default ``results/notebooks``, ``results/notebooks-quick``
in quick mode, relative to the repository root).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

QUICK_ENV = "KBTPSIM_NOTEBOOK_QUICK"
RESULTS_ENV = "KBTPSIM_NOTEBOOK_RESULTS"
LATENCY_KEYS = ("mean", "p50", "p90", "p99", "p99.9", "max")

Row = dict[str, Any]


class SweepFailed(RuntimeError):
    """Some points of a study failed; ``errors`` holds each failed point's message."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__(f"{len(errors)} sweep point(s) failed; first: {errors[0]}")
        self.errors = errors


# ------------------------------------------------------------------------- where things go
def quick_mode() -> bool:
    """True when ``KBTPSIM_NOTEBOOK_QUICK`` is set to anything but ``""``/``0``/``false``."""
    return os.environ.get(QUICK_ENV, "").strip().lower() not in ("", "0", "false", "no")


def repo_root(start: str | Path | None = None) -> Path:
    """The repository root: the first of ``start`` (default the working directory) and its
    parents holding ``pyproject.toml`` and ``scenarios/``."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").is_file() and (d / "scenarios").is_dir():
            return d
    raise FileNotFoundError(f"no kbtpsim repository root at or above {here}")


@dataclass(frozen=True)
class Study:
    """Where a study's sweep results and figure go.

    ``results``: ``<results root>/<name>`` (not committed); ``figure``:
    ``docs/results/<name>.png`` for a full-size run, next to the results in quick mode
    (so test runs never touch the committed figures).
    """

    name: str
    root: Path
    results: Path
    figure: Path
    quick: bool

    def __init__(self, name: str, root: str | Path | None = None,
                 quick: bool | None = None) -> None:
        base = repo_root(root)
        q = quick_mode() if quick is None else quick
        env = os.environ.get(RESULTS_ENV)
        top = Path(env) if env else base / "results" / ("notebooks-quick" if q else "notebooks")
        if not top.is_absolute():
            top = base / top
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "root", base)
        object.__setattr__(self, "quick", q)
        object.__setattr__(self, "results", top / name)
        fig = (top / f"{name}.png") if q else (base / "docs" / "results" / f"{name}.png")
        object.__setattr__(self, "figure", fig)


# ---------------------------------------------------------------------------- running
def run_study(sweep: str | Path, out: str | Path, *,
              parameters: Mapping[str, Sequence[Any]] | None = None,
              overrides: Mapping[str, Any] | None = None, jobs: int = 2,
              log: Callable[[str], None] | None = print) -> list[Row]:
    """Run the sweep file ``sweep`` into ``out`` and return its rows (:func:`load_sweep_dir`).

    ``parameters`` replaces the value lists of swept keys (or adds keys, swept after the
    file's own); ``overrides`` is applied to every point (like ``kbtpsim sweep --set``).
    The sweep actually run is written to ``out/study.yaml``. Finished points are reused
    (``kbtpsim sweep`` is resumable: same resolved scenario, same point directory), so
    ``kbtpsim sweep SWEEP -o OUT`` and a notebook with the same sizes share their points.
    Raises :class:`SweepFailed` when a point failed.
    """
    from kbtpsim.run.sweep import load_sweep, run_sweep
    from kbtpsim.scenario.load import read_yaml

    src = Path(sweep)
    spec = read_yaml(src)
    if isinstance(spec.get("base"), str):
        spec["base"] = str((src.parent / spec["base"]).resolve())
    params = dict(spec.get("parameters") or {})
    for key, values in (parameters or {}).items():
        params[key] = list(values)
    spec["parameters"] = params
    if overrides:
        spec["set"] = {**(spec.get("set") or {}), **dict(overrides)}
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    derived = out_dir / "study.yaml"
    derived.write_text(f"# derived from {src}\n" + yaml.safe_dump(spec, sort_keys=False),
                       encoding="utf-8")
    points = load_sweep(derived)
    total = len(points)
    count = [0]

    def on_done(pt: Any, reused: bool, error: str | None) -> None:
        count[0] += 1
        if log is not None:
            values = ", ".join(f"{k}={v}" for k, v in pt.values.items())
            what = "failed" if error else "reused" if reused else "done"
            log(f"[{count[0]}/{total}] {what}: {values}" + (f": {error}" if error else ""))

    rows = run_sweep(points, out_dir, jobs=jobs, on_done=on_done)
    errors = [f"{r['key']}: {r['error']}" for r in rows if "error" in r]
    if errors:
        raise SweepFailed(errors)
    return load_sweep_dir(out_dir)


def offload_available() -> bool:
    """Whether ``target.mode: offload`` runs: a four-operation offloaded run completes
    (False when the runner raises ``OffloadUnavailable``; any other failure is raised)."""
    from kbtpsim.run.runner import run_scenario
    from kbtpsim.scenario.load import scenario_from_dict

    sc = scenario_from_dict({
        "target": {"mode": "offload", "blocks": 16, "block_size": "4KiB"},
        "initiators": [{"handles": 16, "workload": {"window": 1}}],
        "stop": {"operations": 4}})
    try:
        run_scenario(sc)
    except Exception as exc:
        if type(exc).__name__ == "OffloadUnavailable":
            return False
        raise
    return True


# ---------------------------------------------------------------------------- loading
def flatten(results: Mapping[str, Any]) -> Row:
    """The headline numbers of one ``results.json`` as a flat mapping.

    Keys: ``ops_per_s``, ``gb_per_s``, ``operations_measured``, ``measured_us``,
    ``stop_reason``, ``mode`` (of the first target), ``initiators`` (hosts);
    per operation ``<OP>.count|ok|ops_per_s|gb_per_s`` and ``<OP>.<q>_us`` for q in mean,
    p50, p90, p99, p99.9, max (all completions); per target ``<t>.cpu`` (utilisation),
    ``<t>.cpu.<ACCOUNT>_ns`` (CPU time per operation of the account) and
    ``<t>.cpu.<ACCOUNT>_busy_ns`` (its total, whole run), ``<t>.nic.<unit>``,
    ``<t>.port.<direction>`` (utilisation), ``<t>.rings.in_use_peak|in_use_mean|
    deferred_frees|head_ticket`` (summed over rings), ``<t>.offload_to_software`` and
    ``<t>.served.<OP>.nic|cpu`` when the target reports them.
    """
    run = results.get("run", {})
    tp = results.get("throughput", {})
    targets = results.get("targets", {})
    row: Row = {
        "ops_per_s": tp.get("ops_per_s"),
        "gb_per_s": tp.get("gb_per_s"),
        "operations_measured": run.get("operations_measured"),
        "measured_us": run["measured_ps"] / 1e6 if "measured_ps" in run else None,
        "stop_reason": run.get("stop_reason"),
        "initiators": len(results.get("initiators", {})),
    }
    first: Mapping[str, Any] = next(iter(targets.values()), {})
    row["mode"] = first.get("mode")
    for op, v in sorted(results.get("operations", {}).items()):
        for k in ("count", "ok", "ops_per_s", "gb_per_s"):
            row[f"{op}.{k}"] = v.get(k)
        lat = v.get("latency_ns", {})
        for q in LATENCY_KEYS:
            if lat.get(q) is not None:
                row[f"{op}.{q}_us"] = lat[q] / 1000
    for name, t in sorted(targets.items()):
        cpu = t.get("cpu", {})
        row[f"{name}.cpu"] = cpu.get("utilisation")
        for account, per in sorted(cpu.get("per_op", {}).items()):
            row[f"{name}.cpu.{account}_ns"] = per.get("per_op_ns")
            row[f"{name}.cpu.{account}_busy_ns"] = per.get("busy_ns")
        for unit, u in sorted(t.get("nic", {}).items()):
            row[f"{name}.nic.{unit}"] = u
        for port, u in sorted(t.get("ports", {}).items()):
            row[f"{name}.port.{port.rsplit('.', 1)[-1]}"] = u
        rings = t.get("rings", [])
        for k in ("in_use_peak", "in_use_mean", "deferred_frees", "head_ticket"):
            row[f"{name}.rings.{k}"] = sum(r.get(k) or 0 for r in rings)
        fb = t.get("fallbacks", {})
        row[f"{name}.offload_to_software"] = fb.get("offload_to_software")
        for op, where in sorted((fb.get("served") or {}).items()):
            for k, n in sorted(where.items()):
                row[f"{name}.served.{op}.{k}"] = n
    return row


def load_sweep_dir(path: str | Path) -> list[Row]:
    """One row per point of a sweep directory (``kbtpsim sweep -o``), in sweep order: the
    swept values as written (``target.block_size: "4KiB"``), ``key``, ``dir`` (the point's
    directory) and :func:`flatten` of its ``results.json``. Failed points have ``error``.
    """
    d = Path(path)
    index = json.loads((d / "sweep.json").read_text(encoding="utf-8"))
    rows: list[Row] = []
    for r in index["rows"]:
        point = d / "points" / r["key"]
        row: Row = {p: r.get(p) for p in index.get("parameters", [])}
        row["key"] = r["key"]
        row["dir"] = str(point)
        if "error" in r:
            row["error"] = r["error"]
        elif (point / "results.json").exists():
            row.update(flatten(json.loads((point / "results.json").read_text("utf-8"))))
        rows.append(row)
    return rows


def read_timeseries(point: str | Path, contains: str = "") -> dict[str, tuple[list[float],
                                                                           list[float]]]:
    """The series of a run directory's ``timeseries.csv`` whose name contains ``contains``:
    name -> (times in us, values)."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    f = Path(point) / "timeseries.csv"
    with f.open(encoding="utf-8") as fh:
        for rec in csv.DictReader(fh):
            if contains in rec["series"]:
                t, v = out.setdefault(rec["series"], ([], []))
                t.append(float(rec["time_ns"]) / 1000)
                v.append(float(rec["value"]))
    return out


# ---------------------------------------------------------------------------- tables
def as_number(value: Any) -> float:
    """A swept value as a number: sizes in octets, times in ps, rates per second."""
    from kbtpsim.scenario.schema import ops_rate
    from kbtpsim.units import parse_size, parse_time

    if isinstance(value, bool):
        raise ValueError(f"not a number: {value!r}")
    if isinstance(value, int | float):
        return float(value)
    for parse in (parse_size, parse_time, ops_rate):
        try:
            return float(parse(value))
        except ValueError:
            continue
    raise ValueError(f"not a number, size, time or rate: {value!r}")


def label(value: Any) -> str:
    """A short legend label for a swept value (``{}`` is ``"all on"``;
    ``{wait_enable: false}`` is ``"wait_enable off"``)."""
    if isinstance(value, Mapping):
        if not value:
            return "all on"
        return ", ".join(f"{k} off" if v is False else f"{k} on" if v is True else f"{k}={v}"
                         for k, v in value.items())
    return str(value)


def select(rows: Iterable[Row], **where: Any) -> list[Row]:
    """The rows whose keys equal the given values (``select(rows, mode="offload")``;
    dotted keys through a mapping: ``select(rows, **{"target.rings": "shared"})``)."""
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def series(rows: Iterable[Row], x: str, y: str) -> tuple[list[float], list[float]]:
    """(x, y) of the rows that have both, sorted by x; x parsed by :func:`as_number`."""
    pts = sorted((as_number(r[x]), float(r[y])) for r in rows
                 if r.get(x) is not None and r.get(y) is not None)
    return [p[0] for p in pts], [p[1] for p in pts]


def group(rows: Iterable[Row], key: str) -> dict[Any, list[Row]]:
    """Rows grouped by the value of ``key`` (first-seen order; unhashable values by label)."""
    out: dict[Any, list[Row]] = {}
    for r in rows:
        v = r.get(key)
        out.setdefault(v if isinstance(v, str | int | float | bool | None) else label(v),
                       []).append(r)
    return out


def markdown_table(rows: Iterable[Row], columns: Sequence[str],
                   formats: Mapping[str, str] | None = None) -> str:
    """A Markdown table of ``columns`` (``formats``: column -> format spec, e.g. ``".1f"``)."""
    fmts = formats or {}
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        cells = []
        for c in columns:
            v = r.get(c)
            cells.append("-" if v is None else format(v, fmts[c]) if c in fmts else label(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- figures
STYLE: dict[str, Any] = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "lines.markersize": 4,
}


def figure(ncols: int = 1, nrows: int = 1, *, width: float = 4.6,
           height: float = 3.4) -> tuple[Any, Any]:
    """A matplotlib figure (Agg backend) in the common style; axes always 2-D."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rc: Any = plt.rcParams
    rc.update(STYLE)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows),
                             squeeze=False)
    return fig, axes


def log2_size_axis(ax: Any, values: Sequence[float]) -> None:
    """Log-2 x axis labelled with sizes (``4KiB``, ``1MiB``) at ``values`` (octets)."""
    from kbtpsim.units import format_size

    ax.set_xscale("log", base=2)
    ax.set_xticks(list(values))
    ax.set_xticklabels([format_size(int(v)) for v in values])
    ax.minorticks_off()


def save_figure(fig: Any, path: str | Path, *, suptitle: str | None = None) -> Path:
    """Lay out, save as PNG (parent directories created) and close ``fig``."""
    import matplotlib.pyplot as plt

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if suptitle:
        fig.suptitle(suptitle)
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p
