"""Decision C14: `target.chains` defaults to v2 where the NIC profile can re-arm chains,
to v1 where it cannot; `cpu.refill_batch` defaults to 8 with v2 and 1 with v1."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kbtpsim.chains.cli import _resolve_design
from kbtpsim.chains.v2 import default_design, recycle_blockers
from kbtpsim.nic import PROFILES
from kbtpsim.scenario.load import ScenarioError, load_scenario
from kbtpsim.scenario.schema import chain_design, refill_batch

REPO = Path(__file__).resolve().parents[2]
OFFLOAD = str(REPO / "scenarios" / "quickstart-offload.yaml")


def _target(*overrides: str):  # type: ignore[no-untyped-def]
    return load_scenario(OFFLOAD, list(overrides)).targets[0]


@pytest.mark.parametrize(("profile", "design", "batch"), [
    ("ideal-be", "v2", 32), ("cx5", "v2", 32), ("ideal", "v1", 1),
    ("cx5-upstream", "v1", 1), ("irdma", "v1", 1),
])
def test_the_default_follows_the_profile(profile: str, design: str, batch: int) -> None:
    tgt = _target(f"target.nic.profile={profile}")
    assert tgt.chains is None
    assert (chain_design(tgt), refill_batch(tgt)) == (design, batch)


def test_a_capability_ablation_falls_back_to_v1() -> None:
    tgt = _target("target.nic.overrides={wait_enable: false}")
    assert chain_design(tgt) == "v1"


def test_explicit_values_win() -> None:
    tgt = _target("target.chains=v1")
    assert (chain_design(tgt), refill_batch(tgt)) == ("v1", 1)
    tgt = _target("target.chains=v2", "target.cpu.refill_batch=3")
    assert (chain_design(tgt), refill_batch(tgt)) == ("v2", 3)


def test_explicit_v2_where_it_cannot_run_names_the_key() -> None:
    with pytest.raises(ScenarioError) as exc:
        _target("target.nic.profile=ideal", "target.chains=v2")
    assert exc.value.path == "target.chains"
    assert "ideal" in str(exc.value)


def test_documented_v1_studies_pin_v1() -> None:
    ablation = load_scenario(str(REPO / "scenarios" / "eval-ablation.yaml")).targets[0]
    assert chain_design(ablation) == "v1"


def test_results_record_the_design_that_ran() -> None:
    from kbtpsim.run.runner import run_scenario

    for over, chains in (("target.chains=v1", "v1"), ("target.nic.profile=ideal-be", "v2"),
                         ("target.mode=software", None)):
        sc = load_scenario(OFFLOAD, [over, "stop.operations=20", "initiators[0].count=1"])
        res = run_scenario(sc).results
        assert res["targets"]["target"]["chains"] == chains


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_one_rule_decides_the_default_everywhere(profile: str) -> None:
    """The scenario default, `kbtpsim chains` and `kbtpsim check` all ask
    `default_design`, which is v2 exactly where nothing blocks recycling."""
    prof = PROFILES[profile]
    expected = "v1" if recycle_blockers(prof) else "v2"
    assert default_design(prof) == expected
    assert chain_design(_target(f"target.nic.profile={profile}")) == expected
    args = argparse.Namespace(chains="default")
    _resolve_design(args, prof)
    assert args.design == expected
    assert (args.note is None) == (expected == "v2")


@pytest.mark.parametrize(("credits", "batch"), [(64, 32), (16, 32), (8, 16), (1, 2)])
def test_the_v2_grant_batch_follows_the_credits(credits: int, batch: int) -> None:
    """Decision C22: grants per 32 credits, or twice the request credits if fewer (the
    server posts request credits + batch slots per connection)."""
    tgt = _target("target.nic.profile=ideal-be", f"target.request_credits={credits}")
    assert refill_batch(tgt) == batch
