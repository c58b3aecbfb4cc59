"""The mutation proof: every catalogue chain bug is caught by the oracle at run time (the
mutated chain runs unverified), in a campaign of modest size."""

from __future__ import annotations

import pytest

from kbtpsim.oracle.mutants import CATALOGUE, run_mutant, static_findings

#: what each mutant must be caught by (the first divergence's kind)
KINDS = {
    "drop-wait": {"missing", "load-data", "connection", "completion"},
    "skip-sequence": {"connection", "completion", "state", "missing", "invariant"},
    "byte-order": {"connection", "completion", "missing"},
    "swap-length-offset": {"completion"},
    "complete-early": {"load-data", "connection"},
    "skip-consume": {"state", "invariant"},
    "skip-generation": {"completion", "connection"},  # Status too: raw LOADs via STag 0
    "skip-sealed": {"completion"},
    "skip-length": {"completion", "connection"},
    "skip-quota": {"completion"},
    # served where the reference answers MALFORMED: the chain writes through STag 0
    "skip-status": {"connection", "completion"},
    "skip-session": {"connection", "completion"},
    "cas-skip-generation": {"connection", "completion"},
    "cas-skip-entry": {"connection", "completion"},
    "cas-skip-length": {"connection", "completion"},
    # chains v2 on cx5: the LOAD's own entry test, CAS-armed (C15 with CAS lowering)
    "cas-skip-load-entry": {"completion", "load-data"},
    # chains v2: the NIC's own re-arming of a credit between rounds
    "v2-skip-restore": {"connection", "completion", "state"},
    "v2-skip-wqe-restore": {"connection", "completion"},
    "v2-stale-count": {"connection", "completion", "missing", "load-data"},
    # chains v2 with dispatch: a variant's own re-arming (its advancer)
    "v2-dispatch-stale-advance": {"connection", "completion", "missing", "load-data"},
    # C27: a variant's advancer leaves the releases of its own gate where they were
    "v2-gate-stale": {"missing", "connection", "completion"},
    # chains v2: a FREE's block back in the ring while a LOAD chain still reads it (C13)
    "v2-no-quiesce": {"load-data"},
    # chains v2: the LOAD's own entry test (C15)
    "v2-load-skip-sealed": {"completion", "load-data"},
    "v2-load-recv-top": {"completion", "load-data"},
    "v2-load-recv-unguarded": {"completion", "connection", "missing"},
    "v2-load-skip-entry": {"completion", "load-data"},
    # chains v2 pipelining: an unsealed LOAD releases the next credit early (C16)
    "v2-early-unsealed": {"load-data"},
    # C31: the LOAD's opportunistic release ignores its markers (a CPU-answered LOAD's
    # COMPLETION comes after the next request's)
    "v2-early-unguarded": {"completion", "missing", "connection"},
    # the Generation across 0xFFFF (scripted: run_generation_wrap): chains v2's hand-over
    # (C18), and the skip-0 add reading the other ALLOC_STORE variant's word (found)
    "v2-alloc-genwrap": {"completion", "state"},
    # chains v2 pipelining: an ALLOC_STORE releases early even when the CPU serves it
    "v2-early-always": {"missing", "completion", "connection", "state", "load-data"},
    "alloc-shared-oldw": {"completion", "state"},
    # FREE on the NIC (C20): either side of the reader count's Dekker pair broken
    "v2-free-no-readers": {"load-data"},
    "v2-load-no-readers": {"load-data"},
    "v2-free-genwrap": {"completion", "state"},
    # chains v2's staged Read source (C24): copied into the block though the Read was cut
    "v2-staged-unchecked": {"load-data", "state"},
    # C25: a LOAD dispatched before the gate reads its entry without waiting for it (its
    # connection-QP ENABLE runs the credit ahead's WRs before they are ready)
    "v2-load-ungated": {"missing", "completion", "connection", "load-data"},
}


def test_catalogue_has_the_required_mutants() -> None:
    assert set(KINDS) == set(CATALOGUE)
    assert len(CATALOGUE) >= 13
    assert sum(m.profile == "cx5" and m.name.startswith("cas-")
               for m in CATALOGUE.values()) >= 3  # the CAS-on-WQE lowering (plain cx5)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_mutant_is_caught(name: str) -> None:
    out = run_mutant(CATALOGUE[name], seed=1)
    assert out.caught, out.row()
    first = out.result.divergences[0]
    assert first.kind in KINDS[name] | {"crash"}, out.row()  # crash: the live system failed


@pytest.mark.parametrize("name", ["v2-skip-restore", "v2-skip-wqe-restore",
                                  "v2-stale-count"])
def test_the_recycle_rules_reject_the_v2_mutants_statically(name: str) -> None:
    m = CATALOGUE[name]
    found = static_findings(m, m.profile)
    assert found and all(f.startswith("recycle-") for f in found), found


@pytest.mark.parametrize("name", ["v2-dispatch-stale-advance", "v2-gate-stale"])
def test_the_advance_rule_rejects_the_dispatch_mutants_statically(name: str) -> None:
    found = static_findings(CATALOGUE[name])
    assert found and all(f.startswith("dispatch-advanced") for f in found), found


def test_the_gated_rule_rejects_the_ungated_load_statically() -> None:
    found = static_findings(CATALOGUE["v2-load-ungated"])
    assert found and all(f.startswith("dispatch-gated") for f in found), found


def test_verifier_rejects_the_dropped_wait_statically() -> None:
    """Reported beside the run-time result: the verifier would reject some mutants."""
    assert any("held-back" in f for f in static_findings(CATALOGUE["drop-wait"]))
