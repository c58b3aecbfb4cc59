"""kbtpsim.analysis: the notebooks' helpers (study paths, sweeps into rows, figures)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kbtpsim import analysis

REPO = Path(__file__).resolve().parents[2]

TINY: dict[str, Any] = {
    "name": "tiny", "seed": 3,
    "stop": {"operations": 60},
    "target": {"blocks": 32, "block_size": "4KiB", "cpu": {"cores": 1}},
    "initiators": [{"count": 1, "handles": 16,
                    "workload": {"window": 2, "mix": {"alloc_store": 1, "load": 2, "free": 1},
                                 "length": {"value": "1KiB"}}}],
    "metrics": {"sample_interval": "5us"},
}


def tiny_sweep(tmp_path: Path) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(TINY), encoding="utf-8")
    p = tmp_path / "sweep-tiny.yaml"
    p.write_text(yaml.safe_dump({"base": "base.yaml",
                                 "parameters": {"target.block_size": ["4KiB", "8KiB", "16KiB"]}}),
                 encoding="utf-8")
    return p


@pytest.mark.parametrize(("value", "quick"), [("", False), ("0", False), ("false", False),
                                              ("1", True), ("yes", True)])
def test_quick_mode(value: str, quick: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(analysis.QUICK_ENV, value)
    assert analysis.quick_mode() is quick


def test_repo_root_from_a_subdirectory(tmp_path: Path) -> None:
    assert analysis.repo_root(REPO / "notebooks") == REPO
    assert analysis.repo_root(REPO / "kbtpsim" / "run") == REPO
    with pytest.raises(FileNotFoundError):
        analysis.repo_root(tmp_path)


def test_study_paths(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(analysis.RESULTS_ENV, raising=False)
    full = analysis.Study("block-size", REPO, quick=False)
    assert full.results == REPO / "results" / "notebooks" / "block-size"
    assert full.figure == REPO / "docs" / "results" / "block-size.png"
    quick = analysis.Study("block-size", REPO, quick=True)
    assert quick.results == REPO / "results" / "notebooks-quick" / "block-size"
    assert quick.figure.parent == REPO / "results" / "notebooks-quick"
    monkeypatch.setenv(analysis.RESULTS_ENV, str(tmp_path))
    moved = analysis.Study("rings", REPO, quick=True)
    assert moved.results == tmp_path / "rings" and moved.figure == tmp_path / "rings.png"
    monkeypatch.setenv(analysis.QUICK_ENV, "1")
    assert analysis.Study("rings", REPO).quick


def test_run_study_reduces_reuses_and_loads(tmp_path: Path) -> None:
    sweep = tiny_sweep(tmp_path)
    out = tmp_path / "out"
    logged: list[str] = []
    rows = analysis.run_study(sweep, out, parameters={"target.block_size": ["4KiB", "16KiB"]},
                              overrides={"stop.operations": 40}, jobs=1, log=logged.append)
    assert [r["target.block_size"] for r in rows] == ["4KiB", "16KiB"]
    assert all("done" in line for line in logged) and len(logged) == 2
    derived = yaml.safe_load((out / "study.yaml").read_text(encoding="utf-8"))
    assert derived["set"] == {"stop.operations": 40}
    assert Path(derived["base"]).is_absolute()
    for r in rows:
        assert r["operations_measured"] == 40 and r["stop_reason"] == "operations"
        assert r["mode"] == "software" and r["initiators"] == 1
        assert r["ops_per_s"] > 0 and r["LOAD.p50_us"] > 0
        assert 0 < r["target.cpu"] <= 1 and Path(r["dir"], "results.json").exists()
        assert r["target.rings.in_use_peak"] >= 0
    # finished points are reused, and the directory loads on its own
    logged.clear()
    again = analysis.run_study(sweep, out, parameters={"target.block_size": ["4KiB", "16KiB"]},
                               overrides={"stop.operations": 40}, jobs=1, log=logged.append)
    assert all("reused" in line for line in logged) and again == rows
    assert analysis.load_sweep_dir(out) == rows
    series = analysis.read_timeseries(rows[0]["dir"], ".ring.")
    assert series and all(len(t) == len(v) > 0 for t, v in series.values())


def test_run_study_adds_swept_keys(tmp_path: Path) -> None:
    rows = analysis.run_study(tiny_sweep(tmp_path), tmp_path / "o",
                              parameters={"target.block_size": ["4KiB"],
                                          "target.rings": ["shared", "per_initiator"]},
                              overrides={"stop.operations": 20}, jobs=1, log=None)
    assert [(r["target.block_size"], r["target.rings"]) for r in rows] == [
        ("4KiB", "shared"), ("4KiB", "per_initiator")]


def test_sweep_failed_carries_the_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kbtpsim.run.sweep as sweep_mod

    def broken(points: list[Any], out: Any, jobs: int = 1, on_done: Any = None) -> list[Any]:
        return [{"key": p.key, "error": "RuntimeError: boom"} for p in points]

    monkeypatch.setattr(sweep_mod, "run_sweep", broken)
    with pytest.raises(analysis.SweepFailed, match="boom") as info:
        analysis.run_study(tiny_sweep(tmp_path), tmp_path / "o", log=None)
    assert len(info.value.errors) == 3


def test_flatten_a_results_mapping() -> None:
    lat = {"mean": 1500.0, "p50": 1000.0, "p90": 2000.0, "p99": 3000.0, "p99.9": 4000.0,
           "max": 5000.0}
    res = {
        "run": {"operations_measured": 10, "measured_ps": 2_000_000, "stop_reason": "time"},
        "throughput": {"ops_per_s": 5.0, "gb_per_s": 0.5},
        "operations": {"LOAD": {"count": 10, "ok": 9, "ops_per_s": 5.0, "gb_per_s": 0.5,
                                "latency_ns": lat}},
        "targets": {"t": {"mode": "offload",
                          "cpu": {"utilisation": 0.5,
                                  "per_op": {"LOAD": {"per_op_ns": 700, "busy_ns": 7000}}},
                          "nic": {"atomic": 0.25}, "ports": {"t<->sw.egress": 0.1},
                          "rings": [{"in_use_peak": 3, "in_use_mean": 1.5, "deferred_frees": 1,
                                     "head_ticket": 7},
                                    {"in_use_peak": 2, "in_use_mean": 1.0, "deferred_frees": 0,
                                     "head_ticket": 5}],
                          "fallbacks": {"offload_to_software": 4,
                                        "served": {"LOAD": {"nic": 6, "cpu": 4}}}}},
        "initiators": {"a": {}, "b": {}},
    }
    row = analysis.flatten(res)
    assert row["measured_us"] == 2.0 and row["stop_reason"] == "time"
    assert row["mode"] == "offload" and row["initiators"] == 2
    assert row["LOAD.p50_us"] == 1.0 and row["LOAD.p99.9_us"] == 4.0 and row["LOAD.ok"] == 9
    assert row["t.cpu"] == 0.5 and row["t.cpu.LOAD_ns"] == 700
    assert row["t.cpu.LOAD_busy_ns"] == 7000
    assert row["t.nic.atomic"] == 0.25 and row["t.port.egress"] == 0.1
    assert row["t.rings.in_use_peak"] == 5 and row["t.rings.head_ticket"] == 12
    assert row["t.offload_to_software"] == 4
    assert row["t.served.LOAD.nic"] == 6 and row["t.served.LOAD.cpu"] == 4


def test_tables() -> None:
    assert analysis.as_number("64KiB") == 65536 and analysis.as_number(3) == 3.0
    assert analysis.as_number("2us") == 2_000_000 and analysis.as_number("200k/s") == 2e5
    with pytest.raises(ValueError):
        analysis.as_number("shared")
    with pytest.raises(ValueError):
        analysis.as_number(True)
    assert analysis.label({}) == "all on"
    assert analysis.label({"wait_enable": False}) == "wait_enable off"
    assert analysis.label({"link_gbps": 200}) == "link_gbps=200"
    rows: list[dict[str, Any]] = [
        {"x": "16KiB", "y": 2.0, "m": "a", "o": {}},
        {"x": "4KiB", "y": 1.0, "m": "b", "o": {"cas_on_wqe": False}},
        {"x": "8KiB", "y": None, "m": "a", "o": {}}]
    assert analysis.series(rows, "x", "y") == ([4096.0, 16384.0], [1.0, 2.0])
    assert analysis.select(rows, m="a") == [rows[0], rows[2]]
    assert list(analysis.group(rows, "o")) == ["all on", "cas_on_wqe off"]
    table = analysis.markdown_table(rows, ["x", "y"], {"y": ".1f"}).splitlines()
    assert table[0] == "| x | y |" and table[2] == "| 16KiB | 2.0 |" and table[4] == "| 8KiB | - |"


def test_figure_is_saved(tmp_path: Path) -> None:
    fig, axes = analysis.figure(2, 1)
    assert len(axes) == 1 and len(axes[0]) == 2
    axes[0][0].plot([4096, 65536], [1, 2], "o-")
    analysis.log2_size_axis(axes[0][0], [4096, 65536])
    assert [t.get_text() for t in axes[0][0].get_xticklabels()] == ["4KiB", "64KiB"]
    out = analysis.save_figure(fig, tmp_path / "sub" / "f.png", suptitle="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
