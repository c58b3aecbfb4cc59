"""The measured runs behind the comparison table (:mod:`kbtpsim.baselines.table`): one
:class:`Row` per run read from run or sweep directories (:func:`load_rows`), and the runs
grouped by approach (:func:`approaches`), each :class:`Approach` with its lightest- and
heaviest-load run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass
class Row:
    name: str
    approach: str
    results: dict[str, Any]

    @property
    def cmp(self) -> dict[str, Any]:
        c: dict[str, Any] = self.results.get("comparison") or {}
        return c

    def get(self, *path: str) -> Any:
        node: Any = self.cmp
        for p in path:
            if not isinstance(node, dict):
                return None
            node = node.get(p)
        return node


def load_rows(dirs: list[str | Path]) -> list[Row]:
    """One row per run (a sweep directory gives one per point, in sweep order)."""
    rows: list[Row] = []
    for d in map(Path, dirs):
        if (d / "sweep.json").exists():
            sweep = json.loads((d / "sweep.json").read_text(encoding="utf-8"))
            for r in sweep["rows"]:
                res_path = d / "points" / r["key"] / "results.json"
                if "error" in r or not res_path.exists():
                    continue
                res = json.loads(res_path.read_text(encoding="utf-8"))
                name = r.get("case") or _point_case(d / "points" / r["key"]) or \
                    res.get("comparison", {}).get("approach", r["key"])
                rows.append(Row(str(name), res.get("comparison", {}).get("approach", ""),
                                res))
        elif (d / "results.json").exists():
            res = json.loads((d / "results.json").read_text(encoding="utf-8"))
            approach = res.get("comparison", {}).get("approach", d.name)
            rows.append(Row(approach, approach, res))
        else:
            raise FileNotFoundError(f"{d}: neither results.json nor sweep.json")
    return rows


def _point_case(d: Path) -> str | None:
    p = d / "point.yaml"
    if not p.exists():
        return None
    data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    case = (data.get("parameters") or {}).get("case")
    return None if case is None else str(case)



def load_level(r: Row) -> int:
    """Requests outstanding at once in a run (sum of closed-loop windows)."""
    inis = r.results.get("scenario", {}).get("initiators", [])
    return sum(i.get("count", 1) * i.get("workload", {}).get("window", 1) for i in inis)


@dataclass
class Approach:
    """One approach: its lightest-load run (latency) and heaviest-load run (memory,
    CPU, round trips, throughput); the same run if there is one."""

    name: str
    approach: str
    light: Row
    heavy: Row


def approaches(rows: list[Row]) -> list[Approach]:
    """Rows grouped by name (a case's name before " / ", else the approach label)."""
    groups: dict[str, list[Row]] = {}
    for r in rows:
        groups.setdefault(r.name.split(" / ")[0], []).append(r)
    out = []
    for name, rs in groups.items():
        light = min(rs, key=load_level)
        heavy = max(rs, key=load_level)
        out.append(Approach(name, heavy.approach, light, heavy))
    return out

