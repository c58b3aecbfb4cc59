"""``kbtpsim check --reference model``: the campaigns with the independent reference
model (kbtpsim.refmodel) as the shadow instead of Target."""

from __future__ import annotations

import pytest

from kbtpsim.cli import main
from kbtpsim.oracle.campaign import Spec, run_campaign
from kbtpsim.oracle.shadow import Shadow
from kbtpsim.refmodel import ModelTarget


def test_check_with_the_reference_model(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--seed", "1", "--profiles", "ideal-be", "--ops", "24",
               "--phases", "2", "--addr-le", "off", "--mix", "churn", "--reference", "model"])
    out = capsys.readouterr().out
    assert "; reference model" in out
    assert rc == 0 and "1 campaigns, 0 diverged" in out


def test_reference_model_is_the_shadow_and_catches_a_mutant() -> None:
    """The model really is the reference: a broken chain diverges from it too."""
    spec = Spec(seed=1, profile="ideal-be", addr_le=False, ops=24, phases=1,
                mutant="swap-length-offset", reference="model")
    from kbtpsim.oracle.mutants import CATALOGUE

    res = run_campaign(spec, CATALOGUE["swap-length-offset"].transform)
    assert res.divergences and res.divergences[0].kind == "completion"
    assert "--reference model" in spec.replay()


def test_shadow_reference_choice() -> None:
    from kbtpsim.target import TargetConfig

    cfg = TargetConfig(blocks=2, block_size=64)
    assert isinstance(Shadow(cfg, reference="model").target, ModelTarget)
    with pytest.raises(ValueError, match="reference"):
        Shadow(cfg, reference="nope")


def test_reference_option_rejects_unknown_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check", "--reference", "nope"])
    assert exc.value.code == 2
    assert "--reference" in capsys.readouterr().err
