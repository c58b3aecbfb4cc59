"""kbtpsim.chains.measure: the LOAD-alone measurement behind docs/chains.md and the
sensitivity study (notebooks/chains-sensitivity.ipynb, docs/results.md)."""

from __future__ import annotations

from kbtpsim.chains.measure import measure, sensitivity


def test_both_designs_serve_the_load_on_the_nic_with_the_same_data() -> None:
    v1 = measure("cx5", "LOAD", 4096, chains="v1")  # measure checks the reference too
    v2 = measure("cx5", "LOAD", 4096, chains="v2")
    assert v1.served == v2.served == "NIC"
    assert v2.latency_ns < v1.latency_ns / 2  # v2 re-arms in place: no re-posted chain
    assert v2.refill_ns_per_op < v1.refill_ns_per_op / 100


def test_sensitivity_moves_with_the_cost_and_keeps_the_software_side() -> None:
    rows = sensitivity("loopback_ns", (0, 400), chains="v2")
    lo, hi = rows
    assert hi["offload_us"] > lo["offload_us"]  # every marker and patch is a loopback WR
    assert hi["software_us"] == lo["software_us"]  # the CPU's path has no loopback
    assert all(r["offload_cpu_ns"] < r["software_cpu_ns"] for r in rows)
    assert all(r["ratio"] > 1.2 for r in rows)  # what docs/results.md says of cx5
