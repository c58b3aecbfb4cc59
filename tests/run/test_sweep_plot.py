"""``kbtpsim sweep`` (parallel, resumable) and ``kbtpsim plot``."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbtpsim.cli import main
from kbtpsim.run.cli import add_run_parsers
from kbtpsim.run.sweep import load_sweep, run_sweep
from kbtpsim.scenario import ScenarioError

REPO = Path(__file__).resolve().parents[2]

BASE: dict[str, Any] = {
    "name": "tiny", "seed": 1, "stop": {"operations": 150},
    "target": {"blocks": 64, "block_size": "4KiB", "request_credits": 8},
    "initiators": [{"name": "c", "handles": 32, "workload": {
        "window": 2, "length": {"value": 1024}}}],
}


def sweep_file(tmp_path: Path, parameters: dict[str, Any]) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(BASE))
    p = tmp_path / "sweep.yaml"
    p.write_text(yaml.safe_dump({"base": "base.yaml", "set": {"stop.warmup": "2us"},
                                 "parameters": parameters}))
    return p


def test_sweep_runs_in_parallel_and_resumes(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    p = sweep_file(tmp_path, {"initiators[0].count": [1, 2]})
    out = tmp_path / "out"
    assert main(["sweep", str(p), "--jobs", "2", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("done:") == 2
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert [r["initiators[0].count"] for r in rows] == ["1", "2"]
    assert all(float(r["ops_per_s"]) > 0 for r in rows)
    points = sorted((out / "points").iterdir())
    assert len(points) == 2
    stamps = {d.name: (d / "results.json").stat().st_mtime_ns for d in points}
    # resumed: nothing is rerun
    assert main(["sweep", str(p), "--jobs", "2", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("reused:") == 2 and "done:" not in err
    assert stamps == {d.name: (d / "results.json").stat().st_mtime_ns for d in points}
    data = json.loads((out / "sweep.json").read_text())
    assert data["parameters"] == ["initiators[0].count"] and len(data["rows"]) == 2
    # a plot of a run directory and the sweep
    fig = tmp_path / "fig.png"
    assert main(["plot", str(points[0]), str(out), "-o", str(fig)]) == 0
    assert fig.stat().st_size > 10_000
    assert "latency CDF, ring occupancy, throughput (out)" in capsys.readouterr().out


def test_point_keys_hash_the_resolved_scenario(tmp_path: Path) -> None:
    p = sweep_file(tmp_path, {"target.block_size": ["4KiB", 4096, "8KiB"]})
    pts = load_sweep(p)
    assert pts[0].key == pts[1].key != pts[2].key  # same resolved scenario, same key
    rows = run_sweep(pts[:2], tmp_path / "o")
    assert len(rows) == 2 and len(list((tmp_path / "o" / "points").iterdir())) == 1


def test_bad_sweep_points_name_key_and_point(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    p = sweep_file(tmp_path, {"target.blocks": [64, 0]})
    with pytest.raises(ScenarioError, match=r"target.blocks: .*sweep point target.blocks=0"):
        load_sweep(p)
    assert main(["sweep", str(p), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kbtpsim: error: target.blocks:")


def test_shipped_sweeps_validate() -> None:
    sizes = {p.values["target.block_size"] for p in
             load_sweep(REPO / "scenarios" / "sweep-block-size.yaml")}
    assert sizes == {"4KiB", "16KiB", "64KiB", "256KiB", "1MiB", "2MiB"}
    for name in ("sweep-initiators.yaml", "sweep-rings.yaml", "sweep-ablation.yaml",
                 "sweep-open-loop.yaml"):
        assert load_sweep(REPO / "scenarios" / name)


def test_plot_rejects_other_directories(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "f.png")]) == 2
    assert "neither results.json nor sweep.json" in capsys.readouterr().err


def test_parsers_register_on_a_parent_cli() -> None:
    parser = argparse.ArgumentParser(prog="kbtpsim")
    add_run_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", "x.yaml", "--set", "a=1", "--set", "b=2", "--oracle"])
    assert args.set == ["a=1", "b=2"] and args.oracle and callable(args.func)
    args = parser.parse_args(["sweep", "s.yaml", "--jobs", "2"])
    assert args.jobs == 2
    args = parser.parse_args(["plot", "d1", "d2", "-o", "f.png"])
    assert args.dirs == ["d1", "d2"]
