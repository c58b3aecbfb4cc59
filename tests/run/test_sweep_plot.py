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


def _tree(out: Path) -> dict[str, bytes]:
    """The deterministic files of a sweep directory (not run.json: wall time, host)."""
    return {str(f.relative_to(out)): f.read_bytes() for f in sorted(out.rglob("*"))
            if f.is_file() and f.name != "run.json"}


def test_dask_local_cluster_gives_the_local_pool_results(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("distributed")
    p = sweep_file(tmp_path, {"initiators[0].count": [1, 2]})
    pool, dask = tmp_path / "pool", tmp_path / "dask"
    assert main(["sweep", str(p), "--jobs", "2", "-o", str(pool)]) == 0
    capsys.readouterr()
    # two-worker LocalCluster; half of the points already there: resumed, not rerun
    first = load_sweep(p)[0]
    (dask / "points").mkdir(parents=True)
    import shutil

    shutil.copytree(pool / "points" / first.key, dask / "points" / first.key)
    assert main(["sweep", str(p), "--dask", "local", "--jobs", "2", "-o", str(dask)]) == 0
    err = capsys.readouterr().err
    assert "[1/2] reused: initiators[0].count=1" in err
    assert "[2/2] done: initiators[0].count=2" in err
    assert _tree(dask) == _tree(pool)
    assert len(_tree(pool)) == 2 * 3 + 2  # per point: results, timeseries, point.yaml


def test_dask_unreachable_scheduler_is_one_line(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    monkeypatch.setattr("kbtpsim.run.dask_pool.CONNECT_TIMEOUT_S", 1)
    p = sweep_file(tmp_path, {"initiators[0].count": [1]})
    assert main(["sweep", str(p), "--dask", "tcp://127.0.0.1:9", "-o",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("kbtpsim: error: --dask: cannot reach the Dask scheduler at "
                             "'tcp://127.0.0.1:9'")


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_is_rejected(tmp_path: Path, jobs: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    p = sweep_file(tmp_path, {"initiators[0].count": [1]})
    assert main(["sweep", str(p), "--jobs", jobs, "-o", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"kbtpsim: error: --jobs: must be at least 1, " \
                                      f"got {jobs}\n"
    assert not (tmp_path / "o").exists()


def test_jobs_defaults_to_the_number_of_cores(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="kbtpsim")
    add_run_parsers(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["sweep", "s.yaml"])
    assert args.jobs is None and args.dask is None  # None: os.cpu_count() at run time
    with pytest.raises(SystemExit):
        parser.parse_args(["sweep", "--help"])
    assert "(default: the number of cores)" in " ".join(capsys.readouterr().out.split())


def test_stalled_point_is_a_failure_named_by_its_values(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a credit of 1 with window 2 and a tiny stall limit: the second point stalls
    p = sweep_file(tmp_path, {"stop.stall": ["50ms", "1ns"]})
    out = tmp_path / "o"
    assert main(["sweep", str(p), "--jobs", "1", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "done: stop.stall=50ms\n" in err
    assert "failed: stop.stall=1ns: run stalled" in err
    assert "kbtpsim: sweep point stop.stall=1ns failed: run stalled" in err
    rows = list(csv.DictReader((out / "sweep.csv").open()))
    assert rows[0]["error"] == "" and rows[1]["error"].startswith("run stalled")
    # resumed: the stalled point is still a failure
    assert main(["sweep", str(p), "--jobs", "1", "-o", str(out)]) == 1
    assert "failed: stop.stall=1ns" in capsys.readouterr().err


def test_sweep_output_naming_a_file_is_refused(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    p = sweep_file(tmp_path, {"initiators[0].count": [1]})
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["sweep", str(p), "-o", str(f)]) == 2
    assert capsys.readouterr().err == (f"kbtpsim: error: -o {f}: names an existing file, "
                                       "not a directory\n")
    assert main(["sweep", str(p), "-o", str(f / "sub")]) == 2
    assert capsys.readouterr().err == (f"kbtpsim: error: -o {f / 'sub'}: {f} is a file, "
                                       "not a directory\n")


@pytest.mark.slow
def test_docs_dask_scheduler_and_worker_commands(tmp_path: Path) -> None:
    """docs/scenarios.md's run across machines, on this one: `dask scheduler`, two
    `dask worker`s, `kbtpsim sweep --dask tcp://...` (reduced size)."""
    import shutil
    import socket
    import subprocess
    import sys
    import time

    pytest.importorskip("distributed")
    dask_cli = shutil.which("dask")
    if dask_cli is None:
        pytest.skip("the dask command is not on PATH")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    addr = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([dask_cli, "scheduler", "--port", str(port), "--no-dashboard"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        time.sleep(2)
        procs += [subprocess.Popen([dask_cli, "worker", addr, "--nthreads", "1",
                                    "--no-dashboard"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL) for _ in range(2)]
        sweep = str(REPO / "scenarios" / "sweep-initiators.yaml")
        small = ["--set", "stop.operations=200", "--set", "stop.warmup=2us"]
        got = subprocess.run([sys.executable, "-m", "kbtpsim.cli", "sweep", sweep, "--dask",
                              addr, "-o", str(tmp_path / "dask"), *small],
                             capture_output=True, text=True, timeout=300, check=False)
        assert got.returncode == 0, got.stderr
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
    assert main(["sweep", sweep, "--jobs", "2", "-o", str(tmp_path / "pool"), *small]) == 0
    assert _tree(tmp_path / "dask") == _tree(tmp_path / "pool")
