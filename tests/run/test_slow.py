"""Long runs of the shipped evaluation scenarios (``pytest -m slow``)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kbtpsim.cli import main

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "scenarios"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["eval-misbehaving", "eval-initiators", "eval-rings",
                                  "eval-open-loop",
                                  "eval-block-size", "kvcache-llama3-8b"])
def test_evaluation_scenarios_pass_the_oracle(name: str, tmp_path: Path) -> None:
    assert main(["run", str(SCENARIOS / f"{name}.yaml"), "-o", str(tmp_path), "-q",
                 "--oracle"]) == 0


@pytest.mark.slow
def test_ablation_runs_on_the_chain_target_under_the_oracle(tmp_path: Path) -> None:
    assert main(["run", str(SCENARIOS / "eval-ablation.yaml"), "-o", str(tmp_path), "-q",
                 "--oracle"]) == 0


@pytest.mark.slow
def test_block_size_sweep(tmp_path: Path) -> None:
    assert main(["sweep", str(SCENARIOS / "sweep-block-size.yaml"), "--jobs", "2", "-o",
                 str(tmp_path), "-q"]) == 0
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert len(rows) == 6 and all("error" not in r or not r["error"] for r in rows)
    assert main(["plot", str(tmp_path), "-o", str(tmp_path / "fig.png")]) == 0
