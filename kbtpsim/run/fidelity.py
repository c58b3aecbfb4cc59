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


#: the eval scenarios the fast fidelity is validated on: (label, scenario, operations,
#: overrides); eval-ablation pins chains v1, so the default design (v2) is a case too
EVAL_SCENARIOS: tuple[tuple[str, str, int, tuple[str, ...]], ...] = (
    ("quickstart", "quickstart", 5000, ()),
    ("eval-ablation", "eval-ablation", 1000, ()),
    ("eval-ablation, chains v2", "eval-ablation", 1000, ("target.chains=v2",)),
    ("eval-block-size", "eval-block-size", 600, ()),
)


def _run(path: str, overrides: list[str], seed: int | None = None) -> dict[str, Any]:
    from kbtpsim.run.runner import run_scenario
    from kbtpsim.scenario.load import load_scenario

    return run_scenario(load_scenario(path, overrides, seed=seed)).results


def compare(path: str, operations: int,
            overrides: tuple[str, ...] = ()) -> dict[str, dict[str, float]]:
    """Fast against full fidelity on scenario ``path`` cut to ``operations`` (and with
    ``overrides``, ``--set`` strings), beside the
    same figures for full fidelity with the next seed against its own seed (the spread a
    different random stream alone gives; a fast run's first changed order sends it down
    another stream)."""
    ops = [*overrides, f"stop.operations={operations}"]
    full = _run(path, ops)
    fast = _run(path, [*ops, "run.fidelity=fast"])
    other = _run(path, ops, seed=full["seed"] + 1)
    return {"fast": fidelity_error(full, fast), "seed": fidelity_error(full, other)}


def main(argv: list[str] | None = None) -> int:
    """``python -m kbtpsim.run.fidelity [--scale S]``: the table of docs/performance.md
    ("Fast fidelity"): for each eval scenario, the largest relative error of the fast
    fidelity against the full over the operations' p50 and p99 and the throughput, and
    the same for a second seed at full fidelity."""
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(description=(main.__doc__ or "").split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every scenario's operation count (default 1)")
    args = ap.parse_args(argv)
    if args.scale <= 0:
        ap.error(f"--scale: must be positive, got {args.scale}")
    root = Path(__file__).resolve().parents[2] / "scenarios"
    print("| scenario | operations | fast vs full: p50 / p99 / throughput "
          "| seed 1 vs seed 0 (full): p50 / p99 / throughput |")
    print("|---|---:|---|---|")
    for label, name, n, overrides in EVAL_SCENARIOS:
        ops = max(20, round(n * args.scale))
        r = compare(str(root / f"{name}.yaml"), ops, overrides)

        def cell(e: dict[str, float]) -> str:
            return " / ".join(f"{100 * e[k]:.2f}%" for k in ("p50", "p99", "throughput"))

        print(f"| {label} | {ops} | {cell(r['fast'])} | {cell(r['seed'])} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
