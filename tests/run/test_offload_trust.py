"""The offloaded target where it used to fail: documented commands, races between
connections, and the ownership of credits (issue: offload you can trust)."""

from __future__ import annotations

from pathlib import Path

import yaml

from kbtpsim.run.runner import run_scenario
from kbtpsim.scenario import scenario_from_dict

REPO = Path(__file__).resolve().parents[2]


def quickstart(**target: object) -> dict[str, object]:
    data = yaml.safe_load((REPO / "scenarios" / "quickstart.yaml").read_text())
    data["target"].update(target)
    return data


def test_two_cores_do_not_release_each_others_credits() -> None:
    """A core's pass once released the gates of every connection, while another core
    was still posting a released connection's effects (the RDMA Read of a store came
    back, its COMPLETION not yet posted): "the CPU posts a work request while it holds
    no credit". Only a connection's own CPU process releases its credits, and only once
    nothing is being posted on it."""
    data = quickstart(mode="offload", nic={"profile": "ideal-be"})
    data["stop"] = {"operations": 600, "warmup": "20us"}
    out = run_scenario(scenario_from_dict(data), oracle=True)
    assert out.results["run"]["stop_reason"] == "operations"
    assert out.divergences == [], [str(d) for d in out.divergences]
