"""Differential tests: Target against the reference model (docs/oracle.md, "The
reference model"). A bounded profile here; the long one is marked slow."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from tests.refmodel.machine import STEPS, Differential

_common = {"deadline": None, "suppress_health_check": list(HealthCheck),
           "derandomize": True, "print_blob": True}


def test_differential_bounded() -> None:
    """The default suite's profile: about 8000 steps, every one compared."""
    STEPS["steps"] = 0
    Differential.TestCase.settings = settings(max_examples=300, stateful_step_count=50,
                                              **_common)
    Differential.TestCase().runTest()
    print(f"differential steps: {STEPS['steps']}")
    assert STEPS["steps"] >= 5000


@pytest.mark.slow
def test_differential_long() -> None:
    """At least 100 k steps (``python3 -m pytest -m slow tests/refmodel``)."""
    STEPS["steps"] = 0
    Differential.TestCase.settings = settings(max_examples=3000, stateful_step_count=100,
                                              **{**_common, "derandomize": False})
    Differential.TestCase().runTest()
    print(f"differential steps: {STEPS['steps']}")
    assert STEPS["steps"] >= 100_000


def test_the_machine_catches_a_broken_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: a model that ignores INVALIDATE (draft, "Completion") is
    caught within a few sequences."""
    from hypothesis import Phase

    from kbtpsim.refmodel import model
    from tests.refmodel.pair import Divergence

    monkeypatch.setattr(model, "INVALIDATE", 1 << 20)
    Differential.TestCase.settings = settings(
        max_examples=100, stateful_step_count=50, phases=[Phase.generate],
        report_multiple_bugs=False, **{**_common, "print_blob": False})
    with pytest.raises(Divergence, match="effects differ"):
        Differential.TestCase().runTest()
