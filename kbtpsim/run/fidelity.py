"""The fast fidelity level (``run.fidelity: fast``, ``kbtpsim run --fast``): how far its
results are from the full fidelity's, and when the run should say it may not hold.

Fast fidelity books a multi-packet message's payload DMA and transmission in closed form
(:meth:`kbtpsim.nic.qp.QueuePair._tx_burst`): exact while no other QP's packet takes the
transmit unit or the link between two of the message's packets. The NICs count the
bursts that found their transmit unit busy; above :data:`CONTENDED_WARN` of them the run
warns that its figures may be further than 2% from full fidelity."""

from __future__ import annotations

from typing import Any

#: share of fast bursts that found the transmit unit busy above which the run warns
CONTENDED_WARN = 0.05


def fidelity_error(full: dict[str, Any], fast: dict[str, Any]) -> dict[str, float]:
    """Largest relative error of ``fast`` against ``full`` (two ``results.json``
    dictionaries) over the operations' p50 and p99 latencies, and of the throughput."""
    out = {"p50": 0.0, "p99": 0.0}
    for op, rec in full["operations"].items():
        other = fast["operations"].get(op)
        if not rec.get("count") or other is None:
            continue
        for q in ("p50", "p99"):
            a, b = rec["latency_ns"][q], other["latency_ns"][q]
            if a:
                out[q] = max(out[q], abs(b - a) / a)
    a, b = full["throughput"]["ops_per_s"], fast["throughput"]["ops_per_s"]
    out["throughput"] = abs(b - a) / a if a else 0.0
    return out


def contention(nics: Any) -> tuple[int, int]:
    """(bursts, contended bursts) over ``nics`` (a NIC name -> Nic mapping)."""
    bursts = sum(n.fast_bursts for n in nics.values())
    return bursts, sum(n.fast_contended for n in nics.values())


def contention_warning(nics: Any) -> str | None:
    """The warning a fast run prints when its NICs' transmit units were contended."""
    bursts, busy = contention(nics)
    if bursts and busy / bursts > CONTENDED_WARN:
        return (f"run.fidelity fast: {busy} of {bursts} packet bursts "
                f"({100 * busy / bursts:.0f}%) found a transmit unit busy; figures may be "
                "more than 2% from full fidelity (run without --fast to check)")
    return None
