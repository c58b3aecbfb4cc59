"""``kbtpsim sweep``: a cartesian product of parameter values over a base scenario.

A sweep file::

    base: quickstart.yaml        # a scenario file (relative to the sweep file) or a mapping
    set: {stop.operations: 500}  # overrides applied to every point (optional)
    parameters:                  # key path -> values; every combination is a point
      target.block_size: [4KiB, 64KiB]
      initiators[0].count: [1, 2, 4]
    seeds: [0]                   # optional: each point once per seed (a parameter `seed`)

``cases`` (optional) zips keys that must change together: a list of named override sets,
each crossed with the parameters (which are then optional)::

    cases:
      - name: two-sided
        set: {target.mode: two_sided}
      - name: kbtp+direct_load
        set: {target.features.direct_load: true,
              initiators[1].workload.kvcache.load_with: direct_load}

A point's values then start with ``case`` (its name), in sweep.csv too.

Every point is validated before any runs. Points run in parallel processes
(``ProcessPoolExecutor``), or on a Dask distributed cluster (``--dask ADDRESS``, or
``--dask local`` for a ``LocalCluster``: :mod:`kbtpsim.run.dask_pool`); each one's
directory is ``OUT/points/<key>/`` where ``key`` is a hash of the point's resolved
scenario, so a rerun skips finished points (resumable).
``OUT/sweep.csv`` and ``OUT/sweep.json`` hold one row per point.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kbtpsim.run.results import write_results
from kbtpsim.scenario.load import ScenarioError, expect_kind, read_yaml, scenario_from_dict
from kbtpsim.scenario.schema import Scenario


@dataclass(frozen=True)
class Point:
    values: dict[str, Any]  #: parameter path -> value as written
    scenario: Scenario
    key: str


def scenario_key(sc: Scenario) -> str:
    """A hash of the resolved scenario (what a finished point is recognised by)."""
    canon = json.dumps(sc.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def load_sweep(path: str | Path, extra: list[tuple[str, Any]] | None = None) -> list[Point]:
    """The points of a sweep file, each validated (errors name the point)."""
    p = Path(path)
    spec = read_yaml(p)
    expect_kind(spec, p, "sweep")
    top = ["base", "set", "parameters", "seeds", "cases"]
    unknown = set(spec) - set(top)
    if unknown:
        from kbtpsim.scenario.schema import did_you_mean

        key = sorted(unknown)[0]
        raise ScenarioError(key, f"unknown key in the sweep file{did_you_mean(key, top)}")
    base = spec.get("base")
    if isinstance(base, str):
        base_data = read_yaml(p.parent / base)
        expect_kind(base_data, p.parent / base, "scenario")
    elif isinstance(base, dict):
        base_data = base
    else:
        raise ScenarioError("base", "give a scenario file name or a mapping")
    common = list((spec.get("set") or {}).items())
    cases = _cases(spec.get("cases"))
    params = spec.get("parameters") or {}
    if not isinstance(params, dict) or not (params or cases):
        raise ScenarioError("parameters", "give at least one key path with a list of values"
                            " (or cases)")
    for key, values in params.items():
        if not isinstance(values, list) or not values:
            raise ScenarioError(f"parameters.{key}", "must be a non-empty list of values")
    seeds = spec.get("seeds")
    if seeds is not None:
        if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
            raise ScenarioError("seeds", "must be a list of integers")
        params = {**params, "seed": seeds}
    names = list(params)
    points = []
    for case_name, case_set in cases or [(None, [])]:
        for combo in itertools.product(*(params[n] for n in names)):
            values = dict(zip(names, combo, strict=True))
            if case_name is not None:
                values = {"case": case_name, **values}
            pairs = [(k, v) for k, v in values.items() if k != "case"]
            try:
                # --set (``extra``) last: it overrides the cases too
                sc = scenario_from_dict(base_data, [*common, *case_set, *pairs,
                                                    *(extra or [])])
            except ScenarioError as exc:
                where = ", ".join(f"{k}={v}" for k, v in values.items())
                raise ScenarioError(exc.path, f"{exc.message} (sweep point {where})") \
                    from None
            points.append(Point(values, sc, scenario_key(sc)))
    return points


def _cases(raw: Any) -> list[tuple[str, list[tuple[str, Any]]]]:
    """The ``cases`` of a sweep file: (name, overrides) in order."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not raw:
        raise ScenarioError("cases", "must be a non-empty list of {name, set} mappings")
    out: list[tuple[str, list[tuple[str, Any]]]] = []
    for i, case in enumerate(raw):
        if not isinstance(case, dict):
            raise ScenarioError(f"cases[{i}]", "must be a mapping with name and set")
        extra = set(case) - {"name", "set"}
        if extra:
            raise ScenarioError(f"cases[{i}].{sorted(extra)[0]}", "unknown key (give name "
                                "and set)")
        name = case.get("name")
        if not isinstance(name, str) or not name:
            raise ScenarioError(f"cases[{i}].name", "required: a non-empty string")
        if name in {n for n, _ in out}:
            raise ScenarioError(f"cases[{i}].name", f"duplicate case name {name!r}")
        overrides = case.get("set") or {}
        if not isinstance(overrides, dict):
            raise ScenarioError(f"cases[{i}].set", "must be a mapping of key path to value")
        out.append((name, list(overrides.items())))
    return out


