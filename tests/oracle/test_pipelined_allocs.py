"""Decision C19 against the shadow: two ALLOC_STOREs and LOADs of both handles, all
outstanding at once on one connection (``run_allocs_then_loads``); an ALLOC_STORE served
by the NIC releases the next credit once its entry is bound. The random campaigns catch
mutant ``v2-early-always`` (the release without its test)."""

from __future__ import annotations

import pytest

from kbtpsim.oracle.interleaving import run_allocs_then_loads


@pytest.mark.parametrize("profile", ["ideal-be", "cx5"])
def test_allocations_and_loads_in_flight_together_agree(profile: str) -> None:
    observe: dict[str, object] = {}
    assert run_allocs_then_loads(profile, 1, observe=observe) == []
    served = observe["server"].served  # type: ignore[attr-defined]
    assert served["ALLOC_STORE"]["nic"] >= 2 and served["LOAD"]["nic"] == 4, served
