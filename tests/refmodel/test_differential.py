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
    assert STEPS["steps"] >= 5000


@pytest.mark.slow
def test_differential_long() -> None:
    """At least 100 k steps (``python3 -m pytest -m slow tests/refmodel``)."""
    STEPS["steps"] = 0
    Differential.TestCase.settings = settings(max_examples=2500, stateful_step_count=60,
                                              **{**_common, "derandomize": False})
    Differential.TestCase().runTest()
    print(f"differential steps: {STEPS['steps']}")
    assert STEPS["steps"] >= 100_000