def compute_point(sc: Scenario) -> dict[str, Any]:
    """In a worker (a process of the local pool or a Dask worker, possibly on another
    machine): run one point; return its results, time series and run information. The
    sweep's own process writes the point's directory, so workers need no shared disk."""
    import platform
    import time

    from kbtpsim.run.runner import run_scenario

    t = time.perf_counter()
    outcome = run_scenario(sc)
    return {"results": outcome.results, "timeseries": outcome.timeseries,
            "info": {"wall_s": round(time.perf_counter() - t, 3), "host": platform.node()}}


def stalled_error(results: dict[str, Any]) -> str | None:
    """Why a finished point counts as failed (its run stalled), or None."""
    if results.get("run", {}).get("stop_reason") != "stalled":
        return None
    lost = {k: v["connection"] for k, v in results.get("initiators", {}).items()
            if v.get("connection") != "up"}
    if lost:
        return f"run stalled: initiators failed: {lost}"
    stall = results.get("scenario", {}).get("stop", {}).get("stall", 0)
    return f"run stalled: no operation completed for {stall / 1e9:g} ms of simulated time"


def row_of(point: Point, results: dict[str, Any]) -> dict[str, Any]:
    """One row: the parameter values, then the headline metrics."""
    row: dict[str, Any] = {"key": point.key}
    row.update({k: v for k, v in point.values.items()})
    if "error" in results:
        row["error"] = results["error"]
        return row
    stalled = stalled_error(results)
    if stalled is not None:
        row["error"] = stalled
    row["ops_per_s"] = results["throughput"]["ops_per_s"]
    row["gb_per_s"] = results["throughput"]["gb_per_s"]
    for op, v in sorted(results["operations"].items()):
        for q in ("p50", "p99"):
            row[f"{op}.{q}_ns"] = v["latency_ns"].get(q)
        row[f"{op}.ops_per_s"] = v["ops_per_s"]
    for name, t in results["targets"].items():
        row[f"{name}.cpu"] = t["cpu"]["utilisation"]
        row[f"{name}.rings.in_use_peak"] = sum(r["in_use_peak"] for r in t["rings"])
        row[f"{name}.rings.deferred_frees"] = sum(r["deferred_frees"] for r in t["rings"])
    return row


OnDone = Callable[[Point, bool, str | None], None]


def run_sweep(points: list[Point], out_dir: str | Path, jobs: int = 1,
              on_done: OnDone | None = None, dask: str | None = None
              ) -> list[dict[str, Any]]:
    """Run the points not finished yet; write sweep.csv/json; return the rows in point
    order. ``on_done(point, reused, error)`` is called as each point finishes (``error``:
    why it failed, or None). Points run in this process (``jobs`` 1), in ``jobs`` local
    processes, or on the Dask cluster at ``dask`` (a scheduler address, or ``"local"``
    for a ``LocalCluster`` of ``jobs`` workers): the same rows and files either way."""
    out = Path(out_dir)
    (out / "points").mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    todo: list[Point] = []
    for pt in points:
        done = out / "points" / pt.key / "results.json"
        if done.exists():
            results[pt.key] = json.loads(done.read_text(encoding="utf-8"))
            if on_done is not None:
                on_done(pt, True, row_of(pt, results[pt.key]).get("error"))
        elif pt.key not in {p.key for p in todo}:
            todo.append(pt)
    for pt, got in _execute(todo, jobs, dask):
        if "error" in got:  # reported in its row; a rerun retries it
            results[pt.key] = got
        else:
            write_results(out / "points" / pt.key, got["results"], got["timeseries"],
                          got["info"])
            results[pt.key] = got["results"]
        if on_done is not None:
            on_done(pt, False, row_of(pt, results[pt.key]).get("error"))
    rows = [row_of(pt, results[pt.key]) for pt in points]
    for pt in points:
        (out / "points" / pt.key).mkdir(parents=True, exist_ok=True)
        (out / "points" / pt.key / "point.yaml").write_text(
            yaml.safe_dump({"parameters": pt.values}, sort_keys=False), encoding="utf-8")
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    with (out / "sweep.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow(row)
    (out / "sweep.json").write_text(json.dumps(
        {"parameters": list(points[0].values) if points else [], "rows": rows},
        indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return rows


def _failure(exc: BaseException) -> dict[str, Any]:
    return {"error": f"{type(exc).__name__}: {exc}"}


def _execute(todo: list[Point], jobs: int, dask: str | None
             ) -> Iterator[tuple[Point, dict[str, Any]]]:
    """``(point, compute_point(...) or {"error": ...})`` as each point finishes."""
    if not todo:
        return
    if dask is not None:
        from kbtpsim.run.dask_pool import dask_map

        yield from dask_map(compute_point, todo, lambda pt: pt.scenario, dask, jobs,
                            _failure)
    elif jobs <= 1 or len(todo) == 1:
        for pt in todo:
            try:
                yield pt, compute_point(pt.scenario)
            except Exception as exc:
                yield pt, _failure(exc)
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo))) as pool:
            futures = {pool.submit(compute_point, pt.scenario): pt for pt in todo}
            for fut in as_completed(futures):
                try:
                    yield futures[fut], fut.result()
                except Exception as exc:
                    yield futures[fut], _failure(exc)
