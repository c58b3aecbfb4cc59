"""target.cpu.background in scenarios: the software quickstart, a baseline and the
offloaded quickstart under CPU contention; reporting, determinism, bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kbtpsim.run.results import dumps
from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario.load import ScenarioError, load_scenario

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"


def _run(path: Path, *overrides: str) -> dict[str, Any]:
    return run_scenario(load_scenario(path, overrides)).results


def _cpu(results: dict[str, Any]) -> dict[str, Any]:
    cpu: dict[str, Any] = results["targets"]["target"]["cpu"]
    return cpu


@pytest.fixture(scope="module")
def quickstart() -> dict[float, dict[str, Any]]:
    return {f: _run(QUICKSTART, "stop.operations=1200", f"target.cpu.background={f}")
            for f in (0.0, 0.8)}


def test_software_load_p99_grows_under_background(
        quickstart: dict[float, dict[str, Any]]) -> None:
    idle, busy = (quickstart[f]["operations"]["LOAD"]["latency_ns"] for f in (0.0, 0.8))
    # a 50 us slice in every 62.5 us: a LOAD that meets one waits for it
    assert busy["p99"] > idle["p99"] + 25_000
    assert busy["p50"] > idle["p50"]


def test_server_and_background_shares_are_reported_apart(
        quickstart: dict[float, dict[str, Any]]) -> None:
    assert "background" not in _cpu(quickstart[0.0])
    cpu = _cpu(quickstart[0.8])
    bg = cpu["background"]
    assert bg["fraction"] == 0.8 and bg["slice_ns"] == 50_000
    assert bg["share"] == pytest.approx(0.8, abs=0.01)  # 2 cores, random phases
    assert cpu["utilisation"] + bg["share"] <= 1.0
    assert bg["server_of_available"] == pytest.approx(
        cpu["utilisation"] / (1 - bg["share"]), abs=1e-5)
    assert bg["stalled_ns"] > 0
    # the server's CPU time per LOAD is its work, not the slices it waited for (the
    # same to within the runs' different request mixes; the latency is several times)
    idle_per = _cpu(quickstart[0.0])["per_op"]["LOAD"]["per_op_ns"]
    assert cpu["per_op"]["LOAD"]["per_op_ns"] == pytest.approx(idle_per, rel=0.01)


def test_same_seed_same_results_other_seed_other_slices() -> None:
    args = ("stop.operations=300", "target.cpu.background=0.5", "target.cpu.slice=20us")
    a = dumps(_run(QUICKSTART, *args))
    assert a == dumps(_run(QUICKSTART, *args))
    other = _run(QUICKSTART, *args, "seed=2")
    assert dumps(other) != a


def test_baseline_is_delayed_by_background() -> None:
    args = ("stop.operations=600", "target.mode=two_sided")
    idle = _run(QUICKSTART, *args)
    busy = _run(QUICKSTART, *args, "target.cpu.background=0.8")
    assert busy["operations"]["LOAD"]["latency_ns"]["p99"] > \
        idle["operations"]["LOAD"]["latency_ns"]["p99"] + 25_000
    assert _cpu(busy)["background"]["share"] == pytest.approx(0.8, abs=0.01)


def test_offload_cpu_work_is_delayed_and_the_oracle_agrees() -> None:
    """The offloaded quickstart: the CPU's part (polling, fallbacks, releasing and
    re-posting chains) waits for the slices, so its requests do too (that the NIC alone
    is not delayed: tests/system/test_cpu_contention.py, DIRECT_LOAD); contention moves
    when the target serves requests, never what it answers."""
    path = REPO / "scenarios" / "quickstart-offload.yaml"
    idle = _run(path, "stop.operations=100")
    busy = run_scenario(load_scenario(path, ["stop.operations=100",
                                             "target.cpu.background=0.8"]),
                        oracle=True).results
    for op in ("LOAD", "ALLOC_STORE"):
        assert busy["operations"][op]["latency_ns"]["p99"] > \
            idle["operations"][op]["latency_ns"]["p99"], op
    assert _cpu(busy)["background"]["stalled_ns"] > 0
    assert _cpu(busy)["utilisation"] + _cpu(busy)["background"]["share"] <= 1.0
    assert busy["oracle"]["checked"] and busy["oracle"]["divergences"] == 0


@pytest.mark.parametrize(("override", "message"), [
    ("target.cpu.background=1.0",
     "target.cpu.background: must be a fraction of each core, 0 <= f < 1, got 1.0"),
    ("target.cpu.background=-0.1",
     "target.cpu.background: must be a fraction of each core, 0 <= f < 1, got -0.1"),
    ("target.cpu.slice=0", "target.cpu.slice: must be a positive time (e.g. 50us), got 0ps"),
])
def test_bad_values_name_key_and_value_in_one_line(override: str, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(QUICKSTART, [override])
    text = str(info.value)
    assert message in text and "\n" not in text


def test_the_oracle_agrees_with_the_software_target_under_background() -> None:
    sc = load_scenario(QUICKSTART, ["stop.operations=300", "target.cpu.background=0.8"])
    results = run_scenario(sc, oracle=True).results
    assert results["oracle"]["checked"] and results["oracle"]["divergences"] == 0
    assert _cpu(results)["background"]["stalled_ns"] > 0
