"""The runs whose results are pinned (tests/run/test_results_pinned.py).

Each case is a committed scenario at a reduced but meaningful size with its own seed:
the software quickstart, the offloaded quickstart (chains on an ideal-be NIC), a
baseline (two-sided RPC) and large blocks (512 KiB, 128 packets of 4 KiB each). The
pinned text is ``results.json`` without its echo of the input (``scenario``, which
grows when the schema gains a key, and ``kbtpsim_version``): every simulated figure,
byte for byte. The time series is pinned by its SHA-256.

Regenerate after an intended model change (and list what changed)::

    python -m tests.run.regen_golden          # rewrite tests/run/golden/*, list changes
    python -m tests.run.regen_golden --check  # only list what differs
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbtpsim.run.results import dumps
from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario.load import load_scenario

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
#: keys of results.json that echo the input rather than report the run
ECHO = ("scenario", "kbtpsim_version")


@dataclass(frozen=True)
class Case:
    name: str
    scenario: str
    overrides: tuple[str, ...]


CASES = (
    Case("quickstart", "scenarios/quickstart.yaml", ("stop.operations=1500",)),
    Case("quickstart-offload", "scenarios/quickstart-offload.yaml",
         ("stop.operations=200",)),
    Case("two-sided", "scenarios/quickstart.yaml",
         ("stop.operations=1000", "target.mode=two_sided")),
    Case("block-512k", "scenarios/eval-block-size.yaml",
         ("stop.operations=150", "target.block_size=512KiB")),
    # FREE on the NIC (decision C20): the LOADs' reader counts, Tail tickets via the NIC
    Case("free-on-nic", "scenarios/eval-cx5-load-heavy.yaml",
         ("stop.operations=200", "target.nic.profile=ideal-be",
          "initiators[0].nic.profile=ideal-be", "target.operations={free: offload}")),
)


def pinned(results: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in results.items() if k not in ECHO}


def timeseries_digest(rows: list[tuple[int, str, float]]) -> str:
    """SHA-256 of timeseries.csv as kbtpsim.run.results.write_results writes it."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["time_ns", "series", "value"])
    for t, series, value in rows:
        w.writerow([f"{t / 1000:.3f}", series, value])
    return hashlib.sha256(buf.getvalue().encode()).hexdigest()


def run_case(case: Case, **kwargs: Any) -> tuple[str, str]:
    """(pinned results text, timeseries digest) of one case run now."""
    sc = load_scenario(REPO / case.scenario, case.overrides)
    out = run_scenario(sc, **kwargs)
    return dumps(pinned(out.results)), timeseries_digest(out.timeseries)


def golden_paths(case: Case) -> tuple[Path, Path]:
    return GOLDEN / f"{case.name}.results.json", GOLDEN / f"{case.name}.timeseries.sha256"


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of a JSON value by dotted path (lists by index)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def changed_figures(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One line per leaf that differs: ``path: old -> new``."""
    a, b = flatten(old), flatten(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            lines.append(f"{key}: {a.get(key, '<absent>')} -> {b.get(key, '<absent>')}")
    return lines
