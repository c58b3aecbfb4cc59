"""The Generation across 0xFFFF (draft, "Generation": never 0) against the shadow:
``run_generation_wrap`` starts two unbound entries at 0xFFFE and 0xFFFF and allocates,
frees and allocates each. It found that chains v1 (and v2 without dispatch, cx5) skipped 0
twice, to 2: both ALLOC_STORE variants' skip-0 adds tested one shared word (fixed: each
variant its own, kbtpsim/chains/alloc.py; mutant ``alloc-shared-oldw``)."""

from __future__ import annotations

import pytest

from kbtpsim.oracle.interleaving import run_generation_wrap


@pytest.mark.parametrize(("profile", "chains"), [("ideal-be", "v2"), ("ideal-be", "v1"),
                                                 ("cx5", "v2"), ("cx5", "v1")])
def test_allocations_across_the_wrap_agree_with_the_shadow(profile: str,
                                                           chains: str) -> None:
    observe: dict[str, object] = {}
    assert run_generation_wrap(profile, 1, observe=observe, chains=chains) == []
    served = observe["server"].served  # type: ignore[attr-defined]
    # every allocation on the NIC except, with chains v2 and native conditions, the one
    # at Generation 0xFFFF, which the CPU makes (decision C18)
    expect = 3 if (profile, chains) == ("ideal-be", "v2") else 4
    assert served["ALLOC_STORE"]["nic"] == expect, served
