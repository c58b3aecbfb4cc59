"""``kbtpsim check --chains v2``: the oracle's campaigns against chains v2, profiles that
cannot re-arm chains left out and named."""

from __future__ import annotations

import pytest

from kbtpsim.cli import main
from kbtpsim.oracle.campaign import Spec, run_campaign


def test_check_runs_v2_and_names_the_profiles_left_out(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--chains", "v2", "--seed", "1", "--profiles", "ideal-be,ideal",
               "--addr-le", "off", "--ops", "24", "--phases", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "chains v2 (not on ideal: they cannot re-arm chains)" in out
    assert "2 campaigns, 0 diverged" in out  # mixes default and pipeline


def test_v2_only_profiles_that_cannot_recycle_is_an_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--chains", "v2", "--profiles", "irdma", "--ops", "4"])
    assert rc == 2 and "none of the profiles can run chains v2" in capsys.readouterr().err


def test_a_v2_campaign_replays_with_its_chains() -> None:
    spec = Spec(seed=2, profile="cx5", addr_le=False, ops=24, phases=1, mix="race",
                chains="v2")
    assert "--chains v2" in spec.replay()
    res = run_campaign(spec)
    assert res.ok and res.requests > 24


def test_a_reconnect_does_not_undo_an_acknowledged_completion() -> None:
    """Seed 3 of the default mix (decision O11): the initiator closes right after its
    ALLOC_STORE's COMPLETION; the target used to learn of the close before the ACK, flush
    the Send and undo the allocation the initiator had been told of."""
    res = run_campaign(Spec(seed=3, profile="ideal-be", addr_le=False, ops=96, phases=3,
                            mix="default", chains="v2"))
    assert res.ok, [d.as_dict() for d in res.divergences[:2]]
    assert res.events["dropped"] > 0  # the mix's reconnect closed a connection
